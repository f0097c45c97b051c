//! The calculator agents the gateway and MCP server tests put behind their servers: a tool
//! that evaluates an expression and a worker that evaluates a batch by fanning out to it,
//! reporting progress.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use soorma::prelude::*;
use soorma::{AgentBuilder, Delegation};

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Calculate {
    /// An arithmetic expression.
    pub expression: String,
}

/// A calculation result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Calculated {
    /// The value.
    pub result: f64,
}

/// A batch of expressions.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Batch {
    /// The expressions.
    pub expressions: Vec<String>,
}

async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    soorma_examples::calc::eval(&req.data.expression)
        .map(|result| Calculated { result })
        .map_err(|e| ToolError::new(e.to_string()))
}

async fn batch(mut task: TaskContext<Batch>) -> soorma::Result<()> {
    // Reported before the fan-out, so it is published before any result (and the reply).
    task.progress(0.25, "fanning out").await?;
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
    task.delegate_parallel(delegations).await.map(drop)
}

async fn batch_part(result: ResultContext<Calculated>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    match task.group_results(result.group_id()).await? {
        Some(all) => {
            let results: Vec<Value> = all
                .into_iter()
                .map(|r| r.result.unwrap_or_default())
                .collect();
            task.complete(results).await.map(drop)
        }
        None => task.progress(0.5, "one result in").await,
    }
}

/// The `calculator` tool: `calculate.requested` with a [`Calculate`], replies [`Calculated`].
pub fn calculator() -> AgentBuilder {
    Tool::new("calculator")
        .use_registered_handlers(false)
        .description("Arithmetic.")
        .handler(
            Handler::on_invoke("calculate.requested", calculate)
                .with_description("Evaluates an arithmetic expression."),
        )
}

/// The `batcher` worker: `batch.requested` with a [`Batch`], completes with every result;
/// reports progress 0.25 ("fanning out") and 0.5 per result but the last.
pub fn batcher() -> AgentBuilder {
    Worker::new("batcher")
        .use_registered_handlers(false)
        .handler(
            Handler::on_task("batch.requested", batch)
                .with_description("Evaluates many expressions."),
        )
        .handler(Handler::on_result("batch.part.done", batch_part))
}
