//! `CardBuilder`: an A2A agent card from a soorma [`AgentDefinition`].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{
    AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentProvider, AgentSkill,
    CardError, MEDIA_TYPE_JSON, MEDIA_TYPE_TEXT, SecurityRequirement, SecurityScheme,
};
use crate::{AgentCapability, AgentDefinition, AgentKind};

/// URI of the soorma extension that carries each skill's JSON Schemas.
///
/// A v1.0 `AgentSkill` has no schema or metadata field, so [`CardBuilder`] declares this
/// extension in `capabilities.extensions` with `params` of the form
/// `{"skills": {"<skill id>": {"inputSchema": {...}, "outputSchema": {...}}}}`: the input schema
/// is the capability's consumed-event payload schema, the output schema its response (result)
/// schema. Skills without either schema are left out; the extension is not required.
///
/// ```
/// assert!(soorma_common::a2a::SKILL_SCHEMAS_EXTENSION_URI.ends_with("skill-schemas-v1"));
/// ```
pub const SKILL_SCHEMAS_EXTENSION_URI: &str =
    "https://github.com/soorma-ai/soorma-rs/blob/main/docs/a2a.md#skill-schemas-v1";

/// Name under which [`CardBuilder::with_api_key`] declares its scheme.
const API_KEY_SCHEME: &str = "apiKey";
/// Name under which [`CardBuilder::with_bearer`] declares its scheme.
const BEARER_SCHEME: &str = "bearer";

/// Builds an [`AgentCard`] from a soorma [`AgentDefinition`].
///
/// - `name`, `version` come from the definition; `description` too, or, when the definition
///   has none, a sentence naming the agent, its kind and its skills.
/// - `supportedInterfaces`: one [`JSONRPC`](super::JSONRPC) interface at the given URL with
///   protocol version `"1.0"` (more with [`with_interface`](Self::with_interface)).
/// - `capabilities`: `streaming: true` (for the A2A gateway's `SendStreamingMessage`),
///   `pushNotifications: false`; both configurable.
/// - `defaultInputModes` `["application/json", "text/plain"]`, `defaultOutputModes`
///   `["application/json"]`; configurable.
/// - **One skill per capability.** The skill `id` is the capability's **consumed event name**
///   (unique within an agent; a gateway routes `metadata.skillId` straight to that event, see
///   [`AgentDefinition::capability_for_event`]). `name` is the humanized task name
///   (`calculate_sum` → `Calculate Sum`); `description` is the capability's description, else
///   the consumed event's, else a generic sentence; `tags` are the agent kind, the topic and the
///   event name. Examples, modes and security requirements are empty (modes then default to the
///   card's) unless set per skill with the `with_skill_*` methods.
/// - The input/output JSON Schemas go in the [`SKILL_SCHEMAS_EXTENSION_URI`] extension.
///
/// [`build`](Self::build) validates the result ([`AgentCard::validate`]), so a definition with
/// no capability (nothing to offer over A2A) is an error.
///
/// ```
/// use soorma_common::a2a::CardBuilder;
/// use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
///
/// let def = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)
///     .with_version("1.2.0")
///     .with_capability(
///         AgentCapability::new(
///             "calculate_sum",
///             EventDefinition::new("sum.requested", Topic::ActionRequests)
///                 .with_payload_schema(serde_json::json!({"type": "object"})),
///         )
///         .with_description("Adds numbers."),
///     );
/// let card = CardBuilder::new(&def, "https://calc.example.com/a2a")
///     .with_provider("Example Inc.", "https://example.com")
///     .with_bearer()
///     .with_skill_examples("sum.requested", [r#"{"numbers": [1, 2]}"#])
///     .build()
///     .unwrap();
/// let skill = &card.skills[0];
/// assert_eq!((skill.id.as_str(), skill.name.as_str()), ("sum.requested", "Calculate Sum"));
/// assert_eq!(skill.tags, ["tool", "action-requests", "sum.requested"]);
/// assert_eq!(card.description, "calculator: a soorma tool. Skills: Calculate Sum.");
/// let schemas = card.capabilities.extensions[0].params.as_ref().unwrap();
/// assert_eq!(schemas["skills"]["sum.requested"]["inputSchema"]["type"], "object");
/// ```
#[derive(Debug, Clone)]
#[must_use = "a CardBuilder does nothing until `build` is called"]
pub struct CardBuilder<'a> {
    definition: &'a AgentDefinition,
    interfaces: Vec<AgentInterface>,
    capabilities: AgentCapabilities,
    schema_extension: bool,
    default_input_modes: Vec<String>,
    default_output_modes: Vec<String>,
    provider: Option<AgentProvider>,
    documentation_url: Option<String>,
    icon_url: Option<String>,
    security_schemes: BTreeMap<String, SecurityScheme>,
    security_requirements: Vec<SecurityRequirement>,
    overrides: BTreeMap<String, SkillOverride>,
}

#[derive(Debug, Clone, Default)]
struct SkillOverride {
    examples: Vec<String>,
    input_modes: Vec<String>,
    output_modes: Vec<String>,
    security_requirements: Vec<SecurityRequirement>,
}

impl AgentCard {
    /// The card [`CardBuilder::new`]`(definition, url)` builds with its defaults.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    /// let def = AgentDefinition::new("id", "echo", AgentKind::Tool).with_capability(
    ///     AgentCapability::new("echo", EventDefinition::new("echo.requested", Topic::ActionRequests)),
    /// );
    /// let card = AgentCard::from_definition(&def, "https://echo.example.com/a2a").unwrap();
    /// assert_eq!(card.supported_interfaces[0].url, "https://echo.example.com/a2a");
    /// ```
    pub fn from_definition(
        definition: &AgentDefinition,
        url: impl Into<String>,
    ) -> Result<AgentCard, CardError> {
        CardBuilder::new(definition, url).build()
    }
}

impl<'a> CardBuilder<'a> {
    /// A builder for `definition` served over JSON-RPC at `url`, with the defaults above.
    ///
    /// ```
    /// use soorma_common::a2a::CardBuilder;
    /// use soorma_common::{AgentDefinition, AgentKind};
    /// let def = AgentDefinition::new("id", "idle", AgentKind::Agent);
    /// // No capability, so no skill: the card would be invalid.
    /// assert!(CardBuilder::new(&def, "https://a.example/a2a").build().is_err());
    /// ```
    pub fn new(definition: &'a AgentDefinition, url: impl Into<String>) -> Self {
        Self {
            definition,
            interfaces: vec![AgentInterface::jsonrpc(url)],
            capabilities: AgentCapabilities::new()
                .with_streaming(true)
                .with_push_notifications(false),
            schema_extension: true,
            default_input_modes: vec![MEDIA_TYPE_JSON.to_owned(), MEDIA_TYPE_TEXT.to_owned()],
            default_output_modes: vec![MEDIA_TYPE_JSON.to_owned()],
            provider: None,
            documentation_url: None,
            icon_url: None,
            security_schemes: BTreeMap::new(),
            security_requirements: Vec::new(),
            overrides: BTreeMap::new(),
        }
    }

    /// Sets the `tenant` of the JSON-RPC interface (clients then send it in every request).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_tenant("acme").build().unwrap();
    /// assert_eq!(card.supported_interfaces[0].tenant.as_deref(), Some("acme"));
    /// ```
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.interfaces[0].tenant = Some(tenant.into());
        self
    }

    /// Appends another interface after the JSON-RPC one (for example an endpoint for v0.3
    /// clients, see [`AgentCard::to_v0_3`]).
    ///
    /// ```
    /// # use soorma_common::a2a::{AgentInterface, CardBuilder};
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_interface(AgentInterface::jsonrpc("https://a.example/a2a/v0.3").with_protocol_version("0.3"))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.supported_interfaces.len(), 2);
    /// ```
    pub fn with_interface(mut self, interface: AgentInterface) -> Self {
        self.interfaces.push(interface);
        self
    }

    /// Sets `capabilities.streaming` (default `true`).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_streaming(false).build().unwrap();
    /// assert_eq!(card.capabilities.streaming, Some(false));
    /// ```
    pub fn with_streaming(mut self, streaming: bool) -> Self {
        self.capabilities.streaming = Some(streaming);
        self
    }

    /// Sets `capabilities.pushNotifications` (default `false`).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_push_notifications(true).build().unwrap();
    /// assert_eq!(card.capabilities.push_notifications, Some(true));
    /// ```
    pub fn with_push_notifications(mut self, push_notifications: bool) -> Self {
        self.capabilities.push_notifications = Some(push_notifications);
        self
    }

    /// Sets `capabilities.extendedAgentCard` (unset by default).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_extended_agent_card(true).build().unwrap();
    /// assert_eq!(card.capabilities.extended_agent_card, Some(true));
    /// ```
    pub fn with_extended_agent_card(mut self, extended_agent_card: bool) -> Self {
        self.capabilities.extended_agent_card = Some(extended_agent_card);
        self
    }

    /// Declares another protocol extension (before the soorma schema extension).
    ///
    /// ```
    /// # use soorma_common::a2a::{AgentExtension, CardBuilder};
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_extension(AgentExtension::new("https://example.com/ext/v1"))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.capabilities.extensions[0].uri, "https://example.com/ext/v1");
    /// ```
    pub fn with_extension(mut self, extension: AgentExtension) -> Self {
        self.capabilities.extensions.push(extension);
        self
    }

    /// Whether to publish the skills' JSON Schemas in the [`SKILL_SCHEMAS_EXTENSION_URI`]
    /// extension (default `true`; it is only added when some skill has a schema).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Tool).with_capability(AgentCapability::new(
    ///     "x",
    ///     EventDefinition::new("x", Topic::ActionRequests).with_payload_schema(serde_json::json!({})),
    /// ));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_schema_extension(false).build().unwrap();
    /// assert!(card.capabilities.extensions.is_empty());
    /// ```
    pub fn with_schema_extension(mut self, enabled: bool) -> Self {
        self.schema_extension = enabled;
        self
    }

    /// Replaces `defaultInputModes` (default `["application/json", "text/plain"]`).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_default_input_modes(["application/json"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.default_input_modes, ["application/json"]);
    /// ```
    pub fn with_default_input_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.default_input_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces `defaultOutputModes` (default `["application/json"]`).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_default_output_modes(["application/json", "text/plain"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.default_output_modes.len(), 2);
    /// ```
    pub fn with_default_output_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.default_output_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the provider.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_provider("Example Inc.", "https://example.com")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.provider.unwrap().organization, "Example Inc.");
    /// ```
    pub fn with_provider(
        mut self,
        organization: impl Into<String>,
        url: impl Into<String>,
    ) -> Self {
        self.provider = Some(AgentProvider::new(organization, url));
        self
    }

    /// Sets the documentation URL.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_documentation_url("https://docs.example.com/calc")
    ///     .build()
    ///     .unwrap();
    /// assert!(card.documentation_url.is_some());
    /// ```
    pub fn with_documentation_url(mut self, url: impl Into<String>) -> Self {
        self.documentation_url = Some(url.into());
        self
    }

    /// Sets the icon URL.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_icon_url("https://a.example/icon.png")
    ///     .build()
    ///     .unwrap();
    /// assert!(card.icon_url.is_some());
    /// ```
    pub fn with_icon_url(mut self, url: impl Into<String>) -> Self {
        self.icon_url = Some(url.into());
        self
    }

    /// Accepts an API key in the named header: declares the scheme `apiKey` and adds a
    /// requirement naming it. Each security helper adds one alternative: clients may satisfy
    /// any one of them.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_api_key("X-API-Key").build().unwrap();
    /// let json = serde_json::to_value(&card).unwrap();
    /// assert_eq!(json["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"], "X-API-Key");
    /// assert_eq!(json["securityRequirements"], serde_json::json!([{"schemes": {"apiKey": {}}}]));
    /// ```
    pub fn with_api_key(self, header_name: impl Into<String>) -> Self {
        self.with_required_scheme(API_KEY_SCHEME, SecurityScheme::api_key_header(header_name))
    }

    /// Accepts an HTTP `Bearer` token: declares the scheme `bearer` and adds a requirement
    /// naming it.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a").with_bearer().build().unwrap();
    /// let json = serde_json::to_value(&card).unwrap();
    /// assert_eq!(json["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    /// ```
    pub fn with_bearer(self) -> Self {
        self.with_required_scheme(BEARER_SCHEME, SecurityScheme::bearer())
    }

    /// Declares a security scheme under `name` without requiring it (pair it with
    /// [`with_security_requirement`](Self::with_security_requirement)).
    ///
    /// ```
    /// # use soorma_common::a2a::{CardBuilder, SecurityRequirement, SecurityScheme};
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_security_scheme("google", SecurityScheme::open_id_connect(
    ///         "https://accounts.google.com/.well-known/openid-configuration"))
    ///     .with_security_requirement(SecurityRequirement::new().with_scheme("google", ["openid"]))
    ///     .build()
    ///     .unwrap();
    /// assert!(card.security_schemes.contains_key("google"));
    /// ```
    pub fn with_security_scheme(
        mut self,
        name: impl Into<String>,
        scheme: impl Into<SecurityScheme>,
    ) -> Self {
        self.security_schemes.insert(name.into(), scheme.into());
        self
    }

    /// Adds a card-wide security requirement (an alternative: any one suffices).
    ///
    /// ```
    /// # use soorma_common::a2a::{CardBuilder, SecurityRequirement, SecurityScheme};
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// // API key AND mutual TLS together.
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_security_scheme("key", SecurityScheme::api_key_header("X-API-Key"))
    ///     .with_security_scheme("mtls", SecurityScheme::mutual_tls())
    ///     .with_security_requirement(
    ///         SecurityRequirement::new().with_scheme("key", [] as [&str; 0]).with_scheme("mtls", [] as [&str; 0]),
    ///     )
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.security_requirements[0].schemes.len(), 2);
    /// ```
    pub fn with_security_requirement(mut self, requirement: SecurityRequirement) -> Self {
        if !self.security_requirements.contains(&requirement) {
            self.security_requirements.push(requirement);
        }
        self
    }

    /// Sets the examples of the skill `skill_id` (a consumed event name).
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x.requested", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_skill_examples("x.requested", ["do x"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.skills[0].examples, ["do x"]);
    /// // An unknown skill id is reported by `build`.
    /// assert!(CardBuilder::new(&def, "https://a.example/a2a").with_skill_examples("y", ["?"]).build().is_err());
    /// ```
    pub fn with_skill_examples<I, S>(mut self, skill_id: impl Into<String>, examples: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.overrides.entry(skill_id.into()).or_default().examples =
            examples.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the input media types of the skill `skill_id`, overriding the card's defaults.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_skill_input_modes("x", ["application/json"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.skills[0].input_modes, ["application/json"]);
    /// ```
    pub fn with_skill_input_modes<I, S>(mut self, skill_id: impl Into<String>, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.overrides
            .entry(skill_id.into())
            .or_default()
            .input_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the output media types of the skill `skill_id`, overriding the card's defaults.
    ///
    /// ```
    /// # use soorma_common::a2a::CardBuilder;
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_skill_output_modes("x", ["text/plain"])
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.skills[0].output_modes, ["text/plain"]);
    /// ```
    pub fn with_skill_output_modes<I, S>(mut self, skill_id: impl Into<String>, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.overrides
            .entry(skill_id.into())
            .or_default()
            .output_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a security requirement to the skill `skill_id` (the scheme must be declared).
    ///
    /// ```
    /// # use soorma_common::a2a::{CardBuilder, SecurityRequirement};
    /// # let def = soorma_common::AgentDefinition::new("i", "n", soorma_common::AgentKind::Tool)
    /// #     .with_capability(soorma_common::AgentCapability::new("x",
    /// #         soorma_common::EventDefinition::new("x", soorma_common::Topic::ActionRequests)));
    /// let card = CardBuilder::new(&def, "https://a.example/a2a")
    ///     .with_bearer()
    ///     .with_skill_security_requirement("x", SecurityRequirement::new().with_scheme("bearer", ["admin"]))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(card.skills[0].security_requirements.len(), 1);
    /// ```
    pub fn with_skill_security_requirement(
        mut self,
        skill_id: impl Into<String>,
        requirement: SecurityRequirement,
    ) -> Self {
        self.overrides
            .entry(skill_id.into())
            .or_default()
            .security_requirements
            .push(requirement);
        self
    }

    /// Builds and validates the card.
    ///
    /// # Errors
    ///
    /// [`CardError::UnknownSkill`] when a `with_skill_*` call names no capability's consumed
    /// event; otherwise whatever [`AgentCard::validate`] reports (for example
    /// `MissingRequired { field: "skills" }` for a definition without capabilities, or
    /// `DuplicateSkillId` when two capabilities consume one event).
    ///
    /// ```
    /// use soorma_common::a2a::{CardBuilder, CardError};
    /// use soorma_common::{AgentDefinition, AgentKind};
    /// let def = AgentDefinition::new("i", "n", AgentKind::Tool);
    /// assert_eq!(
    ///     CardBuilder::new(&def, "https://a.example/a2a").build(),
    ///     Err(CardError::MissingRequired { field: "skills".into() })
    /// );
    /// ```
    pub fn build(self) -> Result<AgentCard, CardError> {
        let def = self.definition;
        if let Some(id) = self
            .overrides
            .keys()
            .find(|id| def.capability_for_event(id).is_none())
        {
            return Err(CardError::UnknownSkill { id: id.clone() });
        }
        let mut overrides = self.overrides;
        let skills: Vec<AgentSkill> = def
            .capabilities
            .iter()
            .map(|cap| {
                let extra = overrides
                    .remove(&cap.consumed_event.event_name)
                    .unwrap_or_default();
                skill_for(def.kind, cap, extra)
            })
            .collect();

        let mut capabilities = self.capabilities;
        if self.schema_extension
            && let Some(extension) = schema_extension(&def.capabilities)
        {
            capabilities.extensions.push(extension);
        }

        let description = if def.description.trim().is_empty() {
            let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
            format!(
                "{}: a soorma {}. Skills: {}.",
                def.name,
                kind_name(def.kind),
                names.join(", ")
            )
        } else {
            def.description.clone()
        };

        let card = AgentCard {
            name: def.name.clone(),
            description,
            supported_interfaces: self.interfaces,
            provider: self.provider,
            version: def.version.clone(),
            documentation_url: self.documentation_url,
            capabilities,
            security_schemes: self.security_schemes,
            security_requirements: self.security_requirements,
            default_input_modes: self.default_input_modes,
            default_output_modes: self.default_output_modes,
            skills,
            signatures: Vec::new(),
            icon_url: self.icon_url,
        };
        card.validate()?;
        Ok(card)
    }

    fn with_required_scheme(self, name: &str, scheme: SecurityScheme) -> Self {
        self.with_security_scheme(name, scheme)
            .with_security_requirement(
                SecurityRequirement::new().with_scheme(name, [] as [&str; 0]),
            )
    }
}

fn skill_for(kind: AgentKind, cap: &AgentCapability, extra: SkillOverride) -> AgentSkill {
    let event = &cap.consumed_event;
    let name = match humanize(&cap.task_name) {
        n if n.is_empty() => humanize(&event.event_name),
        n => n,
    };
    let description = [cap.description.trim(), event.description.trim()]
        .into_iter()
        .find(|d| !d.is_empty())
        .map_or_else(
            || format!("Handles `{}` requests.", event.event_name),
            str::to_owned,
        );
    let mut tags: Vec<String> = Vec::new();
    for tag in [kind_name(kind), event.topic.as_str(), &event.event_name] {
        if !tag.is_empty() && !tags.iter().any(|t| t == tag) {
            tags.push(tag.to_owned());
        }
    }
    AgentSkill {
        id: event.event_name.clone(),
        name,
        description,
        tags,
        examples: extra.examples,
        input_modes: extra.input_modes,
        output_modes: extra.output_modes,
        security_requirements: extra.security_requirements,
    }
}

/// The soorma skill-schemas extension, if any capability has a schema.
fn schema_extension(capabilities: &[AgentCapability]) -> Option<AgentExtension> {
    let mut skills = Map::new();
    for cap in capabilities {
        let event = &cap.consumed_event;
        let mut schemas = Map::new();
        if let Some(input) = &event.payload_schema {
            schemas.insert("inputSchema".to_owned(), input.clone());
        }
        if let Some(output) = &event.response_schema {
            schemas.insert("outputSchema".to_owned(), output.clone());
        }
        if !schemas.is_empty() {
            skills.insert(event.event_name.clone(), Value::Object(schemas));
        }
    }
    if skills.is_empty() {
        return None;
    }
    let mut params = Map::new();
    params.insert("skills".to_owned(), Value::Object(skills));
    Some(
        AgentExtension::new(SKILL_SCHEMAS_EXTENSION_URI)
            .with_description(
                "JSON Schemas of each skill's input (the message's data) and output (the result), \
                 keyed by skill id",
            )
            .with_params(params),
    )
}

fn kind_name(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::Agent => "agent",
        AgentKind::Tool => "tool",
        AgentKind::Worker => "worker",
        AgentKind::Planner => "planner",
    }
}

/// `calculate_sum` / `calculate-sum` / `calculate.sum` → `Calculate Sum`.
fn humanize(raw: &str) -> String {
    raw.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humanize_splits_and_capitalizes() {
        assert_eq!(humanize("calculate_sum"), "Calculate Sum");
        assert_eq!(humanize("add.requested"), "Add Requested");
        assert_eq!(humanize("web-search"), "Web Search");
        assert_eq!(humanize("éclair"), "Éclair");
        assert_eq!(humanize("__"), "");
    }

    #[test]
    fn kind_names_match_serde() {
        for kind in [
            AgentKind::Agent,
            AgentKind::Tool,
            AgentKind::Worker,
            AgentKind::Planner,
        ] {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                Value::String(kind_name(kind).to_owned())
            );
        }
    }
}
