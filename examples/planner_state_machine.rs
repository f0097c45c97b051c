//! A planner running an event-driven state machine: search → analyze → done, with a retry
//! branch (the flaky search is retried up to three times) and an ask-the-user branch (a
//! low-confidence analysis asks a person, here simulated by an agent, before finishing).
//!
//! ```text
//! cargo run -p soorma-examples --example planner_state_machine
//! ```
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use soorma::common::{PlanDefinition, PlanStatus, StateAction, StateConfig, StateTransition};
use soorma::prelude::*;

static SEARCHES: AtomicU32 = AtomicU32::new(0);

/// Searches the web (fails on its first call, to show the retry branch).
#[on_invoke("search.requested", agent = "web-search")]
async fn search(req: Invocation<Value>) -> Result<Value, ToolError> {
    if SEARCHES.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(ToolError::new("search backend timed out"));
    }
    let topic = req.data["q"].as_str().unwrap_or_default();
    Ok(json!({"count": 3, "items": [
        format!("{topic}: an overview"), format!("{topic}: a tutorial"), format!("{topic}: a critique")
    ]}))
}

/// Summarises the sources; unsure about topics containing "?".
#[on_invoke("analyze.requested", agent = "analyst")]
async fn analyze(req: Invocation<Value>) -> Result<Value, ToolError> {
    let topic = req.data["topic"].as_str().unwrap_or_default();
    let sources = req.data["items"].as_array().map_or(0, Vec::len);
    let confidence = if topic.contains('?') { 0.3 } else { 0.9 };
    Ok(json!({"summary": format!("{topic}: {sources} sources agree"), "confidence": confidence}))
}

/// Answers human-input requests (a person in a real system).
#[on_event("notification-events", "notification.human_input", agent = "reviewer")]
async fn review(question: Event<Value>) -> soorma::Result<String> {
    println!("  reviewer asked: {}", question.data["question"]);
    let response_event = question.data["response_event"].as_str().unwrap_or_default();
    question
        .bus()
        .publish(
            Topic::ActionResults,
            response_event,
            json!({"approved": true, "by": "reviewer"}),
        )
        .correlation_id(
            question
                .envelope()
                .correlation_id
                .clone()
                .unwrap_or_default(),
        )
        .await
}

/// The research plan.
fn research_plan() -> soorma::Result<Plan> {
    Plan::new(
        PlanDefinition::new("research", "search, analyze, report")
            .with_state(
                StateConfig::new("start", "search the topic")
                    .with_action(
                        StateAction::new("search.requested", "search.completed")
                            .with_data(json!({"q": "{{goal.topic}}"})),
                    )
                    .with_transition(
                        StateTransition::new("search.completed", "analyzing")
                            .with_condition("data.success && data.result.count > 0"),
                    )
                    .with_transition(
                        StateTransition::new("search.completed", "start")
                            .with_condition("!data.success && state.visits.start < 3"),
                    )
                    .with_transition(StateTransition::new("search.completed", "gave_up")),
            )
            .with_state(
                StateConfig::new("analyzing", "analyze the sources")
                    .with_action(
                        StateAction::new("analyze.requested", "analyze.completed").with_data(
                            json!({"items": "{{results.start.items}}", "topic": "{{goal.topic}}"}),
                        ),
                    )
                    .with_transition(
                        StateTransition::new("analyze.completed", "done")
                            .with_condition("data.result.confidence >= 0.5"),
                    )
                    .with_transition(StateTransition::new("analyze.completed", "asking")),
            )
            .with_state(
                StateConfig::new(
                    "asking",
                    "ask a person to confirm a low-confidence analysis",
                )
                .with_transition(
                    StateTransition::new("review.answered", "done")
                        .with_condition("data.approved == true"),
                )
                .with_transition(StateTransition::new("review.answered", "gave_up")),
            )
            .with_state(
                StateConfig::new("done", "report")
                    .terminal()
                    .with_result(json!({
                        "summary": "{{results.analyzing.summary}}",
                        "searches": "{{state.visits.start}}",
                        "reviewed": "{{state.visits.asking | default: 0}}"
                    })),
            )
            .with_state(
                StateConfig::new("gave_up", "no usable result")
                    .failed()
                    .with_result(json!("could not research {{goal.topic}}")),
            ),
    )
}

/// Starts the research plan for a goal.
#[on_goal("research.goal", agent = "research-planner")]
async fn research(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
    goal.start(&plan).await
}

/// Advances the plan; in `asking`, asks a person.
#[on_transition(agent = "research-planner")]
async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await?;
    if plan.current_state() == "asking" && plan.status() == PlanStatus::Running {
        plan.request_human_input(
            "The analysis is unsure. Publish it anyway?",
            "review.answered",
        )
        .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let platform = Platform::from_env().await?;
    let mut running = Vec::new();
    for agent in [
        Tool::new("web-search"),
        Tool::new("analyst"),
        Agent::new("reviewer"),
    ] {
        running.push(agent.start(&platform).await?);
    }
    running.push(
        Planner::new("research-planner")
            .with_state(Arc::new(research_plan()?))
            .start(&platform)
            .await?,
    );
    let client = platform.client("planner-example");
    for topic in ["event sourcing", "is rust fast?"] {
        let report: Value = client
            .invoke("research.goal", json!({"topic": topic}), "research.done")
            .await?;
        println!("{topic:<16} -> {report}");
    }
    for agent in running {
        agent.shutdown().await?;
    }
    Ok(())
}
