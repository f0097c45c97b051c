//! `AgentCard`: the self-describing manifest served at `/.well-known/agent-card.json`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    AgentCapabilities, AgentCardSignature, AgentInterface, AgentProvider, AgentSkill,
    SecurityRequirement, SecurityScheme,
};

/// An A2A v1.0 agent card.
///
/// Required fields are plain values and always serialized; optional ones are omitted when
/// unset or empty. Build one by hand with [`AgentCard::new`] and the `with_*` methods, or from a
/// soorma agent definition with [`CardBuilder`](super::CardBuilder) /
/// [`AgentCard::from_definition`]. [`AgentCard::validate`] checks what serde cannot (required
/// strings and lists non-empty, unique skill ids, declared security schemes).
///
/// ```
/// use soorma_common::a2a::{AgentCard, AgentInterface, AgentSkill};
/// let card = AgentCard::new("Echo", "Echoes what it is sent.", "1.0.0")
///     .with_interface(AgentInterface::jsonrpc("https://echo.example.com/a2a"))
///     .with_default_input_modes(["text/plain"])
///     .with_default_output_modes(["text/plain"])
///     .with_skill(AgentSkill::new("echo", "Echo", "Echoes text.").with_tag("echo"));
/// card.validate().unwrap();
/// let json = serde_json::to_value(&card).unwrap();
/// assert_eq!(json["skills"][0]["id"], "echo");
/// assert!(json.get("provider").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentCard {
    /// Human-readable name.
    pub name: String,
    /// What the agent is for.
    pub description: String,
    /// Where and how to reach the agent, preferred first (at least one).
    pub supported_interfaces: Vec<AgentInterface>,
    /// Who provides the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// The agent's own version.
    pub version: String,
    /// Documentation URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// Optional protocol features supported.
    pub capabilities: AgentCapabilities,
    /// Authentication schemes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Security requirements for every request (any one of them suffices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
    /// Media types accepted by default (at least one).
    pub default_input_modes: Vec<String>,
    /// Media types produced by default (at least one).
    pub default_output_modes: Vec<String>,
    /// What the agent can do (at least one).
    pub skills: Vec<AgentSkill>,
    /// JWS signatures over the card.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<AgentCardSignature>,
    /// Icon URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
}

impl AgentCard {
    /// A card with no interfaces, modes or skills yet (add them before serving it), and no
    /// capability flags.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// let card = AgentCard::new("Echo", "Echoes text.", "1.0.0");
    /// assert!(card.validate().is_err()); // no interface, modes or skills yet
    /// ```
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        version: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            supported_interfaces: Vec::new(),
            provider: None,
            version: version.into(),
            documentation_url: None,
            capabilities: AgentCapabilities::new(),
            security_schemes: BTreeMap::new(),
            security_requirements: Vec::new(),
            default_input_modes: Vec::new(),
            default_output_modes: Vec::new(),
            skills: Vec::new(),
            signatures: Vec::new(),
            icon_url: None,
        }
    }

    /// Appends an interface (the first one added is the preferred one).
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentInterface};
    /// let card = AgentCard::new("n", "d", "1").with_interface(AgentInterface::jsonrpc("https://a/a2a"));
    /// assert_eq!(card.supported_interfaces.len(), 1);
    /// ```
    #[must_use]
    pub fn with_interface(mut self, interface: AgentInterface) -> Self {
        self.supported_interfaces.push(interface);
        self
    }

    /// Sets the provider.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentProvider};
    /// let card = AgentCard::new("n", "d", "1").with_provider(AgentProvider::new("Org", "https://org"));
    /// assert!(card.provider.is_some());
    /// ```
    #[must_use]
    pub fn with_provider(mut self, provider: AgentProvider) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Sets the documentation URL.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// let card = AgentCard::new("n", "d", "1").with_documentation_url("https://docs.example");
    /// assert_eq!(card.documentation_url.as_deref(), Some("https://docs.example"));
    /// ```
    #[must_use]
    pub fn with_documentation_url(mut self, url: impl Into<String>) -> Self {
        self.documentation_url = Some(url.into());
        self
    }

    /// Replaces the capabilities.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCapabilities, AgentCard};
    /// let card = AgentCard::new("n", "d", "1")
    ///     .with_capabilities(AgentCapabilities::new().with_streaming(true));
    /// assert_eq!(card.capabilities.streaming, Some(true));
    /// ```
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: AgentCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Declares a security scheme under `name`.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, SecurityScheme};
    /// let card = AgentCard::new("n", "d", "1").with_security_scheme("bearer", SecurityScheme::bearer());
    /// assert!(card.security_schemes.contains_key("bearer"));
    /// ```
    #[must_use]
    pub fn with_security_scheme(
        mut self,
        name: impl Into<String>,
        scheme: impl Into<SecurityScheme>,
    ) -> Self {
        self.security_schemes.insert(name.into(), scheme.into());
        self
    }

    /// Adds a security requirement (an alternative: any one listed requirement suffices).
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, SecurityRequirement, SecurityScheme};
    /// let card = AgentCard::new("n", "d", "1")
    ///     .with_security_scheme("bearer", SecurityScheme::bearer())
    ///     .with_security_requirement(SecurityRequirement::new().with_scheme("bearer", [] as [&str; 0]));
    /// assert_eq!(card.security_requirements.len(), 1);
    /// ```
    #[must_use]
    pub fn with_security_requirement(mut self, requirement: SecurityRequirement) -> Self {
        self.security_requirements.push(requirement);
        self
    }

    /// Replaces the default input media types.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// let card = AgentCard::new("n", "d", "1").with_default_input_modes(["text/plain"]);
    /// assert_eq!(card.default_input_modes, ["text/plain"]);
    /// ```
    #[must_use]
    pub fn with_default_input_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.default_input_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the default output media types.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// let card = AgentCard::new("n", "d", "1").with_default_output_modes(["application/json"]);
    /// assert_eq!(card.default_output_modes, ["application/json"]);
    /// ```
    #[must_use]
    pub fn with_default_output_modes<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.default_output_modes = modes.into_iter().map(Into::into).collect();
        self
    }

    /// Appends a skill.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentSkill};
    /// let card = AgentCard::new("n", "d", "1").with_skill(AgentSkill::new("s", "S", "Does s.").with_tag("t"));
    /// assert_eq!(card.skills[0].id, "s");
    /// ```
    #[must_use]
    pub fn with_skill(mut self, skill: AgentSkill) -> Self {
        self.skills.push(skill);
        self
    }

    /// Appends a signature.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentCardSignature};
    /// let card = AgentCard::new("n", "d", "1").with_signature(AgentCardSignature::new("p", "s"));
    /// assert_eq!(card.signatures.len(), 1);
    /// ```
    #[must_use]
    pub fn with_signature(mut self, signature: AgentCardSignature) -> Self {
        self.signatures.push(signature);
        self
    }

    /// Sets the icon URL.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCard;
    /// let card = AgentCard::new("n", "d", "1").with_icon_url("https://a.example/icon.png");
    /// assert!(card.icon_url.is_some());
    /// ```
    #[must_use]
    pub fn with_icon_url(mut self, url: impl Into<String>) -> Self {
        self.icon_url = Some(url.into());
        self
    }

    /// The skill with the given id.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCard, AgentSkill};
    /// let card = AgentCard::new("n", "d", "1").with_skill(AgentSkill::new("s", "S", "Does s."));
    /// assert!(card.skill("s").is_some());
    /// assert!(card.skill("t").is_none());
    /// ```
    pub fn skill(&self, id: &str) -> Option<&AgentSkill> {
        self.skills.iter().find(|s| s.id == id)
    }
}
