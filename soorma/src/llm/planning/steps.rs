//! Reasoning plans as pure steps over the plan record: the actions the model chose and what came
//! back (`state.steps`), applied with the same effects as the state machine's.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use soorma_common::{EventEnvelope, PlanRecord, PlanStatus};

use super::NextAction;
use crate::error::Result;
use crate::layers::planner::machine::{self, ActionIntent, Effects, MAX_ACTIONS};

/// Where a reasoning plan keeps its steps (in the record's working memory).
pub(super) const STEPS_KEY: &str = "steps";
/// At most this many events that answered no action are kept (the oldest go first).
const MAX_EVENTS_KEPT: usize = 100;

/// What a step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepKind {
    /// A request the plan published.
    Publish,
    /// A request handing the rest of the goal to another agent.
    Delegate,
    /// An event for the plan that answered no request.
    Event,
}

/// One step of a reasoning plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Step {
    pub kind: StepKind,
    /// The id of the published request (`<plan id>-a<n>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    pub event_type: String,
    #[serde(default)]
    pub data: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_event: Option<String>,
    /// Whether the request's reply arrived.
    #[serde(default)]
    pub answered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The steps of a reasoning plan, in order.
pub(crate) fn steps(record: &PlanRecord) -> Vec<Step> {
    record
        .state
        .get(STEPS_KEY)
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

fn save(record: &mut PlanRecord, steps: &[Step]) {
    record.state.insert(
        STEPS_KEY.into(),
        serde_json::to_value(steps).unwrap_or(Value::Null),
    );
}

/// The index of the unanswered request `trigger` replies to: by the reply's `request_id` (the
/// request's id), else the oldest one awaiting that reply event.
fn answered_index(steps: &[Step], trigger: &EventEnvelope) -> Option<usize> {
    let pending = |s: &&Step| s.kind != StepKind::Event && !s.answered;
    let request_id = trigger.data.get("request_id").and_then(Value::as_str);
    let by_id = request_id.and_then(|id| {
        steps
            .iter()
            .position(|s| pending(&s) && s.action_id.as_deref() == Some(id))
    });
    by_id.or_else(|| {
        steps.iter().position(|s| {
            pending(&s) && s.response_event.as_deref() == Some(trigger.event_type.as_str())
        })
    })
}

/// The request `trigger` answers, if any.
pub(crate) fn answered_step(record: &PlanRecord, trigger: &EventEnvelope) -> Option<Step> {
    let steps = steps(record);
    answered_index(&steps, trigger).map(|i| steps[i].clone())
}

/// The steps with `trigger` recorded, and the index of the request it answers.
pub(crate) fn observed(record: &PlanRecord, trigger: &EventEnvelope) -> (Vec<Step>, Option<usize>) {
    let mut steps = steps(record);
    let answered = answered_index(&steps, trigger);
    record_in(&mut steps, answered, trigger);
    (steps, answered)
}

/// Records `trigger`: the outcome of the request it answers, or an event of its own.
fn observe(record: &mut PlanRecord, trigger: &EventEnvelope) {
    let (steps, _) = observed(record, trigger);
    save(record, &steps);
}

fn record_in(steps: &mut Vec<Step>, answered: Option<usize>, trigger: &EventEnvelope) {
    match answered {
        Some(i) => {
            let step = &mut steps[i];
            step.answered = true;
            match soorma_common::ActionReply::outcome_of(&trigger.data) {
                Ok(result) => step.result = Some(result),
                Err(error) => step.error = Some(error),
            }
        }
        None => {
            steps.push(Step {
                kind: StepKind::Event,
                action_id: None,
                event_type: trigger.event_type.clone(),
                data: trigger.data.clone(),
                response_event: None,
                answered: false,
                result: None,
                error: None,
            });
            let events = steps.iter().filter(|s| s.kind == StepKind::Event).count();
            if events > MAX_EVENTS_KEPT
                && let Some(oldest) = steps.iter().position(|s| s.kind == StepKind::Event)
            {
                steps.remove(oldest);
            }
        }
    }
}

/// The action the model chose, applied to the record: the event being handled (`trigger`, with
/// id `trigger_id`) is recorded first; a redelivery of it republishes what it caused instead.
/// Requests beyond `max_actions` fail the plan.
pub(crate) fn apply(
    record: &mut PlanRecord,
    trigger: Option<&EventEnvelope>,
    trigger_id: &str,
    action: &NextAction,
    max_actions: u32,
) -> Result<Effects> {
    let mut fx = Effects::default();
    if matches!(record.status, PlanStatus::Completed | PlanStatus::Failed) {
        resend(record, &mut fx);
        return Ok(fx);
    }
    if record.last_trigger.as_deref() == Some(trigger_id) {
        resend(record, &mut fx);
        return Ok(fx);
    }
    record.last_trigger = Some(trigger_id.to_owned());
    fx.changed = true;
    if let Some(trigger) = trigger {
        observe(record, trigger);
    }
    if record.status == PlanStatus::Paused {
        machine::resume_status(record, &mut fx);
    }
    match action {
        NextAction::Publish {
            event_type,
            data,
            response_event,
        }
        | NextAction::Delegate {
            event_type,
            data,
            response_event,
        } => {
            let limit = max_actions.min(MAX_ACTIONS);
            if record.actions >= limit {
                machine::fail(
                    record,
                    format!(
                        "the plan reached its limit of {limit} actions without completing the goal; \
                         stopping it (the model asked for `{event_type}` again)"
                    ),
                    &mut fx,
                );
                return Ok(fx);
            }
            record.actions += 1;
            let id = machine::action_id(&record.plan_id, record.actions);
            let mut steps = steps(record);
            steps.push(Step {
                kind: if matches!(action, NextAction::Delegate { .. }) {
                    StepKind::Delegate
                } else {
                    StepKind::Publish
                },
                action_id: Some(id.clone()),
                event_type: event_type.clone(),
                data: data.clone(),
                response_event: Some(response_event.clone()),
                answered: false,
                result: None,
                error: None,
            });
            save(record, &steps);
            fx.actions.push(ActionIntent {
                id,
                event_type: event_type.clone(),
                response_event: response_event.clone(),
                data: data.clone(),
            });
        }
        NextAction::Complete { result } => machine::complete(record, result.clone(), &mut fx),
        NextAction::Fail { error } => machine::fail(record, error.clone(), &mut fx),
        NextAction::Wait { reason } => {
            let paused = machine::pause(record, reason, None);
            fx.tracker.extend(paused.tracker);
        }
    }
    Ok(fx)
}

/// Republishes what the plan's position implies: its latest request while unanswered, or the
/// reply to the goal while unsent.
pub(crate) fn resend(record: &PlanRecord, fx: &mut Effects) {
    match record.status {
        PlanStatus::Completed if !record.reply_sent => {
            fx.reply = Some(Ok(record.result.clone().unwrap_or(Value::Null)));
        }
        PlanStatus::Failed if !record.reply_sent => {
            fx.reply = Some(Err(record.error.clone().unwrap_or_default()));
        }
        PlanStatus::Running | PlanStatus::Paused => {
            let latest = machine::action_id(&record.plan_id, record.actions);
            if let Some(step) = steps(record)
                .into_iter()
                .rev()
                .find(|s| s.action_id.as_deref() == Some(latest.as_str()) && !s.answered)
            {
                fx.actions.push(ActionIntent {
                    id: latest,
                    event_type: step.event_type,
                    response_event: step.response_event.unwrap_or_default(),
                    data: step.data,
                });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soorma_common::Topic;

    fn running() -> PlanRecord {
        let mut r = PlanRecord::new("p1", "assist", "reasoning");
        r.status = PlanStatus::Running;
        r
    }

    fn reply(id: &str, event: &str, data: Value) -> EventEnvelope {
        EventEnvelope::new(id, "tool", Topic::ActionResults, event).with_data(data)
    }

    fn publish(event: &str) -> NextAction {
        NextAction::publish(event, json!({"x": 1}), format!("{event}.done"))
    }

    #[test]
    fn a_reply_is_recorded_on_its_request_and_a_redelivery_republishes() {
        let mut r = running();
        let fx = apply(&mut r, None, "goal-1", &publish("a"), 5).unwrap();
        assert_eq!(fx.actions[0].id, "p1-a1");
        let answer = reply(
            "e1",
            "a.done",
            json!({"request_id": "p1-a1", "success": true, "result": 7}),
        );
        let fx = apply(&mut r, Some(&answer), "e1", &publish("b"), 5).unwrap();
        assert_eq!(fx.actions[0].id, "p1-a2");
        let s = steps(&r);
        assert!(s[0].answered);
        assert_eq!(s[0].result, Some(json!(7)));
        assert!(!s[1].answered);
        // The same event again: the same request, republished; no third action.
        let fx = apply(&mut r, Some(&answer), "e1", &publish("c"), 5).unwrap();
        assert_eq!(fx.actions.len(), 1);
        assert_eq!(fx.actions[0].id, "p1-a2");
        assert_eq!(fx.actions[0].event_type, "b");
        assert_eq!(r.actions, 2);
    }

    #[test]
    fn failed_replies_and_stray_events_are_steps_too() {
        let mut r = running();
        apply(&mut r, None, "g", &publish("a"), 5).unwrap();
        let failed = reply(
            "e1",
            "a.done",
            json!({"request_id": "p1-a1", "success": false, "error": "boom"}),
        );
        apply(
            &mut r,
            Some(&failed),
            "e1",
            &NextAction::wait("for a person"),
            5,
        )
        .unwrap();
        assert_eq!(r.status, PlanStatus::Paused);
        let stray = reply("e2", "approval.given", json!({"by": "ada"}));
        let fx = apply(&mut r, Some(&stray), "e2", &NextAction::complete(1), 5).unwrap();
        assert_eq!(r.status, PlanStatus::Completed);
        assert_eq!(fx.reply, Some(Ok(json!(1))));
        let s = steps(&r);
        assert_eq!(s[0].error.as_deref(), Some("boom"));
        assert_eq!(s[1].kind, StepKind::Event);
        assert_eq!(s[1].data, json!({"by": "ada"}));
    }

    #[test]
    fn requests_beyond_the_limit_fail_the_plan() {
        let mut r = running();
        for i in 0..3 {
            apply(&mut r, None, &format!("t{i}"), &publish("a"), 3).unwrap();
        }
        assert_eq!(r.actions, 3);
        let fx = apply(&mut r, None, "t3", &publish("a"), 3).unwrap();
        assert!(fx.actions.is_empty());
        assert_eq!(r.status, PlanStatus::Failed);
        let error = r.error.clone().unwrap();
        assert!(error.contains("limit of 3 actions"), "{error}");
        assert!(matches!(fx.reply, Some(Err(_))));
    }
}
