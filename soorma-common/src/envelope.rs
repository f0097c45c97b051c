//! The soorma event envelope.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Topic;

/// The envelope spec version soorma writes.
pub const SPEC_VERSION: &str = "1.0";

fn default_specversion() -> String {
    SPEC_VERSION.to_owned()
}

/// An event as it travels on the bus: soorma's envelope, snake_case JSON.
///
/// Optional fields are omitted from JSON when unset; unknown fields are ignored on read.
///
/// ```
/// use soorma_common::{EventEnvelope, Topic};
/// let env = EventEnvelope::new("evt-1", "calculator", Topic::ActionRequests, "calculate.requested")
///     .with_data(serde_json::json!({"expression": "1+2"}))
///     .with_response_event("calculate.completed");
/// let json = serde_json::to_value(&env).unwrap();
/// assert_eq!(json["type"], "calculate.requested");
/// assert_eq!(json["topic"], "action-requests");
/// assert!(json.get("session_id").is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct EventEnvelope {
    /// Unique event id (also the broker's de-duplication id).
    pub id: String,
    /// The agent (or client) that published the event.
    pub source: String,
    /// Envelope spec version.
    #[serde(default = "default_specversion")]
    pub specversion: String,
    /// The event type, e.g. `calculate.requested`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// RFC 3339 UTC timestamp of publication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The payload.
    #[serde(default)]
    pub data: Value,
    /// The topic the event travels on.
    pub topic: Topic,
    /// Ties a reply to its request, a sub-task result to its sub-task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// What the event is about (free form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Tenant the event belongs to; state and delivery are scoped by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The end user on whose behalf the event was produced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Conversation / session the event belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Goal the event serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_id: Option<String>,
    /// Plan the event belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// For requests: the event type the responder must reply with (chosen by the caller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_event: Option<String>,
    /// For requests: the topic to reply on (default `action-results`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<Topic>,
    /// Name of the schema the reply payload follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema_name: Option<String>,
    /// Trace id shared by every event of one causal chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Id of the event whose handling produced this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_event_id: Option<String>,
    /// Name of the schema `data` follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema_name: Option<String>,
}

macro_rules! with_opt {
    ($($(#[$doc:meta])* $fn_name:ident => $field:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $fn_name(mut self, value: impl Into<String>) -> Self {
                self.$field = Some(value.into());
                self
            }
        )*
    };
}

impl EventEnvelope {
    /// A new envelope with the required fields; `data` is `null` until set.
    ///
    /// ```
    /// use soorma_common::{EventEnvelope, Topic};
    /// let env = EventEnvelope::new("id", "me", Topic::BusinessFacts, "order.placed");
    /// assert_eq!(env.specversion, "1.0");
    /// ```
    pub fn new(
        id: impl Into<String>,
        source: impl Into<String>,
        topic: Topic,
        event_type: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            source: source.into(),
            specversion: default_specversion(),
            event_type: event_type.into(),
            time: None,
            data: Value::Null,
            topic,
            correlation_id: None,
            subject: None,
            tenant_id: None,
            user_id: None,
            session_id: None,
            goal_id: None,
            plan_id: None,
            response_event: None,
            response_topic: None,
            response_schema_name: None,
            trace_id: None,
            parent_event_id: None,
            payload_schema_name: None,
        }
    }

    /// Sets the payload.
    ///
    /// ```
    /// # use soorma_common::{EventEnvelope, Topic};
    /// let env = EventEnvelope::new("id", "me", Topic::BusinessFacts, "x").with_data(1.into());
    /// assert_eq!(env.data, 1);
    /// ```
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }

    /// Sets the reply topic.
    ///
    /// ```
    /// # use soorma_common::{EventEnvelope, Topic};
    /// let env = EventEnvelope::new("id", "me", Topic::ActionRequests, "x")
    ///     .with_response_topic(Topic::ActionResults);
    /// assert_eq!(env.reply_topic(), Topic::ActionResults);
    /// ```
    #[must_use]
    pub fn with_response_topic(mut self, topic: Topic) -> Self {
        self.response_topic = Some(topic);
        self
    }

    with_opt! {
        /// Sets the publication time (RFC 3339).
        with_time => time,
        /// Sets the correlation id.
        with_correlation_id => correlation_id,
        /// Sets the subject.
        with_subject => subject,
        /// Sets the tenant.
        with_tenant_id => tenant_id,
        /// Sets the user.
        with_user_id => user_id,
        /// Sets the session.
        with_session_id => session_id,
        /// Sets the goal.
        with_goal_id => goal_id,
        /// Sets the plan.
        with_plan_id => plan_id,
        /// Sets the event type the responder must reply with.
        with_response_event => response_event,
        /// Sets the reply schema name.
        with_response_schema_name => response_schema_name,
        /// Sets the trace id.
        with_trace_id => trace_id,
        /// Sets the parent event id.
        with_parent_event_id => parent_event_id,
        /// Sets the payload schema name.
        with_payload_schema_name => payload_schema_name,
    }

    /// The topic a reply to this event goes to: `response_topic`, else `action-results`.
    ///
    /// ```
    /// # use soorma_common::{EventEnvelope, Topic};
    /// let env = EventEnvelope::new("id", "me", Topic::ActionRequests, "x");
    /// assert_eq!(env.reply_topic(), Topic::ActionResults);
    /// ```
    pub fn reply_topic(&self) -> Topic {
        self.response_topic.unwrap_or(Topic::ActionResults)
    }

    /// The tenant used to scope state and delivery (`"default"` when unset).
    ///
    /// ```
    /// # use soorma_common::{EventEnvelope, Topic};
    /// let env = EventEnvelope::new("id", "me", Topic::ActionRequests, "x");
    /// assert_eq!(env.tenant(), "default");
    /// ```
    pub fn tenant(&self) -> &str {
        self.tenant_id.as_deref().unwrap_or(crate::DEFAULT_TENANT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> EventEnvelope {
        EventEnvelope::new("e1", "agent-a", Topic::ActionRequests, "research.requested")
            .with_time("2026-11-21T10:00:00Z")
            .with_data(json!({"topic": "AI"}))
            .with_correlation_id("c1")
            .with_subject("s")
            .with_tenant_id("t1")
            .with_user_id("u1")
            .with_session_id("sess")
            .with_goal_id("g")
            .with_plan_id("p")
            .with_response_event("research.completed")
            .with_response_topic(Topic::ActionResults)
            .with_response_schema_name("ResearchResult")
            .with_trace_id("tr")
            .with_parent_event_id("e0")
            .with_payload_schema_name("ResearchRequest")
    }

    #[test]
    fn round_trips_every_field() {
        let env = full();
        let json = serde_json::to_string(&env).unwrap();
        let back: EventEnvelope = serde_json::from_str(&json).unwrap();
        assert_eq!(back, env);
        let v: Value = serde_json::from_str(&json).unwrap();
        for key in [
            "id",
            "source",
            "specversion",
            "type",
            "time",
            "data",
            "correlation_id",
            "topic",
            "subject",
            "tenant_id",
            "user_id",
            "session_id",
            "goal_id",
            "plan_id",
            "response_event",
            "response_topic",
            "response_schema_name",
            "trace_id",
            "parent_event_id",
            "payload_schema_name",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
    }

    #[test]
    fn tolerates_unknown_fields_and_defaults() {
        let v = json!({
            "id": "x", "source": "s", "type": "a.b", "topic": "business-facts",
            "future_field": {"nested": true}, "another": 3
        });
        let env: EventEnvelope = serde_json::from_value(v).unwrap();
        assert_eq!(env.specversion, SPEC_VERSION);
        assert_eq!(env.data, Value::Null);
        assert_eq!(env.tenant(), "default");
    }

    #[test]
    fn missing_required_field_is_an_error() {
        let v = json!({"id": "x", "source": "s", "topic": "business-facts"});
        let err = serde_json::from_value::<EventEnvelope>(v).unwrap_err();
        assert!(err.to_string().contains("type"), "{err}");
    }
}
