//! The soorma topic set.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A soorma topic: the channel an event travels on.
///
/// Topics are fixed; the event type (`order.placed`) says what happened.
///
/// ```
/// use soorma_common::Topic;
/// let topic: Topic = "action-requests".parse().unwrap();
/// assert_eq!(topic, Topic::ActionRequests);
/// assert_eq!(topic.as_str(), "action-requests");
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Topic {
    /// Domain facts: something happened (`order.placed`).
    BusinessFacts,
    /// Requests for an agent to act; they name a `response_event`.
    ActionRequests,
    /// Replies to action requests, correlated by `correlation_id`.
    ActionResults,
    /// Billing and usage events.
    BillingEvents,
    /// Notifications, including human-input requests.
    NotificationEvents,
    /// Platform events: progress, lifecycle, dead letters.
    SystemEvents,
    /// Plan lifecycle events.
    PlanEvents,
    /// Task lifecycle events.
    TaskEvents,
}

impl Topic {
    /// Every topic, in declaration order.
    ///
    /// ```
    /// assert_eq!(soorma_common::Topic::ALL.len(), 8);
    /// ```
    pub const ALL: [Topic; 8] = [
        Topic::BusinessFacts,
        Topic::ActionRequests,
        Topic::ActionResults,
        Topic::BillingEvents,
        Topic::NotificationEvents,
        Topic::SystemEvents,
        Topic::PlanEvents,
        Topic::TaskEvents,
    ];

    /// The topic's wire name (`"action-requests"`).
    ///
    /// ```
    /// assert_eq!(soorma_common::Topic::SystemEvents.as_str(), "system-events");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Topic::BusinessFacts => "business-facts",
            Topic::ActionRequests => "action-requests",
            Topic::ActionResults => "action-results",
            Topic::BillingEvents => "billing-events",
            Topic::NotificationEvents => "notification-events",
            Topic::SystemEvents => "system-events",
            Topic::PlanEvents => "plan-events",
            Topic::TaskEvents => "task-events",
        }
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a string that names no soorma topic.
///
/// ```
/// let err = "nope".parse::<soorma_common::Topic>().unwrap_err();
/// assert!(err.to_string().contains("action-requests"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTopic(pub String);

impl fmt::Display for UnknownTopic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown topic `{}`; expected one of ", self.0)?;
        for (i, t) in Topic::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(t.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownTopic {}

impl FromStr for Topic {
    type Err = UnknownTopic;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Topic::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownTopic(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for topic in Topic::ALL {
            let json = serde_json::to_string(&topic).unwrap();
            assert_eq!(json, format!("\"{}\"", topic.as_str()));
            assert_eq!(serde_json::from_str::<Topic>(&json).unwrap(), topic);
            assert_eq!(topic.as_str().parse::<Topic>().unwrap(), topic);
        }
    }

    #[test]
    fn unknown_topic_is_an_error() {
        assert!("action_requests".parse::<Topic>().is_err());
        assert!(serde_json::from_str::<Topic>("\"bogus\"").is_err());
    }
}
