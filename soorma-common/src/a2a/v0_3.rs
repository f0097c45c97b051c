//! Rendering a v1.0 card in the A2A v0.3.0 JSON shape.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    AgentCard, AgentCardSignature, AgentExtension, AgentInterface, AgentProvider, AgentSkill,
    OAuthFlows, SecurityRequirement, SecurityScheme,
};

/// The protocol version a v0.3 rendering declares (`"0.3.0"`).
///
/// ```
/// assert_eq!(soorma_common::a2a::V0_3_PROTOCOL_VERSION, "0.3.0");
/// ```
pub const V0_3_PROTOCOL_VERSION: &str = "0.3.0";

/// A card rendered in the A2A v0.3.0 shape; serialize it to get the JSON. Made by
/// [`AgentCard::to_v0_3`].
///
/// ```
/// use soorma_common::a2a::{AgentCard, AgentInterface, AgentSkill};
/// let card = AgentCard::new("Echo", "Echoes text.", "1.0.0")
///     .with_interface(AgentInterface::jsonrpc("https://echo.example.com/a2a"))
///     .with_default_input_modes(["text/plain"])
///     .with_default_output_modes(["text/plain"])
///     .with_skill(AgentSkill::new("echo", "Echo", "Echoes text.").with_tag("echo"));
/// let json = serde_json::to_value(card.to_v0_3()).unwrap();
/// assert_eq!(json["protocolVersion"], "0.3.0");
/// assert_eq!(json["preferredTransport"], "JSONRPC");
/// ```
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCardV03<'a> {
    name: &'a str,
    description: &'a str,
    url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    preferred_transport: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    additional_interfaces: Vec<InterfaceV03<'a>>,
    protocol_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<&'a AgentProvider>,
    version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    documentation_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    icon_url: Option<&'a str>,
    capabilities: CapabilitiesV03<'a>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    security_schemes: BTreeMap<&'a str, SchemeV03<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    security: Vec<RequirementV03<'a>>,
    default_input_modes: &'a [String],
    default_output_modes: &'a [String],
    skills: Vec<SkillV03<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    supports_authenticated_extended_card: Option<bool>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    signatures: &'a [AgentCardSignature],
}

#[derive(Debug, Clone, Serialize)]
struct InterfaceV03<'a> {
    url: &'a str,
    transport: &'a str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct CapabilitiesV03<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    streaming: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    push_notifications: Option<bool>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    extensions: &'a [AgentExtension],
}

type RequirementV03<'a> = BTreeMap<&'a str, &'a [String]>;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct SkillV03<'a> {
    id: &'a str,
    name: &'a str,
    description: &'a str,
    tags: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    examples: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    input_modes: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    output_modes: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    security: Vec<RequirementV03<'a>>,
}

/// A v0.3 security scheme: the OpenAPI-style object with a `type` discriminator.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
enum SchemeV03<'a> {
    #[serde(rename = "apiKey")]
    ApiKey {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        #[serde(rename = "in")]
        location: &'static str,
        name: &'a str,
    },
    #[serde(rename = "http", rename_all = "camelCase")]
    Http {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        scheme: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        bearer_format: Option<&'a str>,
    },
    #[serde(rename = "oauth2", rename_all = "camelCase")]
    OAuth2 {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        flows: Map<String, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        oauth2_metadata_url: Option<&'a str>,
    },
    #[serde(rename = "openIdConnect", rename_all = "camelCase")]
    OpenIdConnect {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        open_id_connect_url: &'a str,
    },
    #[serde(rename = "mutualTLS")]
    MutualTls {
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
    },
}

impl AgentCard {
    /// Renders the card for A2A v0.3.0 clients.
    ///
    /// - Interfaces: if any interface declares protocol version `0.3` (or `0.3.x`), only those
    ///   are used (they are the endpoints that speak v0.3); otherwise all interfaces are. The
    ///   first becomes `url` / `preferredTransport`, and all of them are listed in
    ///   `additionalInterfaces` as `{url, transport}`. `tenant` has no v0.3 equivalent.
    /// - `protocolVersion` is `"0.3.0"`; `capabilities.extendedAgentCard` becomes the top-level
    ///   `supportsAuthenticatedExtendedCard`.
    /// - Security schemes become OpenAPI-style objects with a `type` (`apiKey` with `in`,
    ///   `http`, `oauth2`, `openIdConnect`, `mutualTLS`); requirements become
    ///   `security: [{"scheme": ["scope", ...]}]`, on the card and on skills. The v1-only
    ///   device-code OAuth flow and `pkceRequired` have no v0.3 form and are left out (a scheme
    ///   with only a device-code flow renders with empty `flows`).
    /// - Everything else keeps its name and shape.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentInterface, AgentSkill, SecurityRequirement, SecurityScheme};
    /// let card = AgentCard::new("Echo", "Echoes text.", "1.0.0")
    ///     .with_interface(AgentInterface::jsonrpc("https://echo.example.com/a2a"))
    ///     .with_interface(
    ///         AgentInterface::jsonrpc("https://echo.example.com/a2a/v0.3").with_protocol_version("0.3"),
    ///     )
    ///     .with_security_scheme("key", SecurityScheme::api_key_header("X-API-Key"))
    ///     .with_security_requirement(SecurityRequirement::new().with_scheme("key", [] as [&str; 0]))
    ///     .with_default_input_modes(["text/plain"])
    ///     .with_default_output_modes(["text/plain"])
    ///     .with_skill(AgentSkill::new("echo", "Echo", "Echoes text.").with_tag("echo"));
    /// let json = serde_json::to_value(card.to_v0_3()).unwrap();
    /// assert_eq!(json["url"], "https://echo.example.com/a2a/v0.3");
    /// assert_eq!(
    ///     json["securitySchemes"]["key"],
    ///     serde_json::json!({"type": "apiKey", "in": "header", "name": "X-API-Key"})
    /// );
    /// assert_eq!(json["security"], serde_json::json!([{"key": []}]));
    /// ```
    pub fn to_v0_3(&self) -> AgentCardV03<'_> {
        let legacy: Vec<&AgentInterface> = self
            .supported_interfaces
            .iter()
            .filter(|i| i.protocol_version == "0.3" || i.protocol_version.starts_with("0.3."))
            .collect();
        let interfaces = if legacy.is_empty() {
            self.supported_interfaces.iter().collect()
        } else {
            legacy
        };
        let preferred = interfaces.first();
        AgentCardV03 {
            name: &self.name,
            description: &self.description,
            url: preferred.map_or("", |i| i.url.as_str()),
            preferred_transport: preferred.map(|i| i.protocol_binding.as_str()),
            additional_interfaces: interfaces
                .iter()
                .map(|i| InterfaceV03 {
                    url: &i.url,
                    transport: &i.protocol_binding,
                })
                .collect(),
            protocol_version: V0_3_PROTOCOL_VERSION,
            provider: self.provider.as_ref(),
            version: &self.version,
            documentation_url: self.documentation_url.as_deref(),
            icon_url: self.icon_url.as_deref(),
            capabilities: CapabilitiesV03 {
                streaming: self.capabilities.streaming,
                push_notifications: self.capabilities.push_notifications,
                extensions: &self.capabilities.extensions,
            },
            security_schemes: self
                .security_schemes
                .iter()
                .map(|(name, scheme)| (name.as_str(), scheme_v03(scheme)))
                .collect(),
            security: requirements_v03(&self.security_requirements),
            default_input_modes: &self.default_input_modes,
            default_output_modes: &self.default_output_modes,
            skills: self.skills.iter().map(skill_v03).collect(),
            supports_authenticated_extended_card: self.capabilities.extended_agent_card,
            signatures: &self.signatures,
        }
    }
}

fn requirements_v03(requirements: &[SecurityRequirement]) -> Vec<RequirementV03<'_>> {
    requirements
        .iter()
        .map(|req| {
            req.schemes
                .iter()
                .map(|(name, scopes)| (name.as_str(), scopes.list.as_slice()))
                .collect()
        })
        .collect()
}

fn skill_v03(skill: &AgentSkill) -> SkillV03<'_> {
    SkillV03 {
        id: &skill.id,
        name: &skill.name,
        description: &skill.description,
        tags: &skill.tags,
        examples: &skill.examples,
        input_modes: &skill.input_modes,
        output_modes: &skill.output_modes,
        security: requirements_v03(&skill.security_requirements),
    }
}

fn scheme_v03(scheme: &SecurityScheme) -> SchemeV03<'_> {
    match scheme {
        SecurityScheme::ApiKey(key) => SchemeV03::ApiKey {
            description: key.description.as_deref(),
            location: key.location.as_str(),
            name: &key.name,
        },
        SecurityScheme::HttpAuth(http) => SchemeV03::Http {
            description: http.description.as_deref(),
            scheme: &http.scheme,
            bearer_format: http.bearer_format.as_deref(),
        },
        SecurityScheme::OAuth2(oauth) => SchemeV03::OAuth2 {
            description: oauth.description.as_deref(),
            flows: flows_v03(&oauth.flows),
            oauth2_metadata_url: oauth.oauth2_metadata_url.as_deref(),
        },
        SecurityScheme::OpenIdConnect(oidc) => SchemeV03::OpenIdConnect {
            description: oidc.description.as_deref(),
            open_id_connect_url: &oidc.open_id_connect_url,
        },
        SecurityScheme::MutualTls(mtls) => SchemeV03::MutualTls {
            description: mtls.description.as_deref(),
        },
    }
}

/// v0.3 `OAuthFlows`: an object with one optional key per flow; same flow field names as v1.
fn flows_v03(flows: &OAuthFlows) -> Map<String, Value> {
    fn flow(
        authorization_url: Option<&str>,
        token_url: Option<&str>,
        refresh_url: Option<&str>,
        scopes: &BTreeMap<String, String>,
    ) -> Value {
        let mut out = Map::new();
        let urls = [
            ("authorizationUrl", authorization_url),
            ("tokenUrl", token_url),
            ("refreshUrl", refresh_url),
        ];
        for (key, url) in urls {
            if let Some(url) = url {
                out.insert(key.to_owned(), Value::String(url.to_owned()));
            }
        }
        let scopes = scopes
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        out.insert("scopes".to_owned(), Value::Object(scopes));
        Value::Object(out)
    }
    let (key, value) = match flows {
        OAuthFlows::AuthorizationCode(f) => (
            "authorizationCode",
            flow(
                Some(&f.authorization_url),
                Some(&f.token_url),
                f.refresh_url.as_deref(),
                &f.scopes,
            ),
        ),
        OAuthFlows::ClientCredentials(f) => (
            "clientCredentials",
            flow(
                None,
                Some(&f.token_url),
                f.refresh_url.as_deref(),
                &f.scopes,
            ),
        ),
        OAuthFlows::Implicit(f) => (
            "implicit",
            flow(
                f.authorization_url.as_deref(),
                None,
                f.refresh_url.as_deref(),
                &f.scopes,
            ),
        ),
        OAuthFlows::Password(f) => (
            "password",
            flow(
                None,
                f.token_url.as_deref(),
                f.refresh_url.as_deref(),
                &f.scopes,
            ),
        ),
        OAuthFlows::DeviceCode(_) => return Map::new(),
    };
    let mut out = Map::new();
    out.insert(key.to_owned(), value);
    out
}
