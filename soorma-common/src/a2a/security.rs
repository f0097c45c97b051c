//! Security schemes (how clients authenticate) and security requirements (which schemes a
//! request must satisfy).
//!
//! `SecurityScheme` and `OAuthFlows` are protobuf `oneof`s; their JSON form is an object with
//! exactly one key naming the variant, as in the specification's sample card:
//! `{"openIdConnectSecurityScheme": {"openIdConnectUrl": "..."}}`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a client authenticates, keyed by name in [`AgentCard::security_schemes`].
///
/// [`AgentCard::security_schemes`]: super::AgentCard::security_schemes
///
/// ```
/// use soorma_common::a2a::SecurityScheme;
/// let scheme = SecurityScheme::api_key_header("X-API-Key");
/// assert_eq!(
///     serde_json::to_value(&scheme).unwrap(),
///     serde_json::json!({"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub enum SecurityScheme {
    /// An API key in a header, query parameter or cookie.
    #[serde(rename = "apiKeySecurityScheme")]
    ApiKey(ApiKeySecurityScheme),
    /// HTTP authentication (`Bearer`, `Basic`, ...).
    #[serde(rename = "httpAuthSecurityScheme")]
    HttpAuth(HttpAuthSecurityScheme),
    /// OAuth 2.0.
    #[serde(rename = "oauth2SecurityScheme")]
    OAuth2(OAuth2SecurityScheme),
    /// OpenID Connect.
    #[serde(rename = "openIdConnectSecurityScheme")]
    OpenIdConnect(OpenIdConnectSecurityScheme),
    /// Mutual TLS.
    #[serde(rename = "mtlsSecurityScheme")]
    MutualTls(MutualTlsSecurityScheme),
}

impl SecurityScheme {
    /// An API key sent in the named HTTP header.
    ///
    /// ```
    /// use soorma_common::a2a::{ApiKeyLocation, SecurityScheme};
    /// let SecurityScheme::ApiKey(key) = SecurityScheme::api_key_header("X-API-Key") else {
    ///     unreachable!()
    /// };
    /// assert_eq!(key.location, ApiKeyLocation::Header);
    /// ```
    pub fn api_key_header(header_name: impl Into<String>) -> Self {
        Self::ApiKey(ApiKeySecurityScheme::new(
            ApiKeyLocation::Header,
            header_name,
        ))
    }

    /// HTTP `Bearer` authentication.
    ///
    /// ```
    /// use soorma_common::a2a::SecurityScheme;
    /// assert_eq!(
    ///     serde_json::to_value(SecurityScheme::bearer()).unwrap(),
    ///     serde_json::json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}})
    /// );
    /// ```
    pub fn bearer() -> Self {
        Self::HttpAuth(HttpAuthSecurityScheme::new("Bearer"))
    }

    /// OpenID Connect with the provider's discovery URL.
    ///
    /// ```
    /// use soorma_common::a2a::SecurityScheme;
    /// let scheme = SecurityScheme::open_id_connect(
    ///     "https://accounts.google.com/.well-known/openid-configuration",
    /// );
    /// assert!(matches!(scheme, SecurityScheme::OpenIdConnect(_)));
    /// ```
    pub fn open_id_connect(open_id_connect_url: impl Into<String>) -> Self {
        Self::OpenIdConnect(OpenIdConnectSecurityScheme::new(open_id_connect_url))
    }

    /// Mutual TLS.
    ///
    /// ```
    /// use soorma_common::a2a::SecurityScheme;
    /// assert_eq!(
    ///     serde_json::to_value(SecurityScheme::mutual_tls()).unwrap(),
    ///     serde_json::json!({"mtlsSecurityScheme": {}})
    /// );
    /// ```
    pub fn mutual_tls() -> Self {
        Self::MutualTls(MutualTlsSecurityScheme::new())
    }
}

impl From<ApiKeySecurityScheme> for SecurityScheme {
    /// Wraps an API key scheme.
    ///
    /// ```
    /// use soorma_common::a2a::{ApiKeyLocation, ApiKeySecurityScheme, SecurityScheme};
    /// let s: SecurityScheme = ApiKeySecurityScheme::new(ApiKeyLocation::Query, "key").into();
    /// assert!(matches!(s, SecurityScheme::ApiKey(_)));
    /// ```
    fn from(scheme: ApiKeySecurityScheme) -> Self {
        Self::ApiKey(scheme)
    }
}

impl From<HttpAuthSecurityScheme> for SecurityScheme {
    /// Wraps an HTTP authentication scheme.
    ///
    /// ```
    /// use soorma_common::a2a::{HttpAuthSecurityScheme, SecurityScheme};
    /// let s: SecurityScheme = HttpAuthSecurityScheme::new("Basic").into();
    /// assert!(matches!(s, SecurityScheme::HttpAuth(_)));
    /// ```
    fn from(scheme: HttpAuthSecurityScheme) -> Self {
        Self::HttpAuth(scheme)
    }
}

impl From<OAuth2SecurityScheme> for SecurityScheme {
    /// Wraps an OAuth 2.0 scheme.
    ///
    /// ```
    /// use soorma_common::a2a::*;
    /// let flow = ClientCredentialsOAuthFlow::new("https://auth.example.com/token");
    /// let s: SecurityScheme = OAuth2SecurityScheme::new(OAuthFlows::ClientCredentials(flow)).into();
    /// assert!(matches!(s, SecurityScheme::OAuth2(_)));
    /// ```
    fn from(scheme: OAuth2SecurityScheme) -> Self {
        Self::OAuth2(scheme)
    }
}

impl From<OpenIdConnectSecurityScheme> for SecurityScheme {
    /// Wraps an OpenID Connect scheme.
    ///
    /// ```
    /// use soorma_common::a2a::{OpenIdConnectSecurityScheme, SecurityScheme};
    /// let s: SecurityScheme = OpenIdConnectSecurityScheme::new("https://id.example/.well-known/openid-configuration").into();
    /// assert!(matches!(s, SecurityScheme::OpenIdConnect(_)));
    /// ```
    fn from(scheme: OpenIdConnectSecurityScheme) -> Self {
        Self::OpenIdConnect(scheme)
    }
}

impl From<MutualTlsSecurityScheme> for SecurityScheme {
    /// Wraps a mutual TLS scheme.
    ///
    /// ```
    /// use soorma_common::a2a::{MutualTlsSecurityScheme, SecurityScheme};
    /// let s: SecurityScheme = MutualTlsSecurityScheme::new().into();
    /// assert!(matches!(s, SecurityScheme::MutualTls(_)));
    /// ```
    fn from(scheme: MutualTlsSecurityScheme) -> Self {
        Self::MutualTls(scheme)
    }
}

/// Where an API key travels.
///
/// ```
/// use soorma_common::a2a::ApiKeyLocation;
/// assert_eq!(serde_json::to_string(&ApiKeyLocation::Header).unwrap(), "\"header\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ApiKeyLocation {
    /// A query parameter.
    Query,
    /// An HTTP header.
    Header,
    /// A cookie.
    Cookie,
}

impl ApiKeyLocation {
    /// The wire name (`"query"`, `"header"`, `"cookie"`).
    ///
    /// ```
    /// assert_eq!(soorma_common::a2a::ApiKeyLocation::Cookie.as_str(), "cookie");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Header => "header",
            Self::Cookie => "cookie",
        }
    }
}

/// API key authentication.
///
/// ```
/// use soorma_common::a2a::{ApiKeyLocation, ApiKeySecurityScheme};
/// let key = ApiKeySecurityScheme::new(ApiKeyLocation::Header, "X-API-Key")
///     .with_description("Issued by the platform team");
/// assert_eq!(key.name, "X-API-Key");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ApiKeySecurityScheme {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the key travels.
    pub location: ApiKeyLocation,
    /// The header, query parameter or cookie name.
    pub name: String,
}

impl ApiKeySecurityScheme {
    /// A key at `location` under `name`.
    ///
    /// ```
    /// use soorma_common::a2a::{ApiKeyLocation, ApiKeySecurityScheme};
    /// let key = ApiKeySecurityScheme::new(ApiKeyLocation::Query, "api_key");
    /// assert_eq!(key.location.as_str(), "query");
    /// ```
    pub fn new(location: ApiKeyLocation, name: impl Into<String>) -> Self {
        Self {
            description: None,
            location,
            name: name.into(),
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::{ApiKeyLocation, ApiKeySecurityScheme};
    /// let key = ApiKeySecurityScheme::new(ApiKeyLocation::Header, "k").with_description("d");
    /// assert_eq!(key.description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// HTTP authentication (RFC 7235), such as `Bearer` or `Basic`.
///
/// ```
/// use soorma_common::a2a::HttpAuthSecurityScheme;
/// let http = HttpAuthSecurityScheme::new("Bearer").with_bearer_format("JWT");
/// assert_eq!(
///     serde_json::to_value(&http).unwrap(),
///     serde_json::json!({"scheme": "Bearer", "bearerFormat": "JWT"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HttpAuthSecurityScheme {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The IANA-registered scheme name used in the `Authorization` header.
    pub scheme: String,
    /// How bearer tokens are formatted (for example `"JWT"`); documentation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_format: Option<String>,
}

impl HttpAuthSecurityScheme {
    /// The named scheme.
    ///
    /// ```
    /// use soorma_common::a2a::HttpAuthSecurityScheme;
    /// assert_eq!(HttpAuthSecurityScheme::new("Basic").scheme, "Basic");
    /// ```
    pub fn new(scheme: impl Into<String>) -> Self {
        Self {
            description: None,
            scheme: scheme.into(),
            bearer_format: None,
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::HttpAuthSecurityScheme;
    /// let http = HttpAuthSecurityScheme::new("Bearer").with_description("d");
    /// assert_eq!(http.description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the bearer token format hint.
    ///
    /// ```
    /// use soorma_common::a2a::HttpAuthSecurityScheme;
    /// let http = HttpAuthSecurityScheme::new("Bearer").with_bearer_format("JWT");
    /// assert_eq!(http.bearer_format.as_deref(), Some("JWT"));
    /// ```
    #[must_use]
    pub fn with_bearer_format(mut self, bearer_format: impl Into<String>) -> Self {
        self.bearer_format = Some(bearer_format.into());
        self
    }
}

/// OAuth 2.0 authentication.
///
/// ```
/// use soorma_common::a2a::{ClientCredentialsOAuthFlow, OAuth2SecurityScheme, OAuthFlows};
/// let oauth = OAuth2SecurityScheme::new(OAuthFlows::ClientCredentials(
///     ClientCredentialsOAuthFlow::new("https://auth.example.com/token").with_scope("read", "Read"),
/// ));
/// assert_eq!(
///     serde_json::to_value(&oauth).unwrap(),
///     serde_json::json!({"flows": {"clientCredentials": {
///         "tokenUrl": "https://auth.example.com/token",
///         "scopes": {"read": "Read"}
///     }}})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OAuth2SecurityScheme {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The supported flow.
    pub flows: OAuthFlows,
    /// URL of the authorization server metadata (RFC 8414).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2_metadata_url: Option<String>,
}

impl OAuth2SecurityScheme {
    /// A scheme with the given flow.
    ///
    /// ```
    /// use soorma_common::a2a::*;
    /// let oauth = OAuth2SecurityScheme::new(OAuthFlows::DeviceCode(DeviceCodeOAuthFlow::new(
    ///     "https://auth.example.com/device",
    ///     "https://auth.example.com/token",
    /// )));
    /// assert!(oauth.oauth2_metadata_url.is_none());
    /// ```
    pub fn new(flows: OAuthFlows) -> Self {
        Self {
            description: None,
            flows,
            oauth2_metadata_url: None,
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::*;
    /// let flow = ClientCredentialsOAuthFlow::new("https://auth.example.com/token");
    /// let oauth = OAuth2SecurityScheme::new(OAuthFlows::ClientCredentials(flow)).with_description("d");
    /// assert_eq!(oauth.description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the authorization server metadata URL.
    ///
    /// ```
    /// use soorma_common::a2a::*;
    /// let flow = ClientCredentialsOAuthFlow::new("https://auth.example.com/token");
    /// let oauth = OAuth2SecurityScheme::new(OAuthFlows::ClientCredentials(flow))
    ///     .with_oauth2_metadata_url("https://auth.example.com/.well-known/oauth-authorization-server");
    /// assert!(oauth.oauth2_metadata_url.is_some());
    /// ```
    #[must_use]
    pub fn with_oauth2_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.oauth2_metadata_url = Some(url.into());
        self
    }
}

/// The OAuth 2.0 flow a scheme supports (one per scheme, as in the v1.0 protocol).
///
/// ```
/// use soorma_common::a2a::{AuthorizationCodeOAuthFlow, OAuthFlows};
/// let flows = OAuthFlows::AuthorizationCode(
///     AuthorizationCodeOAuthFlow::new("https://auth.example.com/authorize", "https://auth.example.com/token")
///         .with_pkce_required(true),
/// );
/// let json = serde_json::to_value(&flows).unwrap();
/// assert_eq!(json["authorizationCode"]["pkceRequired"], true);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum OAuthFlows {
    /// The authorization code flow (use it with PKCE).
    AuthorizationCode(AuthorizationCodeOAuthFlow),
    /// The client credentials flow.
    ClientCredentials(ClientCredentialsOAuthFlow),
    /// The implicit flow (deprecated by the protocol: use authorization code + PKCE).
    Implicit(ImplicitOAuthFlow),
    /// The resource owner password flow (deprecated by the protocol).
    Password(PasswordOAuthFlow),
    /// The device code flow (RFC 8628).
    DeviceCode(DeviceCodeOAuthFlow),
}

/// The OAuth 2.0 authorization code flow.
///
/// ```
/// use soorma_common::a2a::AuthorizationCodeOAuthFlow;
/// let flow = AuthorizationCodeOAuthFlow::new("https://a.example/authorize", "https://a.example/token")
///     .with_scope("read", "Read access");
/// assert_eq!(flow.scopes["read"], "Read access");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AuthorizationCodeOAuthFlow {
    /// The authorization endpoint.
    pub authorization_url: String,
    /// The token endpoint.
    pub token_url: String,
    /// The refresh endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_url: Option<String>,
    /// Scope name → description.
    pub scopes: BTreeMap<String, String>,
    /// Whether PKCE (RFC 7636) is required (omitted when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub pkce_required: bool,
}

impl AuthorizationCodeOAuthFlow {
    /// A flow with no scopes and PKCE not required.
    ///
    /// ```
    /// use soorma_common::a2a::AuthorizationCodeOAuthFlow;
    /// let flow = AuthorizationCodeOAuthFlow::new("https://a.example/authorize", "https://a.example/token");
    /// assert!(flow.scopes.is_empty());
    /// ```
    pub fn new(authorization_url: impl Into<String>, token_url: impl Into<String>) -> Self {
        Self {
            authorization_url: authorization_url.into(),
            token_url: token_url.into(),
            refresh_url: None,
            scopes: BTreeMap::new(),
            pkce_required: false,
        }
    }

    /// Adds a scope.
    ///
    /// ```
    /// use soorma_common::a2a::AuthorizationCodeOAuthFlow;
    /// let flow = AuthorizationCodeOAuthFlow::new("https://a/authorize", "https://a/token").with_scope("s", "d");
    /// assert_eq!(flow.scopes.len(), 1);
    /// ```
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<String>, description: impl Into<String>) -> Self {
        self.scopes.insert(scope.into(), description.into());
        self
    }

    /// Sets the refresh URL.
    ///
    /// ```
    /// use soorma_common::a2a::AuthorizationCodeOAuthFlow;
    /// let flow = AuthorizationCodeOAuthFlow::new("https://a/authorize", "https://a/token")
    ///     .with_refresh_url("https://a/refresh");
    /// assert!(flow.refresh_url.is_some());
    /// ```
    #[must_use]
    pub fn with_refresh_url(mut self, refresh_url: impl Into<String>) -> Self {
        self.refresh_url = Some(refresh_url.into());
        self
    }

    /// Sets whether PKCE is required.
    ///
    /// ```
    /// use soorma_common::a2a::AuthorizationCodeOAuthFlow;
    /// let flow = AuthorizationCodeOAuthFlow::new("https://a/authorize", "https://a/token")
    ///     .with_pkce_required(true);
    /// assert!(flow.pkce_required);
    /// ```
    #[must_use]
    pub fn with_pkce_required(mut self, pkce_required: bool) -> Self {
        self.pkce_required = pkce_required;
        self
    }
}

/// The OAuth 2.0 client credentials flow.
///
/// ```
/// use soorma_common::a2a::ClientCredentialsOAuthFlow;
/// let flow = ClientCredentialsOAuthFlow::new("https://a.example/token").with_scope("read", "Read");
/// assert_eq!(flow.token_url, "https://a.example/token");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClientCredentialsOAuthFlow {
    /// The token endpoint.
    pub token_url: String,
    /// The refresh endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_url: Option<String>,
    /// Scope name → description.
    pub scopes: BTreeMap<String, String>,
}

impl ClientCredentialsOAuthFlow {
    /// A flow with no scopes.
    ///
    /// ```
    /// use soorma_common::a2a::ClientCredentialsOAuthFlow;
    /// assert!(ClientCredentialsOAuthFlow::new("https://a/token").scopes.is_empty());
    /// ```
    pub fn new(token_url: impl Into<String>) -> Self {
        Self {
            token_url: token_url.into(),
            refresh_url: None,
            scopes: BTreeMap::new(),
        }
    }

    /// Adds a scope.
    ///
    /// ```
    /// use soorma_common::a2a::ClientCredentialsOAuthFlow;
    /// assert_eq!(ClientCredentialsOAuthFlow::new("https://a/token").with_scope("s", "d").scopes.len(), 1);
    /// ```
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<String>, description: impl Into<String>) -> Self {
        self.scopes.insert(scope.into(), description.into());
        self
    }

    /// Sets the refresh URL.
    ///
    /// ```
    /// use soorma_common::a2a::ClientCredentialsOAuthFlow;
    /// let flow = ClientCredentialsOAuthFlow::new("https://a/token").with_refresh_url("https://a/refresh");
    /// assert!(flow.refresh_url.is_some());
    /// ```
    #[must_use]
    pub fn with_refresh_url(mut self, refresh_url: impl Into<String>) -> Self {
        self.refresh_url = Some(refresh_url.into());
        self
    }
}

/// The OAuth 2.0 implicit flow (deprecated by the protocol; kept to read older cards).
///
/// ```
/// use soorma_common::a2a::ImplicitOAuthFlow;
/// let flow = ImplicitOAuthFlow::new("https://a.example/authorize");
/// assert_eq!(flow.authorization_url.as_deref(), Some("https://a.example/authorize"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ImplicitOAuthFlow {
    /// The authorization endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
    /// The refresh endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_url: Option<String>,
    /// Scope name → description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

impl ImplicitOAuthFlow {
    /// A flow with the given authorization endpoint and no scopes.
    ///
    /// ```
    /// use soorma_common::a2a::ImplicitOAuthFlow;
    /// assert!(ImplicitOAuthFlow::new("https://a/authorize").scopes.is_empty());
    /// ```
    pub fn new(authorization_url: impl Into<String>) -> Self {
        Self {
            authorization_url: Some(authorization_url.into()),
            ..Self::default()
        }
    }
}

/// The OAuth 2.0 resource owner password flow (deprecated by the protocol; kept to read older
/// cards).
///
/// ```
/// use soorma_common::a2a::PasswordOAuthFlow;
/// let flow = PasswordOAuthFlow::new("https://a.example/token");
/// assert_eq!(flow.token_url.as_deref(), Some("https://a.example/token"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PasswordOAuthFlow {
    /// The token endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    /// The refresh endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_url: Option<String>,
    /// Scope name → description.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scopes: BTreeMap<String, String>,
}

impl PasswordOAuthFlow {
    /// A flow with the given token endpoint and no scopes.
    ///
    /// ```
    /// use soorma_common::a2a::PasswordOAuthFlow;
    /// assert!(PasswordOAuthFlow::new("https://a/token").refresh_url.is_none());
    /// ```
    pub fn new(token_url: impl Into<String>) -> Self {
        Self {
            token_url: Some(token_url.into()),
            ..Self::default()
        }
    }
}

/// The OAuth 2.0 device authorization flow (RFC 8628).
///
/// ```
/// use soorma_common::a2a::DeviceCodeOAuthFlow;
/// let flow = DeviceCodeOAuthFlow::new("https://a.example/device", "https://a.example/token")
///     .with_scope("read", "Read");
/// assert_eq!(flow.device_authorization_url, "https://a.example/device");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DeviceCodeOAuthFlow {
    /// The device authorization endpoint.
    pub device_authorization_url: String,
    /// The token endpoint.
    pub token_url: String,
    /// The refresh endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_url: Option<String>,
    /// Scope name → description.
    pub scopes: BTreeMap<String, String>,
}

impl DeviceCodeOAuthFlow {
    /// A flow with no scopes.
    ///
    /// ```
    /// use soorma_common::a2a::DeviceCodeOAuthFlow;
    /// assert!(DeviceCodeOAuthFlow::new("https://a/device", "https://a/token").scopes.is_empty());
    /// ```
    pub fn new(device_authorization_url: impl Into<String>, token_url: impl Into<String>) -> Self {
        Self {
            device_authorization_url: device_authorization_url.into(),
            token_url: token_url.into(),
            refresh_url: None,
            scopes: BTreeMap::new(),
        }
    }

    /// Adds a scope.
    ///
    /// ```
    /// use soorma_common::a2a::DeviceCodeOAuthFlow;
    /// let flow = DeviceCodeOAuthFlow::new("https://a/device", "https://a/token").with_scope("s", "d");
    /// assert_eq!(flow.scopes.len(), 1);
    /// ```
    #[must_use]
    pub fn with_scope(mut self, scope: impl Into<String>, description: impl Into<String>) -> Self {
        self.scopes.insert(scope.into(), description.into());
        self
    }
}

/// OpenID Connect authentication.
///
/// ```
/// use soorma_common::a2a::OpenIdConnectSecurityScheme;
/// let oidc = OpenIdConnectSecurityScheme::new("https://accounts.google.com/.well-known/openid-configuration");
/// assert_eq!(
///     serde_json::to_value(&oidc).unwrap(),
///     serde_json::json!({"openIdConnectUrl": "https://accounts.google.com/.well-known/openid-configuration"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OpenIdConnectSecurityScheme {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The provider's OpenID Connect discovery URL.
    pub open_id_connect_url: String,
}

impl OpenIdConnectSecurityScheme {
    /// A scheme with the provider's discovery URL.
    ///
    /// ```
    /// use soorma_common::a2a::OpenIdConnectSecurityScheme;
    /// assert!(OpenIdConnectSecurityScheme::new("https://id/.well-known/openid-configuration").description.is_none());
    /// ```
    pub fn new(open_id_connect_url: impl Into<String>) -> Self {
        Self {
            description: None,
            open_id_connect_url: open_id_connect_url.into(),
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::OpenIdConnectSecurityScheme;
    /// let oidc = OpenIdConnectSecurityScheme::new("https://id/.well-known/openid-configuration")
    ///     .with_description("d");
    /// assert_eq!(oidc.description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Mutual TLS authentication.
///
/// ```
/// use soorma_common::a2a::MutualTlsSecurityScheme;
/// let mtls = MutualTlsSecurityScheme::new().with_description("Client certificates from our CA");
/// assert!(mtls.description.is_some());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MutualTlsSecurityScheme {
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl MutualTlsSecurityScheme {
    /// A scheme with no description.
    ///
    /// ```
    /// use soorma_common::a2a::MutualTlsSecurityScheme;
    /// assert!(MutualTlsSecurityScheme::new().description.is_none());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::MutualTlsSecurityScheme;
    /// assert_eq!(MutualTlsSecurityScheme::new().with_description("d").description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// A list of strings (the protocol's `StringList`: `{"list": [...]}`), used for the scopes of
/// a [`SecurityRequirement`].
///
/// ```
/// use soorma_common::a2a::StringList;
/// let scopes = StringList::from(vec!["openid".to_owned()]);
/// assert_eq!(serde_json::to_value(&scopes).unwrap(), serde_json::json!({"list": ["openid"]}));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StringList {
    /// The strings (omitted when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<String>,
}

impl From<Vec<String>> for StringList {
    /// Wraps a vector.
    ///
    /// ```
    /// use soorma_common::a2a::StringList;
    /// assert!(StringList::from(Vec::new()).list.is_empty());
    /// ```
    fn from(list: Vec<String>) -> Self {
        Self { list }
    }
}

/// One acceptable combination of security schemes: every scheme named here must be satisfied,
/// with the listed scopes. A list of requirements means "any one of them".
///
/// ```
/// use soorma_common::a2a::SecurityRequirement;
/// let req = SecurityRequirement::new().with_scheme("google", ["openid", "profile"]);
/// assert_eq!(
///     serde_json::to_value(&req).unwrap(),
///     serde_json::json!({"schemes": {"google": {"list": ["openid", "profile"]}}})
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SecurityRequirement {
    /// Scheme name (a key of the card's `securitySchemes`) → required scopes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemes: BTreeMap<String, StringList>,
}

impl SecurityRequirement {
    /// A requirement naming no scheme yet.
    ///
    /// ```
    /// use soorma_common::a2a::SecurityRequirement;
    /// assert!(SecurityRequirement::new().schemes.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires `scheme` with `scopes` (pass an empty list for schemes without scopes).
    ///
    /// ```
    /// use soorma_common::a2a::SecurityRequirement;
    /// let req = SecurityRequirement::new().with_scheme("apiKey", [] as [&str; 0]);
    /// assert_eq!(serde_json::to_value(&req).unwrap(), serde_json::json!({"schemes": {"apiKey": {}}}));
    /// ```
    #[must_use]
    pub fn with_scheme<I, S>(mut self, scheme: impl Into<String>, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let list = scopes.into_iter().map(Into::into).collect();
        self.schemes.insert(scheme.into(), StringList { list });
        self
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}
