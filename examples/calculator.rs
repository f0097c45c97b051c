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
//! let all = platform
//!     .client("docs")
//!     .call(calculator::Batch { expressions: vec!["1 + 1".into(), "2 * 3".into(), "1 / 0".into()] })
//!     .await?;
//! assert_eq!(all[1].as_ref().map(|c| c.result), Some(6.0));
//! assert!(all[2].is_none()); // division by zero
//! worker.shutdown().await?;
//! tool.shutdown().await
//! # }
//! ```
use soorma::AgentBuilder;
use soorma::prelude::*;

use crate::calc;

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "calculate.requested", reply = Calculated)]
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

/// A batch of expressions; the reply has one entry per expression, in order: its result, or
/// `null` when it could not be evaluated.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "batch.requested", reply = Vec<Option<Calculated>>)]
pub struct Batch {
    /// The expressions to evaluate.
    pub expressions: Vec<String>,
}

/// Evaluates an arithmetic expression.
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    let result = calc::eval(&req.data.expression)?;
    Ok(Calculated {
        expression: req.data.expression,
        result,
    })
}

/// The most expressions one batch may hold: each is a sub-task with its own stored record and
/// request, so an unbounded batch is unbounded work and memory for one request.
pub const MAX_BATCH: usize = 1_000;

/// Evaluates a batch of expressions in parallel with the calculator.
async fn batch(mut task: TaskContext<Batch>) -> soorma::Result<Delegated> {
    let n = task.data.expressions.len();
    if n > MAX_BATCH {
        return Err(soorma::Error::InvalidArgument(format!(
            "a batch of {n} expressions; at most {MAX_BATCH} are taken: split it"
        )));
    }
    // Reported before the fan-out, so that it goes out before any result (and the reply).
    task.progress(0.1, "fanning out to the calculator").await?;
    let requests: Vec<Calculate> = task
        .data
        .expressions
        .iter()
        .map(|e| Calculate {
            expression: e.clone(),
        })
        .collect();
    task.fan_out(requests).await
}

/// Completes the batch with every result, in order (`None` where the calculator failed).
async fn batch_done(
    _task: TaskContext<Batch>,
    replies: Vec<Result<Calculated, SubTaskFailed>>,
) -> soorma::Result<Vec<Option<Calculated>>> {
    Ok(replies.into_iter().map(Result::ok).collect())
}

/// The `calculator` tool: `calculate.requested` with a [`Calculate`], replies [`Calculated`]
/// (or an error: `division by zero`, `unexpected ...`).
pub fn calculator() -> AgentBuilder {
    Tool::new("calculator")
        .version("1.0.0")
        .description("A calculator for arithmetic expressions.")
        .handler(Handler::invoke(calculate).with_description("Evaluates an arithmetic expression."))
}

/// The `batch-calculator` worker: `batch.requested` with a [`Batch`], completes with every
/// [`Calculated`] in order (`null` for an expression that failed); reports progress 0.1
/// before fanning out. A batch of more than [`MAX_BATCH`] expressions fails at once.
pub fn batch_calculator() -> AgentBuilder {
    Worker::new("batch-calculator")
        .version("1.0.0")
        .description("Evaluates many expressions at once.")
        .handler(
            Handler::task(batch).with_description(
                "Evaluates a batch of expressions in parallel with the calculator.",
            ),
        )
        .handler(Handler::fan_in::<Vec<Calculate>>().handle(batch_done))
}
