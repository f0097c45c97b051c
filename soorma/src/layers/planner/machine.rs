//! The plan state machine as a pure step: `(plan, record, event) → (record', effects)`.
//! Persisting the record and publishing the effects is the caller's job, in that order.

use serde_json::{Map, Value, json};
use soorma_common::{
    ActionReply, EventEnvelope, PlanRecord, PlanStatus, PlanStep, PublishedAction,
};

use super::definition::Plan;
use crate::error::{Error, Result};

/// At most this many actions per plan: a guard against plans that loop forever (the plan
/// fails with a message saying so).
///
/// ```
/// assert_eq!(soorma::planner::MAX_ACTIONS, 1_000);
/// ```
pub const MAX_ACTIONS: u32 = 1_000;
/// At most this many states entered in a row without an action (default-next chains).
const MAX_CHAIN: usize = 64;
/// At most this many events are kept while a plan is paused.
pub(crate) const MAX_DEFERRED: usize = 100;

/// An action request to publish.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ActionIntent {
    pub id: String,
    pub event_type: String,
    pub response_event: String,
    pub data: Value,
}

/// What a step wants published once the record is stored.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub actions: Vec<ActionIntent>,
    /// `(event type, data)` on `system-events`.
    pub tracker: Vec<(&'static str, Value)>,
    /// The reply to the goal: `Ok(result)` or `Err(error)`.
    pub reply: Option<std::result::Result<Value, String>>,
    /// Whether the record changed (and must be stored).
    pub changed: bool,
    /// Whether the step applied events kept while the plan was paused (then the pending action
    /// it published cannot be rendered again from a redelivery: see
    /// [`PlanRecord::published_action`]).
    pub applied_kept: bool,
}

fn now() -> String {
    crate::util::now_rfc3339()
}

/// The context templates see: `goal`, `results`, `state`, `event`.
fn template_context(record: &PlanRecord, trigger: Option<&EventEnvelope>) -> Value {
    json!({
        "goal": record.goal_data,
        "results": record.results,
        "state": record.state,
        "event": trigger.map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).unwrap_or(Value::Null),
    })
}

/// The context conditions see: also `data` (the triggering event's data).
fn condition_context(record: &PlanRecord, trigger: &EventEnvelope) -> Value {
    let mut ctx = template_context(record, Some(trigger));
    ctx["data"] = trigger.data.clone();
    ctx
}

/// Starts a pending plan: enters its initial state.
pub(crate) fn start(plan: &Plan, record: &mut PlanRecord) -> Result<Effects> {
    let mut fx = Effects::default();
    if record.status != PlanStatus::Pending {
        resend(plan, record, None, &mut fx);
        return Ok(fx);
    }
    fx.changed = true;
    record.status = PlanStatus::Running;
    fx.tracker.push((
        "plan.started",
        json!({
            "plan_id": record.plan_id,
            "plan_type": record.plan_type,
            "state": plan.definition().initial_state,
            "parent_plan_id": record.parent_plan_id,
            "session_id": record.session_id,
        }),
    ));
    let initial = plan.definition().initial_state.clone();
    enter(plan, record, initial, None, None, &mut fx)?;
    Ok(fx)
}

/// Applies an event to a plan: records the result of the current state's action, follows the
/// first transition whose event and condition match, and runs the next state's action. When
/// the event resumes a paused plan (the awaited answer, or its timer), the events kept while it
/// was paused are applied next, as [`resume`] does.
pub(crate) fn on_event(
    plan: &Plan,
    record: &mut PlanRecord,
    trigger: &EventEnvelope,
) -> Result<Effects> {
    let was_paused = record.status == PlanStatus::Paused;
    let mut fx = step(plan, record, trigger)?;
    if was_paused && record.status == PlanStatus::Running {
        apply_deferred(plan, record, &mut fx)?;
    }
    Ok(fx)
}

/// Applies the events kept while the plan was paused, in the order they came.
fn apply_deferred(plan: &Plan, record: &mut PlanRecord, fx: &mut Effects) -> Result<()> {
    for event in std::mem::take(&mut record.deferred) {
        fx.changed = true;
        fx.applied_kept = true;
        let more = on_event(plan, record, &event)?;
        fx.actions.extend(more.actions);
        fx.tracker.extend(more.tracker);
        if more.reply.is_some() {
            fx.reply = more.reply;
        }
    }
    Ok(())
}

/// The number of the plan's action a reply names, when `data`'s `request_id` is one of this
/// plan's action ids: `Some(n)` for `<plan id>-a<n>`.
fn answered_action(plan_id: &str, data: &Value) -> Option<u32> {
    let request = data.get("request_id")?.as_str()?;
    request
        .strip_prefix(plan_id)?
        .strip_prefix("-a")?
        .parse()
        .ok()
}

/// One event's step of [`on_event`].
fn step(plan: &Plan, record: &mut PlanRecord, trigger: &EventEnvelope) -> Result<Effects> {
    let mut fx = Effects::default();
    match record.status {
        PlanStatus::Completed | PlanStatus::Failed => {
            resend(plan, record, Some(trigger), &mut fx);
            return Ok(fx);
        }
        PlanStatus::Pending => {
            // A stray event before the plan started: start it; the event is not for it yet.
            return start(plan, record);
        }
        _ => {}
    }
    if let Some(kept) = published_action(record)
        && kept.handled_by == trigger.id
    {
        // A redelivery of the event whose handling published the pending action after
        // applying events kept during a pause (paused again since, or not): that copy again,
        // and the event is not applied twice.
        fx.actions.push(ActionIntent::from(kept));
        return Ok(fx);
    }
    if record.last_trigger.as_deref() == Some(trigger.id.as_str()) {
        // A redelivery of the event that caused the current state: publish its action again
        // (same id, so the bus keeps one copy) instead of transitioning twice.
        resend(plan, record, Some(trigger), &mut fx);
        return Ok(fx);
    }
    if trigger.event_type == TIMEOUT_EVENT {
        // Only the timer of the question the plan awaits moves it (a stale one changes
        // nothing, whether the plan is paused or running again).
        return on_timeout(plan, record, trigger);
    }
    if let Some(n) = answered_action(&record.plan_id, &trigger.data)
        && n != record.actions
    {
        // The reply to an earlier action of this plan (redelivered late, after the plan moved
        // on): applying it would move the plan again on old data.
        tracing::debug!(plan_id = %record.plan_id, event_id = %trigger.id, action = n, pending = record.actions, "a reply to an earlier action of the plan; ignored");
        return Ok(fx);
    }
    if record.status == PlanStatus::Paused {
        let awaited = record.state.get("awaiting_event").and_then(Value::as_str);
        if awaited != Some(trigger.event_type.as_str()) {
            if record.deferred.iter().any(|d| d.id == trigger.id) {
                return Ok(fx);
            }
            if record.deferred.len() >= MAX_DEFERRED {
                let dropped = record.deferred.remove(0);
                tracing::warn!(plan_id = %record.plan_id, dropped = %dropped.id, "too many events while paused; dropping the oldest");
            }
            record.deferred.push(trigger.clone());
            fx.changed = true;
            return Ok(fx);
        }
        resume_status(record, &mut fx);
    }
    let current = record.current_state.clone();
    let Some(state) = plan.definition().states.get(&current) else {
        fail(
            record,
            format!("the plan is in unknown state `{current}`"),
            &mut fx,
        );
        return Ok(fx);
    };
    let answers_action = state
        .action
        .as_ref()
        .is_some_and(|a| a.response_event == trigger.event_type)
        || record.state.get("awaiting_event").and_then(Value::as_str) == Some(&trigger.event_type);
    let outcome = ActionReply::outcome_of(&trigger.data);
    if answers_action {
        let stored = match &outcome {
            Ok(v) => v.clone(),
            Err(e) => json!({"error": e}),
        };
        record.results.insert(current.clone(), stored);
        clear_awaiting(record);
        fx.changed = true;
    }
    let ctx = condition_context(record, trigger);
    let mut next = None;
    for (i, t) in state.transitions.iter().enumerate() {
        if t.on_event != trigger.event_type {
            continue;
        }
        let passes = match plan.condition(&current, i) {
            None => true,
            Some(cond) => cond.eval(&ctx).map_err(|e| {
                Error::Handler(format!(
                    "plan `{}`, state `{current}`: the condition of the transition on `{}` failed: {e}",
                    record.plan_id, t.on_event
                ))
            })?,
        };
        if passes {
            next = Some(t.to_state.clone());
            break;
        }
    }
    let next = match next {
        Some(n) => n,
        None if answers_action => match (&outcome, &state.default_next) {
            (Err(e), _) => {
                let action = state.action.as_ref().map_or("", |a| a.event_type.as_str());
                fail(
                    record,
                    format!("state `{current}`: `{action}` failed: {e}"),
                    &mut fx,
                );
                return Ok(fx);
            }
            (Ok(_), Some(default)) => default.clone(),
            (Ok(_), None) => {
                fail(
                    record,
                    format!(
                        "state `{current}`: no transition matches `{}` and there is no default_next",
                        trigger.event_type
                    ),
                    &mut fx,
                );
                return Ok(fx);
            }
        },
        None => {
            tracing::debug!(plan_id = %record.plan_id, state = %current, event_type = %trigger.event_type, "the event does not move the plan");
            return Ok(fx);
        }
    };
    record.last_trigger = Some(trigger.id.clone());
    enter(
        plan,
        record,
        next,
        Some(trigger.event_type.clone()),
        Some(trigger),
        &mut fx,
    )?;
    Ok(fx)
}

/// The event a human-input timer publishes (on `action-results`, correlated with the plan).
pub(crate) const TIMEOUT_EVENT: &str = "plan.timeout";

fn clear_awaiting(record: &mut PlanRecord) {
    for key in ["awaiting_event", "awaiting_id", "awaiting_question"] {
        record.state.remove(key);
    }
}

/// A human-input timer fired: if the plan still waits for that answer, it resumes and follows
/// its transition on `plan.timeout`, or fails when it has none. A stale timer changes nothing.
fn on_timeout(plan: &Plan, record: &mut PlanRecord, trigger: &EventEnvelope) -> Result<Effects> {
    let mut fx = Effects::default();
    let waiting_for = record.state.get("awaiting_id").and_then(Value::as_str);
    if waiting_for.is_none()
        || trigger.data.get("awaiting_id").and_then(Value::as_str) != waiting_for
    {
        tracing::debug!(plan_id = %record.plan_id, "a stale human-input timer; ignored");
        return Ok(fx);
    }
    let question = record
        .state
        .get("awaiting_question")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    resume_status(record, &mut fx);
    clear_awaiting(record);
    let current = record.current_state.clone();
    record.results.insert(
        current.clone(),
        json!({"timeout": true, "question": question}),
    );
    let Some(state) = plan.definition().states.get(&current) else {
        fail(
            record,
            format!("the plan is in unknown state `{current}`"),
            &mut fx,
        );
        return Ok(fx);
    };
    let ctx = condition_context(record, trigger);
    for (i, t) in state.transitions.iter().enumerate() {
        if t.on_event != TIMEOUT_EVENT {
            continue;
        }
        let passes = match plan.condition(&current, i) {
            None => true,
            Some(cond) => cond.eval(&ctx).map_err(|e| Error::Handler(e.to_string()))?,
        };
        if passes {
            record.last_trigger = Some(trigger.id.clone());
            let to = t.to_state.clone();
            enter(
                plan,
                record,
                to,
                Some(TIMEOUT_EVENT.to_owned()),
                Some(trigger),
                &mut fx,
            )?;
            return Ok(fx);
        }
    }
    let seconds = trigger
        .data
        .get("timeout_seconds")
        .and_then(Value::as_f64)
        .unwrap_or_default();
    fail(
        record,
        format!(
            "no answer to \"{question}\" within {seconds} s (state `{current}` has no `{TIMEOUT_EVENT}` transition)"
        ),
        &mut fx,
    );
    Ok(fx)
}

pub(crate) fn resume_status(record: &mut PlanRecord, fx: &mut Effects) {
    record.status = PlanStatus::Running;
    record.state.remove("pause_reason");
    fx.changed = true;
    fx.tracker.push((
        "plan.resumed",
        json!({"plan_id": record.plan_id, "state": record.current_state}),
    ));
}

/// Enters `state` (and follows `default_next` from states without an action).
fn enter(
    plan: &Plan,
    record: &mut PlanRecord,
    mut state: String,
    mut on_event: Option<String>,
    trigger: Option<&EventEnvelope>,
    fx: &mut Effects,
) -> Result<()> {
    for _ in 0..MAX_CHAIN {
        let Some(config) = plan.definition().states.get(&state) else {
            fail(record, format!("no state `{state}`"), fx);
            return Ok(());
        };
        let from = std::mem::replace(&mut record.current_state, state.clone());
        record
            .history
            .push(PlanStep::new(&state, on_event.take(), now()));
        count_visit(record, &state);
        fx.changed = true;
        fx.tracker.push((
            "plan.state_changed",
            json!({"plan_id": record.plan_id, "from": from, "to": state}),
        ));
        if config.is_terminal {
            let ctx = template_context(record, trigger);
            let rendered = match plan.result_template(&state) {
                Some(t) => t.render(&ctx).map_err(|e| e.to_string()),
                None => Ok(Value::Object(record.results.clone())),
            };
            return if config.fails {
                let message = match rendered {
                    Ok(Value::String(s)) => s,
                    Ok(other) if plan.result_template(&state).is_some() => other.to_string(),
                    Ok(_) => format!("the plan ended in failed state `{state}`"),
                    Err(e) => format!("the plan ended in failed state `{state}` ({e})"),
                };
                fail(record, message, fx);
                Ok(())
            } else {
                match rendered {
                    Ok(result) => {
                        complete(record, result, fx);
                        Ok(())
                    }
                    Err(e) => {
                        fail(
                            record,
                            format!("state `{state}`: cannot build the result: {e}"),
                            fx,
                        );
                        Ok(())
                    }
                }
            };
        }
        if let Some(action) = &config.action {
            if record.actions >= MAX_ACTIONS {
                fail(
                    record,
                    format!("the plan exceeded {MAX_ACTIONS} actions; stopping it"),
                    fx,
                );
                return Ok(());
            }
            let ctx = template_context(record, trigger);
            let data = match plan.action_template(&state) {
                Some(t) => match t.render(&ctx) {
                    Ok(d) => d,
                    Err(e) => {
                        fail(
                            record,
                            format!(
                                "state `{state}`: cannot build the data of `{}`: {e}",
                                action.event_type
                            ),
                            fx,
                        );
                        return Ok(());
                    }
                },
                None => Value::Object(Map::new()),
            };
            record.actions += 1;
            fx.actions.push(ActionIntent {
                id: action_id(&record.plan_id, record.actions),
                event_type: action.event_type.clone(),
                response_event: action.response_event.clone(),
                data,
            });
            return Ok(());
        }
        match &config.default_next {
            Some(next) => state = next.clone(),
            None => return Ok(()), // waits for a transition event
        }
    }
    fail(
        record,
        format!(
            "more than {MAX_CHAIN} states entered without an action; is there a default_next loop?"
        ),
        fx,
    );
    Ok(())
}

/// Counts entries per state in `state.visits` (conditions can bound retries with it:
/// `state.visits.searching < 3`).
fn count_visit(record: &mut PlanRecord, state: &str) {
    let visits = record
        .state
        .entry("visits")
        .or_insert_with(|| Value::Object(Map::new()));
    if !visits.is_object() {
        *visits = Value::Object(Map::new());
    }
    if let Value::Object(map) = visits {
        let n = map.get(state).and_then(Value::as_u64).unwrap_or(0) + 1;
        map.insert(state.to_owned(), Value::from(n));
    }
}

pub(crate) fn action_id(plan_id: &str, n: u32) -> String {
    format!("{plan_id}-a{n}")
}

/// The plan's kept copy of its pending action ([`PlanRecord::published_action`]) while the
/// plan is still where publishing it left it: at that action, no state entered since, not
/// ended.
pub(crate) fn published_action(record: &PlanRecord) -> Option<&PublishedAction> {
    let kept = record.published_action.as_ref()?;
    let here = kept.id == action_id(&record.plan_id, record.actions)
        && usize::try_from(kept.at_step).is_ok_and(|n| n == record.history.len())
        && !matches!(record.status, PlanStatus::Completed | PlanStatus::Failed);
    here.then_some(kept)
}

impl From<&PublishedAction> for ActionIntent {
    fn from(kept: &PublishedAction) -> Self {
        Self {
            id: kept.id.clone(),
            event_type: kept.event_type.clone(),
            response_event: kept.response_event.clone(),
            data: kept.data.clone(),
        }
    }
}

/// Republishes what the plan's current position implies: the pending action, or the reply.
fn resend(plan: &Plan, record: &PlanRecord, trigger: Option<&EventEnvelope>, fx: &mut Effects) {
    match record.status {
        PlanStatus::Completed if !record.reply_sent => {
            fx.reply = Some(Ok(record.result.clone().unwrap_or(Value::Null)));
        }
        PlanStatus::Failed if !record.reply_sent => {
            fx.reply = Some(Err(record.error.clone().unwrap_or_default()));
        }
        PlanStatus::Running => {
            let state = &record.current_state;
            if let (Some(config), Some(template)) = (
                plan.definition().states.get(state),
                plan.action_template(state),
            ) && let Some(action) = &config.action
                && record.actions > 0
                && let Ok(data) = template.render(&template_context(record, trigger))
            {
                fx.actions.push(ActionIntent {
                    id: action_id(&record.plan_id, record.actions),
                    event_type: action.event_type.clone(),
                    response_event: action.response_event.clone(),
                    data,
                });
            }
        }
        _ => {}
    }
}

/// Completes the plan with `result`.
pub(crate) fn complete(record: &mut PlanRecord, result: Value, fx: &mut Effects) {
    record.status = PlanStatus::Completed;
    record.result = Some(result.clone());
    record.updated_at = Some(now());
    fx.changed = true;
    fx.tracker.push((
        "plan.completed",
        json!({"plan_id": record.plan_id, "state": record.current_state, "result": result}),
    ));
    fx.reply = Some(Ok(result));
}

/// Fails the plan with `error` (a no-op on a finished plan).
pub(crate) fn fail(record: &mut PlanRecord, error: String, fx: &mut Effects) {
    if matches!(record.status, PlanStatus::Completed | PlanStatus::Failed) {
        return;
    }
    record.status = PlanStatus::Failed;
    record.error = Some(error.clone());
    record.updated_at = Some(now());
    fx.changed = true;
    fx.tracker.push((
        "plan.failed",
        json!({"plan_id": record.plan_id, "state": record.current_state, "error": error}),
    ));
    fx.reply = Some(Err(error));
}

/// Pauses a running plan; `awaiting` names the event that resumes it by itself.
pub(crate) fn pause(
    record: &mut PlanRecord,
    reason: &str,
    awaiting: Option<(&str, &str, &str)>,
) -> Effects {
    let mut fx = Effects::default();
    if matches!(record.status, PlanStatus::Completed | PlanStatus::Failed) {
        return fx;
    }
    record.status = PlanStatus::Paused;
    record
        .state
        .insert("pause_reason".into(), Value::String(reason.to_owned()));
    if let Some((event, id, question)) = awaiting {
        for (key, value) in [
            ("awaiting_event", event),
            ("awaiting_id", id),
            ("awaiting_question", question),
        ] {
            record
                .state
                .insert(key.into(), Value::String(value.to_owned()));
        }
    }
    fx.changed = true;
    fx.tracker.push((
        "plan.paused",
        json!({"plan_id": record.plan_id, "state": record.current_state, "reason": reason}),
    ));
    fx
}

/// Resumes a paused plan with `input` (stored as `results.user_input`), then applies the
/// events that arrived while it was paused.
pub(crate) fn resume(plan: &Plan, record: &mut PlanRecord, input: Value) -> Result<Effects> {
    let mut fx = Effects::default();
    if record.status != PlanStatus::Paused {
        return Ok(fx);
    }
    record.results.insert("user_input".into(), input);
    clear_awaiting(record);
    resume_status(record, &mut fx);
    apply_deferred(plan, record, &mut fx)?;
    Ok(fx)
}

#[cfg(test)]
mod tests {
    use soorma_common::{PlanDefinition, StateAction, StateConfig, StateTransition, Topic};

    use super::*;

    /// `searching` asks `search.requested`; its reply goes to `evaluating`, which asks
    /// `judge.requested`; a `retry` verdict goes back to `searching`, `ok` ends the plan.
    fn retry_loop() -> Plan {
        Plan::new(
            PlanDefinition::new("research", "")
                .with_initial_state("searching")
                .with_state(
                    StateConfig::new("searching", "")
                        .with_action(StateAction::new("search.requested", "search.completed"))
                        .with_transition(StateTransition::new("search.completed", "evaluating")),
                )
                .with_state(
                    StateConfig::new("evaluating", "")
                        .with_action(StateAction::new("judge.requested", "judge.completed"))
                        .with_transition(
                            StateTransition::new("judge.completed", "searching")
                                .with_condition("data.result == 'retry'"),
                        )
                        .with_transition(StateTransition::new("judge.completed", "done")),
                )
                .with_state(StateConfig::new("done", "").terminal()),
        )
        .expect("a valid plan")
    }

    fn reply(id: &str, event: &str, action: &str, result: Value) -> EventEnvelope {
        EventEnvelope::new(id, "tool", Topic::ActionResults, event)
            .with_data(serde_json::to_value(ActionReply::success(action, result)).unwrap())
    }

    fn started(plan: &Plan) -> PlanRecord {
        let mut record = PlanRecord::new("P", "research", "searching");
        start(plan, &mut record).expect("start");
        record
    }

    #[test]
    fn a_late_reply_to_an_earlier_action_does_not_move_the_plan_again() {
        let plan = retry_loop();
        let mut record = started(&plan);
        on_event(
            &plan,
            &mut record,
            &reply("E1", "search.completed", "P-a1", json!(1)),
        )
        .unwrap();
        on_event(
            &plan,
            &mut record,
            &reply("E2", "judge.completed", "P-a2", json!("retry")),
        )
        .unwrap();
        assert_eq!(
            (record.current_state.as_str(), record.actions),
            ("searching", 3)
        );
        // E1 redelivered now (its first handling was not acknowledged).
        let fx = on_event(
            &plan,
            &mut record,
            &reply("E1", "search.completed", "P-a1", json!(1)),
        )
        .unwrap();
        assert!(!fx.changed && fx.actions.is_empty(), "{fx:?}");
        assert_eq!(
            (record.current_state.as_str(), record.actions),
            ("searching", 3)
        );
        // The reply to the pending action still moves it.
        let fx = on_event(
            &plan,
            &mut record,
            &reply("E3", "search.completed", "P-a3", json!(2)),
        )
        .unwrap();
        assert_eq!(record.current_state, "evaluating");
        assert_eq!(fx.actions[0].id, "P-a4");
        assert_eq!(record.results["searching"], json!(2));
    }

    #[test]
    fn events_kept_during_a_pause_are_applied_when_the_answer_resumes_the_plan() {
        // `searching` asks a person too; the answer (or its timeout) moves the plan to
        // `waiting`, where the search's reply moves it on.
        let plan = Plan::new(
            PlanDefinition::new("research", "")
                .with_initial_state("searching")
                .with_state(
                    StateConfig::new("searching", "")
                        .with_action(StateAction::new("search.requested", "search.completed"))
                        .with_transition(StateTransition::new("go.ahead", "waiting"))
                        .with_transition(StateTransition::new(TIMEOUT_EVENT, "waiting")),
                )
                .with_state(
                    StateConfig::new("waiting", "")
                        .with_transition(StateTransition::new("search.completed", "done")),
                )
                .with_state(StateConfig::new("done", "").terminal()),
        )
        .unwrap();
        for answer_by_timer in [false, true] {
            let mut record = started(&plan);
            pause(
                &mut record,
                "waiting for human input",
                Some(("go.ahead", "P-ask-1", "Search?")),
            );
            // The action's reply comes while the plan waits for the person: kept.
            let kept = on_event(
                &plan,
                &mut record,
                &reply("E1", "search.completed", "P-a1", json!(1)),
            )
            .unwrap();
            assert!(kept.changed && kept.actions.is_empty());
            assert_eq!(record.deferred.len(), 1);
            let resumer = if answer_by_timer {
                EventEnvelope::new("T1", "timer", Topic::ActionResults, TIMEOUT_EVENT)
                    .with_data(json!({"awaiting_id": "P-ask-1"}))
            } else {
                EventEnvelope::new("H1", "person", Topic::ActionResults, "go.ahead")
                    .with_data(json!({"yes": true}))
            };
            let fx = on_event(&plan, &mut record, &resumer).unwrap();
            assert!(record.deferred.is_empty(), "timer: {answer_by_timer}");
            assert_eq!(
                record.status,
                PlanStatus::Completed,
                "the kept reply was applied"
            );
            assert_eq!(record.current_state, "done");
            assert!(matches!(fx.reply, Some(Ok(_))), "{fx:?}");
        }
    }

    /// The redelivery of the event whose handling published the kept action publishes that
    /// copy again and is not applied twice, also when the plan was paused again since (where
    /// it would otherwise be kept as an event for the resume).
    #[test]
    fn the_event_that_published_a_kept_action_is_not_applied_again() {
        let plan = retry_loop();
        let mut record = started(&plan);
        let mut fx = on_event(
            &plan,
            &mut record,
            &reply("E1", "search.completed", "P-a1", json!(1)),
        )
        .unwrap();
        let published = fx.actions.pop().unwrap();
        record.published_action = Some(PublishedAction::new(
            "H1",
            u32::try_from(record.history.len()).unwrap(),
            &published.id,
            &published.event_type,
            &published.response_event,
            published.data.clone(),
        ));
        let answer = EventEnvelope::new("H1", "person", Topic::ActionResults, "judge.completed")
            .with_data(json!({"result": "retry"}));
        for paused in [false, true] {
            if paused {
                pause(
                    &mut record,
                    "again",
                    Some(("other.answer", "P-ask-2", "Again?")),
                );
            }
            let fx = on_event(&plan, &mut record, &answer).unwrap();
            assert_eq!(fx.actions, vec![published.clone()], "paused: {paused}");
            assert!(!fx.changed, "paused: {paused}");
            assert_eq!(record.current_state, "evaluating");
            assert!(record.deferred.is_empty());
        }
    }

    #[test]
    fn a_stale_timer_changes_nothing_while_the_plan_runs() {
        let plan = Plan::new(
            PlanDefinition::new("review", "")
                .with_initial_state("review")
                .with_state(
                    StateConfig::new("review", "")
                        .with_transition(StateTransition::new(TIMEOUT_EVENT, "escalated"))
                        .with_transition(StateTransition::new("approved", "done")),
                )
                .with_state(StateConfig::new("escalated", "").terminal())
                .with_state(StateConfig::new("done", "").terminal()),
        )
        .unwrap();
        let mut record = PlanRecord::new("P", "review", "review");
        start(&plan, &mut record).unwrap();
        assert_eq!(record.status, PlanStatus::Running);
        // The timer of a question answered already fires while the plan runs.
        let stale = EventEnvelope::new("T1", "timer", Topic::ActionResults, TIMEOUT_EVENT)
            .with_data(json!({"awaiting_id": "P-ask-old"}));
        let fx = on_event(&plan, &mut record, &stale).unwrap();
        assert!(!fx.changed, "{fx:?}");
        assert_eq!(
            (record.status, record.current_state.as_str()),
            (PlanStatus::Running, "review")
        );
    }
}
