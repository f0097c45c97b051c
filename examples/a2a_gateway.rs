//! Agents behind an A2A gateway: a calculator tool (the default agent) and a worker that
//! evaluates a batch of expressions by fanning out to the calculator, reporting progress (both
//! in `calculator.rs`, shared with the `mcp_server` example).
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
//! `SOORMA_GATEWAY_API_KEY` to require an `X-API-Key` header on JSON-RPC calls (its holder acts
//! for the tenant `SOORMA_GATEWAY_TENANT`, when set; see `docs/security.md`).
use soorma::gateway::{Caller, Gateway, GatewayAuth};
use soorma::prelude::*;
use soorma_examples::calculator::{batch_calculator, calculator};

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let platform = Platform::from_env().await?;
    let calculator = calculator().start(&platform).await?;
    let worker = batch_calculator().start(&platform).await?;

    let port = std::env::var("PORT").unwrap_or_else(|_| "8080".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .map_err(|e| Error::Config(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
    let mut gateway = Gateway::new(&platform)
        .agent("calculator")
        .agent("batch-calculator")
        .provider("soorma examples", "https://github.com/soorma-ai/soorma-rs");
    if let Ok(key) = std::env::var("SOORMA_GATEWAY_API_KEY") {
        let mut caller = Caller::new("api-key");
        if let Ok(tenant) = std::env::var("SOORMA_GATEWAY_TENANT") {
            caller = caller.tenant(tenant);
        }
        gateway = gateway.auth(GatewayAuth::api_keys("X-API-Key", [(key, caller)]));
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
