//! Registry DTOs: agents, their capabilities and the events they own.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Topic;

/// What layer an agent is built on.
///
/// ```
/// use soorma_common::AgentKind;
/// assert_eq!(serde_json::to_string(&AgentKind::Tool).unwrap(), "\"tool\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentKind {
    /// A raw event handler (`#[on_event]`).
    #[default]
    Agent,
    /// A request → reply tool (`#[on_invoke]`).
    Tool,
    /// An asynchronous task worker (`#[on_task]`, `#[on_result]`).
    Worker,
    /// A goal-driven planner.
    Planner,
}

/// An event an agent consumes or produces, with its payload schema. Owned by the agent.
///
/// ```
/// use soorma_common::{EventDefinition, Topic};
/// let def = EventDefinition::new("calculate.requested", Topic::ActionRequests)
///     .with_description("Request a calculation")
///     .with_payload_schema(serde_json::json!({"type": "object"}));
/// assert_eq!(def.topic, Topic::ActionRequests);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct EventDefinition {
    /// The event type.
    pub event_name: String,
    /// The topic it travels on.
    pub topic: Topic,
    /// What the event means.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the event's `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_schema: Option<Value>,
    /// For requests: JSON Schema of the reply's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

impl EventDefinition {
    /// A definition with no description or schemas.
    ///
    /// ```
    /// # use soorma_common::{EventDefinition, Topic};
    /// let def = EventDefinition::new("order.placed", Topic::BusinessFacts);
    /// assert!(def.payload_schema.is_none());
    /// ```
    pub fn new(event_name: impl Into<String>, topic: Topic) -> Self {
        Self {
            event_name: event_name.into(),
            topic,
            description: String::new(),
            payload_schema: None,
            response_schema: None,
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// # use soorma_common::{EventDefinition, Topic};
    /// let def = EventDefinition::new("a", Topic::BusinessFacts).with_description("d");
    /// assert_eq!(def.description, "d");
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the payload schema.
    ///
    /// ```
    /// # use soorma_common::{EventDefinition, Topic};
    /// let def = EventDefinition::new("a", Topic::BusinessFacts).with_payload_schema(true.into());
    /// assert!(def.payload_schema.is_some());
    /// ```
    #[must_use]
    pub fn with_payload_schema(mut self, schema: Value) -> Self {
        self.payload_schema = Some(schema);
        self
    }

    /// Sets the response schema.
    ///
    /// ```
    /// # use soorma_common::{EventDefinition, Topic};
    /// let def = EventDefinition::new("a", Topic::ActionRequests).with_response_schema(true.into());
    /// assert!(def.response_schema.is_some());
    /// ```
    #[must_use]
    pub fn with_response_schema(mut self, schema: Value) -> Self {
        self.response_schema = Some(schema);
        self
    }
}

/// Something an agent can do: the event it consumes and the events it produces.
///
/// ```
/// use soorma_common::{AgentCapability, EventDefinition, Topic};
/// let cap = AgentCapability::new(
///     "calculate",
///     EventDefinition::new("calculate.requested", Topic::ActionRequests),
/// )
/// .with_description("Evaluates an arithmetic expression.");
/// assert_eq!(cap.consumed_event.event_name, "calculate.requested");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct AgentCapability {
    /// The capability's name (the task it performs).
    pub task_name: String,
    /// What it does (from the handler's doc comment).
    #[serde(default)]
    pub description: String,
    /// The event that invokes it.
    pub consumed_event: EventDefinition,
    /// The events it replies or emits with.
    #[serde(default)]
    pub produced_events: Vec<EventDefinition>,
}

impl AgentCapability {
    /// A capability with no description and no produced events.
    ///
    /// ```
    /// # use soorma_common::{AgentCapability, EventDefinition, Topic};
    /// let cap = AgentCapability::new("x", EventDefinition::new("x.requested", Topic::ActionRequests));
    /// assert!(cap.produced_events.is_empty());
    /// ```
    pub fn new(task_name: impl Into<String>, consumed_event: EventDefinition) -> Self {
        Self {
            task_name: task_name.into(),
            description: String::new(),
            consumed_event,
            produced_events: Vec::new(),
        }
    }

    /// Sets the description.
    ///
    /// ```
    /// # use soorma_common::{AgentCapability, EventDefinition, Topic};
    /// let cap = AgentCapability::new("x", EventDefinition::new("x", Topic::ActionRequests))
    ///     .with_description("does x");
    /// assert_eq!(cap.description, "does x");
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Adds a produced event.
    ///
    /// ```
    /// # use soorma_common::{AgentCapability, EventDefinition, Topic};
    /// let cap = AgentCapability::new("x", EventDefinition::new("x", Topic::ActionRequests))
    ///     .with_produced_event(EventDefinition::new("x.done", Topic::ActionResults));
    /// assert_eq!(cap.produced_events.len(), 1);
    /// ```
    #[must_use]
    pub fn with_produced_event(mut self, event: EventDefinition) -> Self {
        self.produced_events.push(event);
        self
    }
}

/// An agent as the registry knows it.
///
/// ```
/// use soorma_common::{AgentDefinition, AgentKind};
/// let def = AgentDefinition::new("calculator-1", "calculator", AgentKind::Tool).with_version("1.0.0");
/// assert_eq!(def.version, "1.0.0");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct AgentDefinition {
    /// Unique id of this registration (one per running instance set).
    pub agent_id: String,
    /// The agent's name; instances with one name share work.
    pub name: String,
    /// What the agent is for.
    #[serde(default)]
    pub description: String,
    /// The agent's version.
    #[serde(default = "default_version")]
    pub version: String,
    /// The layer it is built on.
    #[serde(default)]
    pub kind: AgentKind,
    /// What it can do.
    #[serde(default)]
    pub capabilities: Vec<AgentCapability>,
    /// Other events it listens to (raw `on_event` handlers, results).
    #[serde(default)]
    pub consumed_events: Vec<EventDefinition>,
    /// Tenant the agent serves, if it is tenant-specific.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The request events the agent sends and waits for replies to (a worker's typed
    /// fan-outs), so that a consumer missing from the platform can be found
    /// (`soorma agents --check`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_events: Vec<String>,
}

fn default_version() -> String {
    "0.0.0".to_owned()
}

impl AgentDefinition {
    /// A definition with version `0.0.0` and no capabilities.
    ///
    /// ```
    /// # use soorma_common::{AgentDefinition, AgentKind};
    /// let def = AgentDefinition::new("id", "name", AgentKind::Worker);
    /// assert_eq!(def.version, "0.0.0");
    /// ```
    pub fn new(agent_id: impl Into<String>, name: impl Into<String>, kind: AgentKind) -> Self {
        Self {
            agent_id: agent_id.into(),
            name: name.into(),
            description: String::new(),
            version: default_version(),
            kind,
            capabilities: Vec::new(),
            consumed_events: Vec::new(),
            tenant_id: None,
            requested_events: Vec::new(),
        }
    }

    /// Sets the version.
    ///
    /// ```
    /// # use soorma_common::{AgentDefinition, AgentKind};
    /// assert_eq!(AgentDefinition::new("i", "n", AgentKind::Tool).with_version("2.0.0").version, "2.0.0");
    /// ```
    #[must_use]
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Sets the description.
    ///
    /// ```
    /// # use soorma_common::{AgentDefinition, AgentKind};
    /// assert_eq!(AgentDefinition::new("i", "n", AgentKind::Tool).with_description("d").description, "d");
    /// ```
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Adds a capability.
    ///
    /// ```
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Tool).with_capability(
    ///     AgentCapability::new("x", EventDefinition::new("x", Topic::ActionRequests)));
    /// assert_eq!(def.capabilities.len(), 1);
    /// ```
    #[must_use]
    pub fn with_capability(mut self, capability: AgentCapability) -> Self {
        self.capabilities.push(capability);
        self
    }

    /// Adds a request event the agent sends (once).
    ///
    /// ```
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Worker)
    ///     .with_requested_event("search.requested")
    ///     .with_requested_event("search.requested");
    /// assert_eq!(def.requested_events, ["search.requested"]);
    /// ```
    #[must_use]
    pub fn with_requested_event(mut self, event: impl Into<String>) -> Self {
        let event = event.into();
        if !self.requested_events.contains(&event) {
            self.requested_events.push(event);
        }
        self
    }

    /// Adds a consumed event that is not a capability.
    ///
    /// ```
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Agent)
    ///     .with_consumed_event(EventDefinition::new("order.placed", Topic::BusinessFacts));
    /// assert_eq!(def.consumed_events.len(), 1);
    /// ```
    #[must_use]
    pub fn with_consumed_event(mut self, event: EventDefinition) -> Self {
        self.consumed_events.push(event);
        self
    }

    /// Sets the tenant.
    ///
    /// ```
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Agent).with_tenant_id("acme");
    /// assert_eq!(def.tenant_id.as_deref(), Some("acme"));
    /// ```
    #[must_use]
    pub fn with_tenant_id(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// The capability consuming `event_name`, if any.
    ///
    /// ```
    /// # use soorma_common::*;
    /// let def = AgentDefinition::new("i", "n", AgentKind::Tool).with_capability(
    ///     AgentCapability::new("x", EventDefinition::new("x.requested", Topic::ActionRequests)));
    /// assert!(def.capability_for_event("x.requested").is_some());
    /// ```
    pub fn capability_for_event(&self, event_name: &str) -> Option<&AgentCapability> {
        self.capabilities
            .iter()
            .find(|c| c.consumed_event.event_name == event_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_definition_round_trips_and_tolerates_unknown_fields() {
        let def = AgentDefinition::new("a1", "calculator", AgentKind::Tool)
            .with_version("1.2.3")
            .with_description("calc")
            .with_capability(
                AgentCapability::new(
                    "calculate",
                    EventDefinition::new("calculate.requested", Topic::ActionRequests)
                        .with_payload_schema(json!({"type": "object"}))
                        .with_response_schema(json!({"type": "number"})),
                )
                .with_produced_event(EventDefinition::new(
                    "calculate.completed",
                    Topic::ActionResults,
                )),
            );
        let mut v = serde_json::to_value(&def).unwrap();
        assert_eq!(
            serde_json::from_value::<AgentDefinition>(v.clone()).unwrap(),
            def
        );
        v["unknown"] = json!(1);
        v["capabilities"][0]["consumed_event"]["extra"] = json!("x");
        assert_eq!(serde_json::from_value::<AgentDefinition>(v).unwrap(), def);
    }

    #[test]
    fn minimal_agent_definition_gets_defaults() {
        let def: AgentDefinition =
            serde_json::from_value(json!({"agent_id": "a", "name": "n"})).unwrap();
        assert_eq!(def.version, "0.0.0");
        assert_eq!(def.kind, AgentKind::Agent);
    }
}
