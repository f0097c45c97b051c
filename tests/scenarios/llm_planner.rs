//! LLM planning with a scripted model (no network): a model choosing each next action, and a
//! model writing a plan that is validated, fixed and run as a state machine.

use std::time::Duration;

use serde_json::{Value, json};
use soorma::AgentBuilder;
use soorma::llm::ScriptedLlm;
use soorma::planner::llm::{LlmPlanner, PlanningOptions};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::agents::{calculator, research_planner, research_tools};

async fn assistant_goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.start_reasoning(&goal).await?;
    Ok(())
}

async fn assistant_step(mut plan: PlanContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.step(&mut plan).await?;
    Ok(())
}

/// A planner whose model chooses each next action (`assist.goal`).
fn assistant_planner(model: ScriptedLlm, options: PlanningOptions) -> AgentBuilder {
    Planner::new("assistant")
        .use_registered_handlers(false)
        .with_state(LlmPlanner::new(model).with_options(options))
        .handler(Handler::on_goal("assist.goal", assistant_goal))
        .handler(Handler::on_transition(assistant_step))
}

async fn writer_goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.start_plan(&goal).await?;
    Ok(())
}

/// A planner whose model writes a plan per goal (`write.goal`), run as a state machine.
fn writer_planner(model: ScriptedLlm) -> AgentBuilder {
    Planner::new("plan-writer")
        .use_registered_handlers(false)
        .with_state(LlmPlanner::new(model))
        .handler(Handler::on_goal("write.goal", writer_goal))
}

async fn load_plan(t: &TestPlatform, plan_id: &str) -> soorma::common::PlanRecord {
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    serde_json::from_slice(&stored.value).unwrap()
}

scenario!(llm_planner_calls_a_tool_then_completes_and_unknown_events_go_back_to_the_model);
async fn llm_planner_calls_a_tool_then_completes_and_unknown_events_go_back_to_the_model(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let model = ScriptedLlm::new([
        // An event nobody consumes: sent back to the model with the reason.
        r#"{"action": "publish", "event_type": "multiply.requested", "data": {"a": 6, "b": 7}, "response_event": "multiply.completed"}"#,
        r#"{"action": "publish", "event_type": "calculate.requested", "data": {"expression": "6*7"}, "response_event": "calculate.completed"}"#,
        r#"{"action": "complete", "result": {"answer": 42}}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let answer: Value = t
        .client()
        .with_timeout(wait)
        .invoke(
            "assist.goal",
            json!({"question": "6 times 7?"}),
            "assist.done",
        )
        .await
        .unwrap();
    assert_eq!(answer, json!({"answer": 42}));
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    // The first prompt: the goal and the calculator (the planner's own goal is not offered).
    let first = &requests[0][1].content;
    assert!(first.contains("\"question\": \"6 times 7?\""), "{first}");
    assert!(
        first.contains("request event: `calculate.requested`"),
        "{first}"
    );
    assert!(!first.contains("assist.goal"), "{first}");
    let rejected = &requests[1].last().unwrap().content;
    assert!(
        rejected.contains(
            "no registered agent consumes `multiply.requested`; the request events are: `calculate.requested`"
        ),
        "{rejected}"
    );
    // The third prompt (after the reply) shows the request and its result.
    let third = &requests[2][1].content;
    assert!(
        third.contains(
            r#"1. published `calculate.requested` {"expression":"6*7"} -> result: {"result":42.0}"#
        ),
        "{third}"
    );
    assert!(third.contains("the reply to step 1"), "{third}");
    // The request carried the plan id as correlation id; the plan record keeps the step.
    let request = t.expect_event("calculate.requested", wait).await.unwrap();
    let plan_id = request.correlation_id.clone().unwrap();
    assert_eq!(request.id, format!("{plan_id}-a1"));
    let record = load_plan(&t, &plan_id).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(record.actions, 1);
    assert_eq!(record.planner.as_deref(), Some("assistant"));
    assert_eq!(record.state["steps"][0]["result"], json!({"result": 42.0}));
    assert!(t.events_of_type("multiply.requested").is_empty());
    t.shutdown().await.unwrap();
}

scenario!(llm_planner_waits_for_an_event_then_fails_with_the_models_reason);
async fn llm_planner_waits_for_an_event_then_fails_with_the_models_reason(
    mut t: TestPlatform,
    wait: Duration,
) {
    let model = ScriptedLlm::new([
        r#"{"action": "wait", "reason": "waiting for the budget approval"}"#,
        r#"{"action": "fail", "error": "the budget was refused"}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("assist.goal", json!({"task": "buy a boat"}), "assist.done")
                .await
        }
    });
    let paused = t.expect_event("plan.paused", wait).await.unwrap();
    assert_eq!(paused.data["reason"], "waiting for the budget approval");
    let plan_id = paused.data["plan_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!goal.is_finished());
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "budget.decided",
            json!({"approved": false}),
        )
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let err = goal.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("the budget was refused"), "{err}");
    t.expect_event("plan.resumed", wait).await.unwrap();
    let second = &model.requests()[1][1].content;
    assert!(
        second.contains(r#"1. received `budget.decided` {"approved":false}"#),
        "{second}"
    );
    assert!(
        second.contains("The event that just arrived: `budget.decided` (step 1)."),
        "{second}"
    );
    let record = load_plan(&t, &plan_id).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Failed);
    t.shutdown().await.unwrap();
}

scenario!(llm_planner_delegates_the_goal_to_another_planner_whose_reply_ends_it);
async fn llm_planner_delegates_the_goal_to_another_planner_whose_reply_ends_it(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let model = ScriptedLlm::new([
        r#"{"action": "delegate", "event_type": "research.goal", "data": {"topic": "tea"}, "response_event": "research.done"}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let report: Value = t
        .client()
        .with_timeout(wait)
        .invoke(
            "assist.goal",
            json!({"task": "research tea"}),
            "assist.done",
        )
        .await
        .unwrap();
    assert_eq!(report["summary"], "2 sources about tea");
    // The sub-plan's reply ended the plan without asking the model again.
    assert_eq!(model.request_count(), 1);
    let goal = t.expect_event("research.goal", wait).await.unwrap();
    let parent = goal.correlation_id.clone().unwrap();
    assert_eq!(goal.plan_id.as_deref(), Some(parent.as_str()));
    let sub = load_plan(&t, &goal.id).await;
    assert_eq!(sub.parent_plan_id.as_deref(), Some(parent.as_str()));
    assert_eq!(sub.planner.as_deref(), Some("research-planner"));
    let record = load_plan(&t, &parent).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(
        record.result.as_ref().unwrap()["summary"],
        "2 sources about tea"
    );
    assert_eq!(record.state["steps"][0]["kind"], "delegate");
    // Each planner handled only its own plans: one completion each, no failure.
    assert_eq!(t.events_of_type("plan.completed").len(), 2);
    assert!(t.events_of_type("plan.failed").is_empty());
    t.shutdown().await.unwrap();
}

scenario!(llm_planner_that_keeps_publishing_is_stopped_at_its_action_limit);
async fn llm_planner_that_keeps_publishing_is_stopped_at_its_action_limit(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let model = ScriptedLlm::from_fn(|_| {
        r#"{"action": "publish", "event_type": "calculate.requested", "data": {"expression": "1+1"}, "response_event": "calculate.completed"}"#.into()
    });
    t.start(assistant_planner(
        model.clone(),
        PlanningOptions::new().with_max_actions(3),
    ))
    .await
    .unwrap();
    let err = t
        .client()
        .with_timeout(wait)
        .invoke::<Value>(
            "assist.goal",
            json!({"task": "count forever"}),
            "assist.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the plan reached its limit of 3 actions"),
        "{err}"
    );
    assert_eq!(t.events_of_type("calculate.requested").len(), 3);
    // Asked for the first action, then after each of the three replies.
    assert_eq!(model.request_count(), 4);
    let last = &model.requests()[3][1].content;
    assert!(last.contains("Actions used: 3 of 3"), "{last}");
    let failed = t.expect_event("plan.failed", wait).await.unwrap();
    assert!(
        failed.data["error"]
            .as_str()
            .unwrap()
            .contains("limit of 3 actions")
    );
    t.shutdown().await.unwrap();
}

scenario!(llm_written_plan_is_validated_fixed_and_run_as_a_state_machine);
async fn llm_written_plan_is_validated_fixed_and_run_as_a_state_machine(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let plan = |event: &str| {
        json!({
            "plan_type": "arithmetic",
            "states": {
                "start": {"state_name": "start",
                          "action": {"event_type": event, "response_event": "calculate.completed",
                                     "data": {"expression": "{{goal.expression}}"}},
                          "transitions": [{"on_event": "calculate.completed", "to_state": "done",
                                           "condition": "data.success"},
                                          {"on_event": "calculate.completed", "to_state": "failed"}]},
                "done": {"state_name": "done", "is_terminal": true,
                         "result": {"value": "{{results.start.result}}"}},
                "failed": {"state_name": "failed", "is_terminal": true, "fails": true,
                           "result": "cannot compute {{goal.expression}}"}
            }
        })
        .to_string()
    };
    let model = ScriptedLlm::new([plan("compute.requested"), plan("calculate.requested")]);
    t.start(writer_planner(model.clone())).await.unwrap();
    let out: Value = t
        .client()
        .with_timeout(wait)
        .invoke("write.goal", json!({"expression": "2*(3+4)"}), "write.done")
        .await
        .unwrap();
    assert_eq!(out, json!({"value": 14.0}));
    assert_eq!(model.request_count(), 2);
    let feedback = &model.requests()[1][3].content;
    assert!(
        feedback.contains("state `start`: no registered agent consumes `compute.requested`"),
        "{feedback}"
    );
    let started = t.expect_event("plan.started", wait).await.unwrap();
    assert_eq!(started.data["plan_type"], "arithmetic");
    t.shutdown().await.unwrap();
}
