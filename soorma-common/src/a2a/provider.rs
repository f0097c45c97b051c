//! `AgentProvider`: the organization behind an agent.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The service provider of an agent. Both fields are required by the protocol.
///
/// ```
/// use soorma_common::a2a::AgentProvider;
/// let provider = AgentProvider::new("Example Inc.", "https://example.com");
/// assert_eq!(
///     serde_json::to_value(&provider).unwrap(),
///     serde_json::json!({"url": "https://example.com", "organization": "Example Inc."})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentProvider {
    /// The provider's website or documentation URL.
    pub url: String,
    /// The provider's organization name.
    pub organization: String,
}

impl AgentProvider {
    /// A provider with an organization name and a URL.
    ///
    /// ```
    /// use soorma_common::a2a::AgentProvider;
    /// assert_eq!(AgentProvider::new("Org", "https://org.example").organization, "Org");
    /// ```
    pub fn new(organization: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            organization: organization.into(),
        }
    }
}
