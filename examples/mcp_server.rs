//! Agents served to MCP clients: a calculator tool and a worker that evaluates a batch of
//! expressions by fanning out to the calculator, reporting progress (both in `calculator.rs`,
//! shared with the `a2a_gateway` example).
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
use soorma::mcp::McpServer;
use soorma::prelude::*;
use soorma_examples::calculator::{batch_calculator, calculator};

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
    let calculator = calculator().start(&platform).await?;
    let worker = batch_calculator().start(&platform).await?;

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
