//! What an LLM proposes is checked against the discovered capabilities before anything runs.

use serde_json::Value;
use soorma_common::{AgentCapability, PlanDefinition};

use super::{NextAction, PlanningError};
use crate::error::SchemaViolation;

/// At most this many schema violations are reported per payload.
const MAX_VIOLATIONS: usize = 5;

/// The capability consuming `event`.
pub(super) fn capability<'a>(
    capabilities: &'a [AgentCapability],
    event: &str,
) -> Option<&'a AgentCapability> {
    capabilities
        .iter()
        .find(|c| c.consumed_event.event_name == event)
}

/// The request events of `capabilities`.
pub(super) fn known_events(capabilities: &[AgentCapability]) -> Vec<String> {
    capabilities
        .iter()
        .map(|c| c.consumed_event.event_name.clone())
        .collect()
}

/// The violations of `data` against `schema` (none when the schema does not compile).
pub(super) fn violations(schema: &Value, data: &Value) -> Vec<SchemaViolation> {
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return Vec::new();
    };
    validator
        .iter_errors(data)
        .take(MAX_VIOLATIONS)
        .map(|e| SchemaViolation::new(e.instance_path().to_string(), e.to_string()))
        .collect()
}

/// Every reason `capabilities` cannot carry out `action`.
pub(super) fn action_problems(
    action: &NextAction,
    capabilities: &[AgentCapability],
) -> Vec<PlanningError> {
    let (event_type, data, response_event) = match action {
        NextAction::Publish {
            event_type,
            data,
            response_event,
        }
        | NextAction::Delegate {
            event_type,
            data,
            response_event,
        } => (event_type, data, response_event),
        NextAction::Fail { error } if error.trim().is_empty() => {
            return vec![PlanningError::InvalidAction(
                "`fail` needs an `error` saying why".into(),
            )];
        }
        _ => return Vec::new(),
    };
    let mut problems = Vec::new();
    let Some(cap) = capability(capabilities, event_type) else {
        return vec![PlanningError::UnknownEvent {
            event: event_type.clone(),
            known: known_events(capabilities),
        }];
    };
    if response_event.trim().is_empty() {
        problems.push(PlanningError::InvalidAction(format!(
            "the request `{event_type}` has no `response_event`; name the event its reply comes back as"
        )));
    } else if response_event == event_type {
        problems.push(PlanningError::InvalidAction(format!(
            "the `response_event` of `{event_type}` must differ from the request event"
        )));
    }
    if let Some(schema) = &cap.consumed_event.payload_schema {
        let violations = violations(schema, data);
        if !violations.is_empty() {
            problems.push(PlanningError::InvalidData {
                event: event_type.clone(),
                violations,
            });
        }
    }
    problems
}

/// What is wrong with a proposed plan beyond [`Plan::new`](crate::layers::planner::Plan::new)'s checks:
/// actions on events no capability consumes, payloads that break a capability's schema (fully
/// for literal payloads, required fields for templates), replies that would move nothing.
pub(super) fn plan_problems(def: &PlanDefinition, capabilities: &[AgentCapability]) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, state) in &def.states {
        let Some(action) = &state.action else {
            continue;
        };
        let at = format!("state `{name}`");
        let event = &action.event_type;
        let Some(cap) = capability(capabilities, event) else {
            problems.push(format!(
                "{at}: {}",
                PlanningError::UnknownEvent {
                    event: event.clone(),
                    known: known_events(capabilities),
                }
            ));
            continue;
        };
        if !action.response_event.is_empty() {
            if action.response_event == *event {
                problems.push(format!(
                    "{at}: the `response_event` of `{event}` must differ from the request event"
                ));
            }
            let moves = state
                .transitions
                .iter()
                .any(|t| t.on_event == action.response_event);
            if !moves && state.default_next.is_none() && !state.transitions.is_empty() {
                problems.push(format!(
                    "{at}: no transition on the reply `{}` and no `default_next`; the reply would fail the plan",
                    action.response_event
                ));
            }
        }
        let Some(schema) = &cap.consumed_event.payload_schema else {
            continue;
        };
        let data = action
            .data
            .clone()
            .unwrap_or(Value::Object(Default::default()));
        if !data.to_string().contains("{{") {
            // A literal payload: it is sent as is, so it must match the schema.
            for v in violations(schema, &data) {
                problems.push(format!("{at}: the data of `{event}` {v}"));
            }
        } else if let Some(object) = data.as_object() {
            let missing: Vec<String> = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|field| !object.contains_key(*field))
                .map(|field| format!("`{field}`"))
                .collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "{at}: the data of `{event}` lacks the required field(s) {}",
                    missing.join(", ")
                ));
            }
        }
    }
    problems
}
