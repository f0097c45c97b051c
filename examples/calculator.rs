//! The calculator agents the `a2a_gateway` and `mcp_server` examples serve (and the gateway and
//! MCP tests start): a `calculator` tool evaluating an arithmetic expression, and a
//! `batch-calculator` worker evaluating many at once by fanning out to it, reporting progress.
//!
//! Their handlers are plain async fns given to the builders (`Handler::on_invoke`, ...) rather
//! than attributed ones: a library's agents are started only by the programs that ask for them.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> soorma::Result<()> {
//! use soorma_examples::calculator::{self, Calculated};
//!
//! let platform = soorma::Platform::embedded();
//! let tool = calculator::calculator().start(&platform).await?;
//! let worker = calculator::batch_calculator().start(&platform).await?;
//! let all: Vec<Calculated> = platform
//!     .client("docs")
//!     .invoke("batch.requested", serde_json::json!({"expressions": ["1 + 1", "2 * 3"]}), "done")
//!     .await?;
//! assert_eq!(all[1].result, 6.0);
//! worker.shutdown().await?;
//! tool.shutdown().await
//! # }
//! ```
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use soorma::prelude::*;
use soorma::{AgentBuilder, Delegation};

use crate::calc;

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Calculate {
    /// An arithmetic expression: numbers, `+ - * /`, parentheses.
    pub expression: String,
}

/// A calculation result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Calculated {
    /// The expression.
    pub expression: String,
    /// Its value.
    pub result: f64,
}

/// A batch of expressions.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Batch {
    /// The expressions to evaluate.
    pub expressions: Vec<String>,
}

/// Evaluates an arithmetic expression.
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    let result = calc::eval(&req.data.expression).map_err(|e| ToolError::new(e.to_string()))?;
    Ok(Calculated {
        expression: req.data.expression,
        result,
    })
}

/// Evaluates a batch of expressions in parallel with the calculator.
async fn batch(mut task: TaskContext<Batch>) -> soorma::Result<()> {
    // Reported before the fan-out, so that it goes out before any result (and the reply).
    task.progress(0.1, "fanning out to the calculator").await?;
    let delegations: Vec<Delegation> = task
        .data
        .expressions
        .iter()
        .map(|e| {
            Delegation::new(
                "calculate.requested",
                &Calculate {
                    expression: e.clone(),
                },
                "batch.part.done",
            )
        })
        .collect();
    task.delegate_parallel(delegations).await?;
    Ok(())
}

/// Collects the calculator's results; completes with all of them, in order.
async fn batch_part(result: ResultContext<Calculated>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    match task.group_results(result.group_id()).await? {
        Some(all) => {
            let results: Vec<Value> = all
                .into_iter()
                .map(|r| r.result.unwrap_or_default())
                .collect();
            task.complete(results).await?;
            Ok(())
        }
        None => task.progress(0.5, "results arriving").await,
    }
}

/// The `calculator` tool: `calculate.requested` with a [`Calculate`], replies [`Calculated`]
/// (or an error: `division by zero`, `unexpected ...`).
pub fn calculator() -> AgentBuilder {
    Tool::new("calculator")
        .version("1.0.0")
        .description("A calculator for arithmetic expressions.")
        .handler(
            Handler::on_invoke("calculate.requested", calculate)
                .with_description("Evaluates an arithmetic expression."),
        )
}

/// The `batch-calculator` worker: `batch.requested` with a [`Batch`], completes with every
/// [`Calculated`] in order; reports progress 0.1 before fanning out and 0.5 while results
/// arrive.
pub fn batch_calculator() -> AgentBuilder {
    Worker::new("batch-calculator")
        .version("1.0.0")
        .description("Evaluates many expressions at once.")
        .handler(
            Handler::on_task("batch.requested", batch).with_description(
                "Evaluates a batch of expressions in parallel with the calculator.",
            ),
        )
        .handler(Handler::on_result("batch.part.done", batch_part))
}
