//! `AgentCapabilities`: the optional protocol features an agent supports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AgentExtension;

/// Optional A2A features the agent supports. Unset flags are omitted from the JSON.
///
/// ```
/// use soorma_common::a2a::AgentCapabilities;
/// let caps = AgentCapabilities::new().with_streaming(true).with_push_notifications(false);
/// assert_eq!(
///     serde_json::to_value(&caps).unwrap(),
///     serde_json::json!({"streaming": true, "pushNotifications": false})
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AgentCapabilities {
    /// Whether the agent streams responses (`SendStreamingMessage`, `SubscribeToTask`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Whether the agent sends push notifications for task updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    /// Protocol extensions the agent supports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<AgentExtension>,
    /// Whether an extended card is available to authenticated clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
}

impl AgentCapabilities {
    /// No flags set and no extensions.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCapabilities;
    /// assert_eq!(serde_json::to_string(&AgentCapabilities::new()).unwrap(), "{}");
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `streaming`.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCapabilities;
    /// assert_eq!(AgentCapabilities::new().with_streaming(true).streaming, Some(true));
    /// ```
    #[must_use]
    pub fn with_streaming(mut self, streaming: bool) -> Self {
        self.streaming = Some(streaming);
        self
    }

    /// Sets `pushNotifications`.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCapabilities;
    /// let caps = AgentCapabilities::new().with_push_notifications(true);
    /// assert_eq!(caps.push_notifications, Some(true));
    /// ```
    #[must_use]
    pub fn with_push_notifications(mut self, push_notifications: bool) -> Self {
        self.push_notifications = Some(push_notifications);
        self
    }

    /// Adds an extension.
    ///
    /// ```
    /// use soorma_common::a2a::{AgentCapabilities, AgentExtension};
    /// let caps = AgentCapabilities::new().with_extension(AgentExtension::new("urn:x"));
    /// assert_eq!(caps.extensions.len(), 1);
    /// ```
    #[must_use]
    pub fn with_extension(mut self, extension: AgentExtension) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Sets `extendedAgentCard`.
    ///
    /// ```
    /// use soorma_common::a2a::AgentCapabilities;
    /// let caps = AgentCapabilities::new().with_extended_agent_card(true);
    /// assert_eq!(caps.extended_agent_card, Some(true));
    /// ```
    #[must_use]
    pub fn with_extended_agent_card(mut self, extended_agent_card: bool) -> Self {
        self.extended_agent_card = Some(extended_agent_card);
        self
    }
}
