//! LLM planning: a model writes the plan for a goal (run as a state machine), and a model
//! chooses each next action of another goal, with a calculator and a text analyst as tools.
//!
//! By default the model is scripted (canned replies, no network), so the example runs
//! anywhere. With `SOORMA_LLM_MODEL` set (and `SOORMA_LLM_BASE_URL`, `SOORMA_LLM_API_KEY` as
//! needed) it asks that OpenAI-compatible endpoint instead.
//!
//! ```text
//! cargo run -p soorma-examples --example llm_planner
//! SOORMA_LLM_MODEL=llama3.1 SOORMA_LLM_BASE_URL=http://localhost:11434/v1 \
//!     cargo run -p soorma-examples --example llm_planner
//! ```
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::llm::{ChatModel, LlmClient, MODEL_ENV, ScriptedLlm};
use soorma::planner::llm::{LlmPlanner, NextAction, PlanningOptions, reasoning_plan};
use soorma::prelude::*;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Calculate {
    /// An arithmetic expression: numbers, + - * /, parentheses.
    expression: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Calculated {
    result: f64,
}

/// Evaluates an arithmetic expression.
#[on_invoke("calculate.requested", agent = "calculator")]
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    soorma_examples::calc::eval(&req.data.expression)
        .map(|result| Calculated { result })
        .map_err(|e| ToolError::new(e.to_string()))
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Analyze {
    /// The text to analyze.
    text: String,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Analysis {
    /// From -1 (negative) to 1 (positive).
    sentiment: f64,
    /// Names mentioned in the text.
    entities: Vec<String>,
    /// The first sentence, shortened.
    summary: String,
}

/// Analyzes a text: its sentiment, the names it mentions and a one-sentence summary.
#[on_invoke("analyze.requested", agent = "text-analyst")]
async fn analyze(req: Invocation<Analyze>) -> Result<Analysis, ToolError> {
    let text = &req.data.text;
    Ok(Analysis {
        sentiment: soorma_examples::text::sentiment(text),
        entities: soorma_examples::text::entities(text),
        summary: soorma_examples::text::summary(text, 12),
    })
}

/// Writes a report on a text: the model plans it up front, then the plan runs by itself.
#[on_goal("report.goal", agent = "report-planner")]
async fn report(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    let plan = llm.start_plan(&goal).await?;
    let definition = serde_json::to_string_pretty(plan.plan().definition())
        .map_err(|e| soorma::Error::Handler(e.to_string()))?;
    println!("the model's plan:\n{definition}");
    Ok(())
}

/// Answers a question: the model chooses each next action. (`llm.start_reasoning(&goal)` does
/// the same without printing the first action.)
#[on_goal("assist.goal", agent = "assistant")]
async fn assist(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    let mut plan = goal.start(&reasoning_plan("assist")).await?;
    show(llm.step(&mut plan).await?);
    Ok(())
}

/// Gives each reply to the model, which chooses the next action.
#[on_transition(agent = "assistant")]
async fn assist_next(mut plan: PlanContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    show(llm.step(&mut plan).await?);
    Ok(())
}

fn show(action: Option<NextAction>) {
    if let Some(action) = action {
        println!(
            "  assistant: {}",
            serde_json::to_string(&action).unwrap_or_default()
        );
    }
}

const REVIEW: &str =
    "The new release felt fast and reliable to Ferris. Yesterday Ada reported one bug.";

/// What the scripted model answers, in order: the report plan, then the assistant's actions.
fn scripted_replies() -> Vec<String> {
    let plan = json!({
        "plan_type": "report",
        "description": "analyze the text, then score its sentiment out of 100",
        "states": {
            "start": {
                "state_name": "start",
                "description": "analyze the text",
                "action": {"event_type": "analyze.requested", "response_event": "analyze.completed",
                           "data": {"text": "{{goal.text}}"}},
                "transitions": [{"on_event": "analyze.completed", "to_state": "scoring",
                                 "condition": "data.success"},
                                {"on_event": "analyze.completed", "to_state": "failed"}]
            },
            "scoring": {
                "state_name": "scoring",
                "description": "turn the sentiment into a score out of 100",
                "action": {"event_type": "calculate.requested", "response_event": "calculate.completed",
                           "data": {"expression": "({{results.start.sentiment}} + 1) * 50"}},
                "transitions": [{"on_event": "calculate.completed", "to_state": "done"}]
            },
            "done": {
                "state_name": "done", "is_terminal": true,
                "result": {"summary": "{{results.start.summary}}",
                           "people": "{{results.start.entities}}",
                           "score": "{{results.scoring.result}}"}
            },
            "failed": {"state_name": "failed", "is_terminal": true, "fails": true,
                       "result": "could not analyze the text"}
        }
    });
    vec![
        plan.to_string(),
        json!({"action": "publish", "event_type": "calculate.requested",
               "data": {"expression": "3 * 19.5 + 4"}, "response_event": "calculate.completed"})
        .to_string(),
        json!({"action": "complete", "result": {"total": 62.5, "currency": "EUR"}}).to_string(),
    ]
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let model: Arc<dyn ChatModel> = if std::env::var_os(MODEL_ENV).is_some() {
        println!(
            "model: {} (from the environment)",
            std::env::var(MODEL_ENV).unwrap_or_default()
        );
        Arc::new(LlmClient::from_env()?)
    } else {
        println!("model: scripted (set {MODEL_ENV} to use a real one)");
        Arc::new(ScriptedLlm::new(scripted_replies()))
    };
    let llm = LlmPlanner::new(model).with_options(PlanningOptions::new().with_max_actions(8));

    let platform = Platform::from_env().await?;
    let mut running = Vec::new();
    for agent in [Tool::new("calculator"), Tool::new("text-analyst")] {
        running.push(agent.start(&platform).await?);
    }
    for planner in [Planner::new("report-planner"), Planner::new("assistant")] {
        running.push(planner.with_state(llm.clone()).start(&platform).await?);
    }

    let client = platform.client("llm-planner-example");
    let report: Value = client
        .invoke("report.goal", json!({"text": REVIEW}), "report.done")
        .await?;
    println!("report -> {report}");

    let question = "Three tickets at 19.50 EUR plus a 4 EUR fee: what is the total?";
    println!("question: {question}");
    let answer: Value = client
        .invoke("assist.goal", json!({"question": question}), "assist.done")
        .await?;
    println!("answer -> {answer}");

    for agent in running {
        agent.shutdown().await?;
    }
    Ok(())
}
