//! `{{name}}`: a soorma planner that runs a small state machine for each goal.
//!
//! A goal asks for a text to be checked. The planner `{{name}}` starts a plan: it asks the tool
//! `{{name}}-words` (in this crate too, so everything runs end to end) to count the words, then
//! follows a transition on the reply — to `short` or `long` by a condition, or to `failed` when
//! the tool fails — and replies to the goal with a result built from a template.
//!
//! `cargo run` starts both agents on the embedded (in-process) platform, sends two goals and
//! prints the results. With `SOORMA_NATS_URL` set (see `soorma dev`) they serve goals from other
//! processes until Ctrl-C, and plans survive restarts. `cargo test` checks the round trip.
//! `RUST_LOG=info cargo run` shows what the SDK does (dead letters and rejected payloads are
//! logged as warnings).

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
use soorma::prelude::*;

/// The planner's name in the registry.
const PLANNER: &str = "{{name}}";
/// The tool's name in the registry.
const TOOL: &str = "{{name}}-words";
/// The goal event (the planner's capability).
const GOAL_EVENT: &str = "{{name}}.goal";
/// The event this crate's own goals ask the result on (every caller picks its own).
const DONE_EVENT: &str = "{{name}}.done";

/// A text to check.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Check {
    /// The text.
    text: String,
}

/// The plan's result.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Verdict {
    /// How many words the text has.
    words: usize,
    /// `short` (at most 5 words) or `long`.
    verdict: String,
}

/// Counts the words of a text.
#[on_invoke("{{name}}.count.requested", agent = "{{name}}-words")]
async fn count_words(req: Invocation<Check>) -> Result<usize, ToolError> {
    match req.data.text.split_whitespace().count() {
        0 => Err(ToolError::new("the text has no words")),
        n => Ok(n),
    }
}

/// The plan: count → short | long | failed.
fn plan() -> soorma::Result<Plan> {
    let verdict = |v: &str| json!({"words": "{{results.counting}}", "verdict": v});
    Plan::new(
        PlanDefinition::new("{{name}}.check", "count the words, then judge the length")
            .with_initial_state("counting")
            .with_state(
                StateConfig::new("counting", "ask the tool to count the words")
                    .with_action(
                        StateAction::new("{{name}}.count.requested", "{{name}}.count.completed")
                            .with_data(json!({"text": "{{goal.text}}"})),
                    )
                    .with_transition(
                        StateTransition::new("{{name}}.count.completed", "short")
                            .with_condition("data.success && data.result <= 5"),
                    )
                    .with_transition(
                        StateTransition::new("{{name}}.count.completed", "long")
                            .with_condition("data.success"),
                    )
                    .with_transition(StateTransition::new("{{name}}.count.completed", "failed")),
            )
            .with_state(
                StateConfig::new("short", "")
                    .terminal()
                    .with_result(verdict("short")),
            )
            .with_state(
                StateConfig::new("long", "")
                    .terminal()
                    .with_result(verdict("long")),
            )
            .with_state(
                StateConfig::new("failed", "")
                    .failed()
                    .with_result(json!("cannot check the text: {{results.counting.error}}")),
            ),
    )
}

/// Starts a plan for each goal; the planner follows the plan's transitions by itself.
#[on_goal("{{name}}.goal", agent = "{{name}}")]
async fn check(goal: GoalContext<Check>, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

/// The planner, with its plan.
fn planner() -> soorma::Result<AgentBuilder> {
    Ok(Planner::new(PLANNER)
        .version(env!("CARGO_PKG_VERSION"))
        .description("Checks texts.")
        .with_state(Arc::new(plan()?)))
}

/// The tool the plan calls.
fn tool() -> AgentBuilder {
    Tool::new(TOOL)
        .version(env!("CARGO_PKG_VERSION"))
        .description("Counts words.")
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    init_tracing();
    let platform = Platform::from_env().await?;
    let tool = tool().start(&platform).await?;
    let planner = planner()?.start(&platform).await?;
    if platform.kind() != "embedded" {
        println!(
            "`{PLANNER}` serves `{GOAL_EVENT}` on the {} platform; Ctrl-C to stop",
            platform.kind()
        );
        planner.shutdown_on_signal().await?;
        return tool.shutdown().await;
    }
    // Nothing outside this process can reach the embedded platform: show two goals.
    let client = platform.client("{{name}}-demo");
    for text in [
        "plans are state machines",
        "a planner follows transitions on the events that answer its actions",
    ] {
        let verdict: Verdict = client
            .invoke(GOAL_EVENT, Check { text: text.into() }, DONE_EVENT)
            .await?;
        println!("{PLANNER}: {text:?} -> {verdict:?}");
    }
    println!("set SOORMA_NATS_URL (see `soorma dev`) to serve other processes");
    planner.shutdown().await?;
    tool.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_plan_round_trip() -> soorma::Result<()> {
        let platform = Platform::embedded();
        let tool = tool().start(&platform).await?;
        let planner = planner()?.start(&platform).await?;
        let client = platform.client("test");

        let short: Verdict = client
            .invoke(
                GOAL_EVENT,
                Check {
                    text: "two words".into(),
                },
                DONE_EVENT,
            )
            .await?;
        assert_eq!(
            short,
            Verdict {
                words: 2,
                verdict: "short".into()
            }
        );
        let long: Verdict = client
            .invoke(
                GOAL_EVENT,
                Check {
                    text: "one two three four five six".into(),
                },
                DONE_EVENT,
            )
            .await?;
        assert_eq!(long.verdict, "long");

        // The tool's error sends the plan to its failed state; the caller gets the reason.
        let error = client
            .invoke::<Verdict>(
                GOAL_EVENT,
                Check {
                    text: String::new(),
                },
                DONE_EVENT,
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("the text has no words"), "{error}");

        planner.shutdown().await?;
        tool.shutdown().await
    }
}
