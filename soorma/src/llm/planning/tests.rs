use serde_json::json;
use soorma_common::{EventDefinition, Topic};

use super::*;
use crate::llm::{Role, ScriptedLlm};

fn capabilities() -> Vec<AgentCapability> {
    vec![
        AgentCapability::new(
            "search",
            EventDefinition::new("search.requested", Topic::ActionRequests).with_payload_schema(
                json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            ),
        )
        .with_description("Searches the web."),
        // No description: the event's is used, else a placeholder.
        AgentCapability::new(
            "summarize",
            EventDefinition::new("summarize.requested", Topic::ActionRequests)
                .with_payload_schema(json!({"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}))
                .with_response_schema(json!({"type": "string"})),
        )
        .with_produced_event(EventDefinition::new("summarize.completed", Topic::ActionResults)),
    ]
}

const GOOD_PLAN: &str = r#"{
  "plan_type": "research",
  "states": {
    "start": {"state_name": "start",
              "action": {"event_type": "search.requested", "response_event": "search.completed",
                         "data": {"q": "{{goal.topic}}"}},
              "transitions": [{"on_event": "search.completed", "to_state": "summarizing", "condition": "data.success"},
                              {"on_event": "search.completed", "to_state": "failed"}]},
    "summarizing": {"state_name": "summarizing",
              "action": {"event_type": "summarize.requested", "response_event": "summarize.completed",
                         "data": {"items": "{{results.start.items}}"}},
              "transitions": [{"on_event": "summarize.completed", "to_state": "done"}]},
    "done": {"state_name": "done", "is_terminal": true, "result": {"summary": "{{results.summarizing}}"}},
    "failed": {"state_name": "failed", "is_terminal": true, "fails": true, "result": "no sources"}
  }
}"#;

/// A plan with an unknown target state, an event nobody consumes, and a literal payload its
/// schema rejects.
const BAD_PLAN: &str = r#"{
  "plan_type": "research",
  "states": {
    "start": {"state_name": "start",
              "action": {"event_type": "crawl.requested", "response_event": "crawl.completed"},
              "transitions": [{"on_event": "crawl.completed", "to_state": "sumarizing"}]},
    "summarizing": {"state_name": "summarizing",
              "action": {"event_type": "summarize.requested", "response_event": "summarize.completed",
                         "data": {"items": 3}},
              "transitions": [{"on_event": "summarize.completed", "to_state": "done"}]},
    "done": {"state_name": "done", "is_terminal": true}
  }
}"#;

fn goal() -> Value {
    json!({"topic": "tea"})
}

#[tokio::test]
async fn create_plan_accepts_a_valid_plan_and_prompts_with_goal_capabilities_and_schema() {
    let model = ScriptedLlm::new([GOOD_PLAN]);
    let options = PlanningOptions::new().with_instructions("Keep plans short.");
    let plan = create_plan(&model, &goal(), &capabilities(), &options)
        .await
        .unwrap();
    assert_eq!(plan.definition().plan_type, "research");
    assert_eq!(plan.definition().states.len(), 4);
    let request = &model.requests()[0];
    assert_eq!(request.len(), 2);
    let (system, user) = (&request[0].content, &request[1].content);
    assert_eq!(request[0].role, Role::System);
    assert!(system.contains("Never invent events"), "{system}");
    assert!(system.contains("Keep plans short."), "{system}");
    // structured output adds the PlanDefinition JSON Schema.
    assert!(system.contains("\"initial_state\""), "{system}");
    assert!(system.contains("\"StateConfig\""), "{system}");
    assert!(user.contains("\"topic\": \"tea\""), "{user}");
    assert!(user.contains("- `search`: Searches the web."), "{user}");
    assert!(user.contains("request event: `search.requested`"), "{user}");
    assert!(
        user.contains(r#"payload schema: {"properties":{"q":{"type":"string"}}"#),
        "{user}"
    );
    assert!(
        user.contains("reply result schema: {\"type\":\"string\"}"),
        "{user}"
    );
    assert!(
        user.contains("reply event to use: `search.completed`"),
        "{user}"
    );
    assert!(
        user.contains("reply event to use: `summarize.completed`"),
        "{user}"
    );
    assert!(user.contains("- `summarize`: (no description)"), "{user}");
}

#[tokio::test]
async fn an_invalid_plan_goes_back_with_every_problem_and_the_fix_is_accepted() {
    let model = ScriptedLlm::new([BAD_PLAN, GOOD_PLAN]);
    let plan = create_plan(
        &model,
        &goal(),
        &capabilities(),
        &PlanningOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(plan.definition().states.len(), 4);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1];
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].role, Role::Assistant);
    assert!(second[2].content.contains("crawl.requested"));
    let feedback = &second[3].content;
    for expected in [
        "Your plan was rejected",
        "unknown state `sumarizing`",
        "state `summarizing` is unreachable",
        "state `start`: no registered agent consumes `crawl.requested`; the request events are: `search.requested`, `summarize.requested`",
        "state `summarizing`: the data of `summarize.requested` at `/items`",
    ] {
        assert!(
            feedback.contains(expected),
            "missing {expected:?} in:\n{feedback}"
        );
    }
}

#[tokio::test]
async fn create_plan_gives_up_after_its_attempts_keeping_every_problem() {
    let not_a_plan = r#"{"plan_type": "x", "states": 3}"#;
    let model = ScriptedLlm::new([BAD_PLAN, BAD_PLAN, not_a_plan, not_a_plan, not_a_plan]);
    let err = create_plan(
        &model,
        &goal(),
        &capabilities(),
        &PlanningOptions::new().with_max_attempts(3),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no acceptable plan from the model after 3 attempt(s)"),
        "{text}"
    );
    let Some(PlanningError::GaveUp { what, attempts }) =
        err.downcast_ref::<PlanningError>().cloned()
    else {
        panic!("unexpected error: {text}");
    };
    assert_eq!(what, "plan");
    assert_eq!(attempts.len(), 3);
    for attempt in &attempts[..2] {
        assert!(attempt.reply.contains("crawl.requested"));
        assert!(
            attempt
                .problems
                .iter()
                .any(|p| p.contains("unknown state `sumarizing`")),
            "{:?}",
            attempt.problems
        );
        assert!(attempt.problems.len() >= 3, "{:?}", attempt.problems);
    }
    // The third proposal was never a plan definition: structured output's own retries (3
    // replies) are its problems.
    assert_eq!(attempts[2].problems.len(), 3);
    assert!(
        attempts[2].problems[0].contains("`/states`"),
        "{:?}",
        attempts[2].problems
    );
    assert_eq!(model.request_count(), 5);
    // The second proposal was asked with the first one's problems.
    assert!(model.requests()[1][3].content.contains("crawl.requested"));
}

#[tokio::test]
async fn a_plan_whose_reply_moves_nothing_or_whose_template_lacks_required_fields_is_rejected() {
    let plan = r#"{
      "plan_type": "p",
      "states": {
        "start": {"state_name": "start",
                  "action": {"event_type": "search.requested", "response_event": "search.completed",
                             "data": {"query": "{{goal.topic}}"}},
                  "transitions": [{"on_event": "other.event", "to_state": "done"}]},
        "done": {"state_name": "done", "is_terminal": true}
      }
    }"#;
    let model = ScriptedLlm::new([plan]);
    let err = create_plan(
        &model,
        &goal(),
        &capabilities(),
        &PlanningOptions::new().with_max_attempts(1),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("lacks the required field(s) `q`"), "{err}");
    assert!(
        err.contains("no transition on the reply `search.completed`"),
        "{err}"
    );
}

fn record() -> PlanRecord {
    let mut record = PlanRecord::new("plan-1", "assist", REASONING_STATE);
    record.goal_data = goal();
    record
}

#[tokio::test]
async fn reason_next_action_rejects_unknown_events_and_bad_payloads_then_accepts_a_fix() {
    let model = ScriptedLlm::new([
        r#"{"action": "publish", "event_type": "crawl.requested", "data": {"q": "tea"}, "response_event": "crawl.completed"}"#,
        r#"{"action": "publish", "event_type": "search.requested", "data": {"q": 7}, "response_event": "search.completed"}"#,
        r#"{"action": "publish", "event_type": "search.requested", "data": {"q": "tea"}, "response_event": "search.completed"}"#,
    ]);
    let action = reason_next_action(
        &model,
        &record(),
        None,
        &capabilities(),
        &PlanningOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        action,
        NextAction::publish("search.requested", json!({"q": "tea"}), "search.completed")
    );
    let requests = model.requests();
    let first_user = &requests[0][1].content;
    assert!(first_user.contains("Steps so far: none."), "{first_user}");
    assert!(
        first_user.contains("choose the first action"),
        "{first_user}"
    );
    assert!(first_user.contains("Actions used: 0 of 25"), "{first_user}");
    let rejected = &requests[1].last().unwrap().content;
    assert!(
        rejected.contains("no registered agent consumes `crawl.requested`"),
        "{rejected}"
    );
    let rejected = &requests[2].last().unwrap().content;
    assert!(
        rejected
            .contains("the data of `search.requested` does not match its payload schema: at `/q`"),
        "{rejected}"
    );
}

#[tokio::test]
async fn reason_next_action_gives_up_with_every_rejection() {
    let ghost = r#"{"action": "delegate", "event_type": "ghost.goal", "data": {}, "response_event": "ghost.done"}"#;
    let model = ScriptedLlm::new([ghost, ghost]);
    let err = reason_next_action(
        &model,
        &record(),
        None,
        &capabilities(),
        &PlanningOptions::new().with_max_attempts(2),
    )
    .await
    .unwrap_err();
    let Some(PlanningError::GaveUp { what, attempts }) =
        err.downcast_ref::<PlanningError>().cloned()
    else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(what, "next action");
    assert_eq!(attempts.len(), 2);
    for attempt in &attempts {
        assert_eq!(attempt.problems.len(), 1);
        assert!(attempt.problems[0].contains("no registered agent consumes `ghost.goal`"));
    }
}

#[tokio::test]
async fn the_prompt_shows_the_steps_the_trigger_and_the_budget() {
    let mut r = record();
    r.status = soorma_common::PlanStatus::Running;
    let first = NextAction::publish("search.requested", json!({"q": "tea"}), "search.completed");
    steps::apply(&mut r, None, "goal", &first, 2).unwrap();
    let reply = EventEnvelope::new("e1", "tool", Topic::ActionResults, "search.completed")
        .with_data(json!({"request_id": "plan-1-a1", "success": true, "result": {"items": ["a"]}}));
    let second = NextAction::publish(
        "summarize.requested",
        json!({"items": ["a"]}),
        "summarize.completed",
    );
    steps::apply(&mut r, Some(&reply), "e1", &second, 2).unwrap();
    let answer = EventEnvelope::new("e2", "tool", Topic::ActionResults, "summarize.completed")
        .with_data(json!({"request_id": "plan-1-a2", "success": false, "error": "too short"}));
    let model = ScriptedLlm::new([r#"{"action": "fail", "error": "cannot summarize"}"#]);
    let options = PlanningOptions::new().with_max_actions(2);
    let action = reason_next_action(&model, &r, Some(&answer), &capabilities(), &options)
        .await
        .unwrap();
    assert_eq!(action, NextAction::fail("cannot summarize"));
    let user = &model.requests()[0][1].content;
    for expected in [
        r#"1. published `search.requested` {"q":"tea"} -> result: {"items":["a"]}"#,
        r#"2. published `summarize.requested` {"items":["a"]} -> failed: too short"#,
        "The event that just arrived: `summarize.completed`, the reply to step 2.",
        "Actions used: 2 of 2",
        "The budget is spent: complete or fail now.",
    ] {
        assert!(user.contains(expected), "missing {expected:?} in:\n{user}");
    }
}

#[test]
fn next_action_schema_is_tagged_by_action() {
    let schema = crate::llm::OutputSchema::of::<NextAction>()
        .schema
        .to_string();
    for tag in ["publish", "delegate", "complete", "fail", "wait"] {
        assert!(schema.contains(&format!("\"{tag}\"")), "{schema}");
    }
    let action: NextAction = serde_json::from_value(json!({"action": "wait"})).unwrap();
    assert_eq!(action, NextAction::wait(""));
}
