//! Agents behind an A2A gateway: a calculator tool (the default agent) and a worker that
//! evaluates a batch of expressions by fanning out to the calculator, reporting progress.
//!
//! ```text
//! cargo run -p soorma-examples --example a2a_gateway            # on 127.0.0.1:${PORT:-8080}
//! curl -s localhost:8080/.well-known/agent-card.json
//! curl -s localhost:8080/agents/calculator -H 'content-type: application/json' -d '{
//!   "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
//!   "params": {"message": {"messageId": "m-1", "role": "ROLE_USER",
//!                          "parts": [{"data": {"expression": "6 * 7"}}]}}}'
//! ```
//!
//! Runs on the embedded platform, or on NATS when `SOORMA_NATS_URL` is set. Set
//! `SOORMA_GATEWAY_API_KEY` to require an `X-API-Key` header on JSON-RPC calls.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::gateway::{Gateway, GatewayAuth};
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

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
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

    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .map_err(|e| Error::Config(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
    let mut gateway = Gateway::new(&platform)
        .agent("calculator")
        .agent("batch-calculator")
        .provider("soorma examples", "https://github.com/soorma-ai/soorma-rs");
    if let Ok(key) = std::env::var("SOORMA_GATEWAY_API_KEY") {
        gateway = gateway.auth(GatewayAuth::api_key("X-API-Key", key));
    }
    let url = format!(
        "http://{}",
        listener
            .local_addr()
            .map_err(|e| Error::Config(e.to_string()))?
    );
    println!(
        "A2A gateway on {url} ({} platform)\n  default card: {url}/.well-known/agent-card.json\n  calculator:   {url}/agents/calculator\n  batch:        {url}/agents/batch-calculator\nCtrl-C to stop",
        platform.kind()
    );
    gateway.serve(listener).await?; // until Ctrl-C / SIGTERM
    worker.shutdown().await?;
    calculator.shutdown().await
}
