//! Agents served to MCP clients: a calculator tool and a worker that evaluates a batch of
//! expressions by fanning out to the calculator, reporting progress.
//!
//! ```text
//! cargo run -p soorma-examples --example mcp_server              # MCP over stdin/stdout
//! cargo run -p soorma-examples --example mcp_server -- --http    # streamable HTTP on 127.0.0.1:${PORT:-8000}/mcp
//! cargo run -p soorma-examples --example mcp_server -- --http 9000
//! ```
//!
//! Over stdio the MCP client starts this binary and talks on its stdin/stdout, so logs go to
//! stderr only (`RUST_LOG=info` for more). The tools are `calculate.requested`
//! (`{"expression": "6 * 7"}`) and `batch.requested` (`{"expressions": ["1 + 1", "2 * 3"]}`).
//! Runs on the embedded platform, or on NATS when `SOORMA_NATS_URL` is set.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::mcp::McpServer;
use soorma::prelude::*;
use soorma_examples::calc;

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculate {
    /// An arithmetic expression: numbers, `+ - * /`, parentheses.
    expression: String,
}

/// A calculation result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Calculated {
    expression: String,
    result: f64,
}

/// Evaluates an arithmetic expression.
#[on_invoke("calculate.requested", agent = "calculator")]
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    let result = calc::eval(&req.data.expression).map_err(|e| ToolError::new(e.to_string()))?;
    Ok(Calculated {
        expression: req.data.expression,
        result,
    })
}

/// A batch of expressions.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Batch {
    /// The expressions to evaluate.
    expressions: Vec<String>,
}

/// Evaluates a batch of expressions in parallel with the calculator.
#[on_task("batch.requested", agent = "batch-calculator")]
async fn batch(mut task: TaskContext<Batch>) -> soorma::Result<()> {
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
    task.progress(0.1, "fanned out to the calculator").await
}

/// Collects the calculator's results; completes with all of them.
#[on_result("batch.part.done", agent = "batch-calculator")]
async fn batch_part(result: ResultContext<Calculated>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    match task.group_results(result.group_id()).await? {
        Some(all) => {
            let results: Vec<serde_json::Value> = all
                .into_iter()
                .map(|r| r.result.unwrap_or_default())
                .collect();
            task.complete(results).await?;
            Ok(())
        }
        None => task.progress(0.5, "results arriving").await,
    }
}

/// `--http [port]`: the port to serve streamable HTTP on; `None` for stdio.
fn http_port() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--http" {
            let port = args
                .next()
                .or_else(|| std::env::var("PORT").ok())
                .unwrap_or_else(|| "8000".into());
            return Some(port);
        }
    }
    None
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing(); // stderr: stdout may be the MCP channel
    let platform = Platform::from_env().await?;
    let calculator = Tool::new("calculator")
        .version("1.0.0")
        .description("A calculator for arithmetic expressions.")
        .start(&platform)
        .await?;
    let worker = Worker::new("batch-calculator")
        .version("1.0.0")
        .description("Evaluates many expressions at once.")
        .start(&platform)
        .await?;

    let server = McpServer::new(&platform)
        .name("soorma-calculator")
        .version("1.0.0")
        .agent("calculator")
        .agent("batch-calculator");
    match http_port() {
        Some(port) => {
            let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
                .await
                .map_err(|e| Error::Config(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
            let addr = listener
                .local_addr()
                .map_err(|e| Error::Config(e.to_string()))?;
            println!(
                "MCP server on http://{addr}/mcp ({} platform); Ctrl-C to stop",
                platform.kind()
            );
            server.serve(listener).await?; // until Ctrl-C / SIGTERM
        }
        None => server.serve_stdio().await?, // until the client closes stdin
    }
    worker.shutdown().await?;
    calculator.shutdown().await
}
