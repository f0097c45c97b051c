//! Human in the loop: a planner drafts a post, pauses to ask a person, and resumes with the
//! answer; a second post nobody answers in time expires.
//!
//! ```text
//! cargo run -p soorma-examples --example human_approval
//! ```
//!
//! The "person" is an agent listening for `notification.human_input` on `notification-events`
//! (a UI would): it approves every question except the one about the post on "late", which it
//! leaves unanswered.
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use soorma::common::{PlanDefinition, PlanStatus, StateAction, StateConfig, StateTransition};
use soorma::prelude::*;

/// Writes a draft.
#[on_invoke("draft.requested", agent = "writer")]
async fn draft(req: Invocation<Value>) -> Result<Value, ToolError> {
    let topic = req.data["topic"].as_str().unwrap_or_default();
    Ok(json!({"text": format!("Why {topic} matters, in 3 paragraphs.")}))
}

/// A person answering approval questions (here: an agent).
#[on_event("notification-events", "notification.human_input", agent = "editor")]
async fn editor(question: Event<Value>) -> soorma::Result<()> {
    let asked = question.data["question"].as_str().unwrap_or_default();
    println!("  editor was asked: {asked:?}");
    if asked.contains("about late") {
        println!("  editor is away; nobody answers");
        return Ok(());
    }
    let answer_event = question.data["response_event"].as_str().unwrap_or_default();
    question
        .bus()
        .publish(
            Topic::ActionResults,
            answer_event,
            json!({"approved": true, "by": "the editor"}),
        )
        .correlation_id(
            question
                .envelope()
                .correlation_id
                .clone()
                .unwrap_or_default(),
        )
        .await?;
    Ok(())
}

/// draft → approving → published | rejected | expired.
fn approval_plan() -> soorma::Result<Plan> {
    Plan::new(
        PlanDefinition::new("approval", "draft, ask, publish")
            .with_initial_state("drafting")
            .with_state(
                StateConfig::new("drafting", "write a draft")
                    .with_action(
                        StateAction::new("draft.requested", "draft.completed")
                            .with_data(json!({"topic": "{{goal.topic}}"})),
                    )
                    .with_transition(StateTransition::new("draft.completed", "approving")),
            )
            .with_state(
                StateConfig::new("approving", "an editor approves")
                    .with_transition(
                        StateTransition::new("approval.answered", "published")
                            .with_condition("data.approved == true"),
                    )
                    .with_transition(StateTransition::new("approval.answered", "rejected"))
                    .with_transition(StateTransition::new("plan.timeout", "expired")),
            )
            .with_state(
                StateConfig::new("published", "")
                    .terminal()
                    .with_result(json!({
                        "post": "{{results.drafting.text}}",
                        "approved_by": "{{results.approving.by}}"
                    })),
            )
            .with_state(
                StateConfig::new("rejected", "")
                    .failed()
                    .with_result(json!("rejected")),
            )
            .with_state(StateConfig::new("expired", "").failed().with_result(json!(
                "nobody approved the post about {{goal.topic}} in time"
            ))),
    )
}

/// Starts the approval plan.
#[on_goal("post.goal", agent = "publisher")]
async fn post(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<PlanContext> {
    goal.start(&plan).await
}

/// Advances the plan; entering `approving`, pauses it to ask the editor (1 s to answer).
#[on_transition(agent = "publisher")]
async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await?;
    if plan.current_state() == "approving" && plan.status() == PlanStatus::Running {
        let topic = plan.record().goal_data["topic"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        println!("  plan {} paused: asking the editor", plan.plan_id());
        plan.request_human_input_within(
            format!("Publish the post about {topic}?"),
            "approval.answered",
            Duration::from_secs(1),
        )
        .await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let platform = Platform::from_env().await?;
    let mut running = vec![
        Tool::new("writer").start(&platform).await?,
        Agent::new("editor").start(&platform).await?,
    ];
    running.push(
        Planner::new("publisher")
            .with_state(Arc::new(approval_plan()?))
            .start(&platform)
            .await?,
    );
    let client = platform.client("human-approval-example");
    for topic in ["event sourcing", "late"] {
        println!("goal: a post about {topic}");
        match client
            .invoke::<Value>("post.goal", json!({"topic": topic}), "post.done")
            .await
        {
            Ok(post) => println!("  published: {post}"),
            Err(e) => println!("  not published: {e}"),
        }
    }
    for agent in running {
        agent.shutdown().await?;
    }
    Ok(())
}
