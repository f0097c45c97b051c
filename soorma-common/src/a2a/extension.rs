//! `AgentExtension`: a protocol extension the agent supports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A protocol extension the agent supports, identified by a URI.
///
/// ```
/// use soorma_common::a2a::AgentExtension;
/// let ext = AgentExtension::new("https://example.com/extensions/geo/v1")
///     .with_description("Location-aware search");
/// assert_eq!(
///     serde_json::to_value(&ext).unwrap(),
///     serde_json::json!({
///         "uri": "https://example.com/extensions/geo/v1",
///         "description": "Location-aware search"
///     })
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentExtension {
    /// The URI identifying the extension (it should carry a version).
    #[serde(default)]
    pub uri: String,
    /// How the agent uses the extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether clients must understand the extension to talk to the agent (omitted when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
    /// Extension-specific parameters (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Map<String, Value>>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl AgentExtension {
    /// An optional extension with no description or parameters.
    ///
    /// ```
    /// use soorma_common::a2a::AgentExtension;
    /// let ext = AgentExtension::new("https://example.com/ext/v1");
    /// assert!(!ext.required);
    /// ```
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            description: None,
            required: false,
            params: None,
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// use soorma_common::a2a::AgentExtension;
    /// let ext = AgentExtension::new("urn:x").with_description("d");
    /// assert_eq!(ext.description.as_deref(), Some("d"));
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Marks the extension as required (or not).
    ///
    /// ```
    /// use soorma_common::a2a::AgentExtension;
    /// assert!(AgentExtension::new("urn:x").with_required(true).required);
    /// ```
    #[must_use]
    pub fn with_required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// Sets the parameters.
    ///
    /// ```
    /// use soorma_common::a2a::AgentExtension;
    /// let mut params = serde_json::Map::new();
    /// params.insert("level".into(), 2.into());
    /// let ext = AgentExtension::new("urn:x").with_params(params);
    /// assert_eq!(ext.params.unwrap()["level"], 2);
    /// ```
    #[must_use]
    pub fn with_params(mut self, params: Map<String, Value>) -> Self {
        self.params = Some(params);
        self
    }
}
