//! State-machine DTOs shared by planners and the state tracker.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The action a plan takes when it enters a state: publish a request and await its reply.
///
/// ```
/// use soorma_common::StateAction;
/// let action = StateAction::new("web.search.requested", "web.search.completed")
///     .with_data(serde_json::json!({"query": "{{goal.topic}}"}));
/// assert_eq!(action.response_event, "web.search.completed");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StateAction {
    /// The event to publish.
    pub event_type: String,
    /// The reply event to wait for.
    pub response_event: String,
    /// Payload template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl StateAction {
    /// An action without a data template.
    ///
    /// ```
    /// # use soorma_common::StateAction;
    /// assert!(StateAction::new("a", "b").data.is_none());
    /// ```
    pub fn new(event_type: impl Into<String>, response_event: impl Into<String>) -> Self {
        Self {
            event_type: event_type.into(),
            response_event: response_event.into(),
            data: None,
        }
    }

    /// Sets the data template.
    ///
    /// ```
    /// # use soorma_common::StateAction;
    /// assert!(StateAction::new("a", "b").with_data(1.into()).data.is_some());
    /// ```
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// A transition to `to_state` when `on_event` arrives and `condition` (if any) holds.
///
/// ```
/// use soorma_common::StateTransition;
/// let t = StateTransition::new("search.completed", "analyze").with_condition("data.count > 0");
/// assert_eq!(t.condition.as_deref(), Some("data.count > 0"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StateTransition {
    /// The event type that triggers the transition.
    pub on_event: String,
    /// The target state.
    pub to_state: String,
    /// An optional condition over the triggering event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

impl StateTransition {
    /// An unconditional transition.
    ///
    /// ```
    /// # use soorma_common::StateTransition;
    /// assert!(StateTransition::new("a", "b").condition.is_none());
    /// ```
    pub fn new(on_event: impl Into<String>, to_state: impl Into<String>) -> Self {
        Self {
            on_event: on_event.into(),
            to_state: to_state.into(),
            condition: None,
        }
    }

    /// Sets the condition.
    ///
    /// ```
    /// # use soorma_common::StateTransition;
    /// assert!(StateTransition::new("a", "b").with_condition("true").condition.is_some());
    /// ```
    #[must_use]
    pub fn with_condition(mut self, condition: impl Into<String>) -> Self {
        self.condition = Some(condition.into());
        self
    }
}

/// One state of a plan's state machine.
///
/// ```
/// use soorma_common::{StateConfig, StateTransition};
/// let s = StateConfig::new("search", "Search the web")
///     .with_transition(StateTransition::new("search.completed", "done"));
/// assert!(!s.is_terminal);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct StateConfig {
    /// Unique state name.
    pub state_name: String,
    /// What happens in this state.
    #[serde(default)]
    pub description: String,
    /// Action taken on entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<StateAction>,
    /// Event-driven transitions out of the state.
    #[serde(default)]
    pub transitions: Vec<StateTransition>,
    /// Unconditional next state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_next: Option<String>,
    /// Whether the plan ends here.
    #[serde(default)]
    pub is_terminal: bool,
    /// For a terminal state: whether reaching it fails the plan (the goal gets an error reply).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fails: bool,
    /// For a terminal state: a data template for the plan's result (or, when it fails, its
    /// error message); default: every state's result by state name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

impl StateConfig {
    /// A non-terminal state with no action and no transitions.
    ///
    /// ```
    /// # use soorma_common::StateConfig;
    /// assert!(StateConfig::new("s", "d").transitions.is_empty());
    /// ```
    pub fn new(state_name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            state_name: state_name.into(),
            description: description.into(),
            action: None,
            transitions: Vec::new(),
            default_next: None,
            is_terminal: false,
            fails: false,
            result: None,
        }
    }

    /// Sets the entry action.
    ///
    /// ```
    /// # use soorma_common::{StateConfig, StateAction};
    /// assert!(StateConfig::new("s", "d").with_action(StateAction::new("a", "b")).action.is_some());
    /// ```
    #[must_use]
    pub fn with_action(mut self, action: StateAction) -> Self {
        self.action = Some(action);
        self
    }

    /// Adds a transition.
    ///
    /// ```
    /// # use soorma_common::{StateConfig, StateTransition};
    /// let s = StateConfig::new("s", "d").with_transition(StateTransition::new("e", "t"));
    /// assert_eq!(s.transitions.len(), 1);
    /// ```
    #[must_use]
    pub fn with_transition(mut self, transition: StateTransition) -> Self {
        self.transitions.push(transition);
        self
    }

    /// Sets the unconditional next state.
    ///
    /// ```
    /// # use soorma_common::StateConfig;
    /// assert_eq!(StateConfig::new("s", "d").with_default_next("t").default_next.as_deref(), Some("t"));
    /// ```
    #[must_use]
    pub fn with_default_next(mut self, state: impl Into<String>) -> Self {
        self.default_next = Some(state.into());
        self
    }

    /// Marks the state terminal.
    ///
    /// ```
    /// # use soorma_common::StateConfig;
    /// assert!(StateConfig::new("done", "d").terminal().is_terminal);
    /// ```
    #[must_use]
    pub fn terminal(mut self) -> Self {
        self.is_terminal = true;
        self
    }

    /// Makes this a terminal state that fails the plan.
    ///
    /// ```
    /// use soorma_common::StateConfig;
    /// let s = StateConfig::new("gave_up", "no results").failed();
    /// assert!(s.is_terminal && s.fails);
    /// ```
    #[must_use]
    pub fn failed(mut self) -> Self {
        self.is_terminal = true;
        self.fails = true;
        self
    }

    /// Sets the template of the plan's result when it ends in this (terminal) state.
    ///
    /// ```
    /// use soorma_common::StateConfig;
    /// let s = StateConfig::new("done", "").terminal().with_result(serde_json::json!({"summary": "{{results.analyze.summary}}"}));
    /// assert!(s.result.is_some());
    /// ```
    #[must_use]
    pub fn with_result(mut self, template: Value) -> Self {
        self.result = Some(template);
        self
    }
}

fn default_initial_state() -> String {
    "start".to_owned()
}

/// A plan's state machine.
///
/// ```
/// use soorma_common::{PlanDefinition, StateConfig};
/// let plan = PlanDefinition::new("research.plan", "Research a topic")
///     .with_state(StateConfig::new("start", "begin").with_default_next("done"))
///     .with_state(StateConfig::new("done", "finished").terminal());
/// assert_eq!(plan.initial_state, "start");
/// assert_eq!(plan.states.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PlanDefinition {
    /// The plan type (`research.plan`).
    pub plan_type: String,
    /// What the plan achieves.
    #[serde(default)]
    pub description: String,
    /// The state a new plan starts in.
    #[serde(default = "default_initial_state")]
    pub initial_state: String,
    /// The states by name.
    pub states: BTreeMap<String, StateConfig>,
}

impl PlanDefinition {
    /// A definition with no states that starts in `start`.
    ///
    /// ```
    /// # use soorma_common::PlanDefinition;
    /// assert!(PlanDefinition::new("p", "d").states.is_empty());
    /// ```
    pub fn new(plan_type: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            plan_type: plan_type.into(),
            description: description.into(),
            initial_state: default_initial_state(),
            states: BTreeMap::new(),
        }
    }

    /// Sets the initial state.
    ///
    /// ```
    /// # use soorma_common::PlanDefinition;
    /// assert_eq!(PlanDefinition::new("p", "d").with_initial_state("s").initial_state, "s");
    /// ```
    #[must_use]
    pub fn with_initial_state(mut self, state: impl Into<String>) -> Self {
        self.initial_state = state.into();
        self
    }

    /// Adds a state (keyed by its name).
    ///
    /// ```
    /// # use soorma_common::{PlanDefinition, StateConfig};
    /// let p = PlanDefinition::new("p", "d").with_state(StateConfig::new("s", "d"));
    /// assert!(p.states.contains_key("s"));
    /// ```
    #[must_use]
    pub fn with_state(mut self, state: StateConfig) -> Self {
        self.states.insert(state.state_name.clone(), state);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plan_definition_round_trips() {
        let plan = PlanDefinition::new("research.plan", "Research")
            .with_state(
                StateConfig::new("start", "search")
                    .with_action(
                        StateAction::new("search.requested", "search.completed")
                            .with_data(json!({"q": "{{goal.topic}}"})),
                    )
                    .with_transition(
                        StateTransition::new("search.completed", "done")
                            .with_condition("data.count > 0"),
                    ),
            )
            .with_state(StateConfig::new("done", "finished").terminal());
        let v = serde_json::to_value(&plan).unwrap();
        assert_eq!(serde_json::from_value::<PlanDefinition>(v).unwrap(), plan);
    }

    #[test]
    fn plan_definition_from_minimal_json() {
        let plan: PlanDefinition = serde_json::from_value(json!({
            "plan_type": "p",
            "states": {"start": {"state_name": "start", "is_terminal": true, "x": 1}},
            "unknown": true
        }))
        .unwrap();
        assert_eq!(plan.initial_state, "start");
        assert!(plan.states["start"].is_terminal);
    }
}
