//! MCP servers' tools on the bus: bridges the servers of an `mcp.json` onto the embedded
//! platform and calls one tool through a worker that delegates to it.
//!
//! ```text
//! npm install --prefix target/mcp-peers @modelcontextprotocol/server-everything@2026.8.31
//! cargo run -p soorma-examples --example mcp_bridge -- --config examples/mcp.json
//! cargo run -p soorma-examples --example mcp_bridge -- --config examples/mcp.json \
//!     --tool everything:echo --args '{"message": "hello"}'
//! ```
//!
//! Without `--tool` it calls `everything:get-sum` with `{"a": 2, "b": 3}`.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::mcp::{McpBridge, McpCoordinator, McpToolOutput};
use soorma::prelude::*;

/// Which MCP tool to call, with what.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct McpCall {
    /// The server id.
    server: String,
    /// The tool's name on that server.
    tool: String,
    /// The tool's arguments.
    arguments: Value,
}

/// Delegates the call to the bridged MCP tool (`mcp.<server>.<tool>`), as it would to any
/// other agent; its arguments are checked against the tool's input schema on the way.
#[on_task("mcp.call.requested", agent = "mcp-caller")]
async fn call_tool(mut task: TaskContext<McpCall>) -> soorma::Result<()> {
    let event = McpBridge::event_name(&task.data.server, &task.data.tool);
    let arguments = task.data.arguments.clone();
    task.delegate_with(Delegation::new(&event, &arguments, "mcp.call.answered"))
        .await?;
    Ok(())
}

/// Completes the task with what the tool returned, or fails it with the tool's error.
#[on_result("mcp.call.answered", agent = "mcp-caller")]
async fn tool_answered(result: ResultContext<McpToolOutput>) -> soorma::Result<bool> {
    let mut task = result.record_in_parent().await?;
    match &result.data {
        Some(output) => task.complete(output).await,
        None => {
            task.fail(result.error.as_deref().unwrap_or("the MCP tool failed"))
                .await
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: mcp_bridge --config <mcp.json> [--tool <server:tool>] [--args <json>]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    soorma_examples::init_tracing();
    let mut config = None;
    let mut tool = "everything:get-sum".to_owned();
    let mut args = json!({"a": 2, "b": 3});
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        match (flag.as_str(), argv.next()) {
            ("--config", Some(v)) => config = Some(v),
            ("--tool", Some(v)) => tool = v,
            ("--args", Some(v)) => args = serde_json::from_str(&v)?,
            _ => usage(),
        }
    }
    let Some(config) = config else { usage() };
    let Some((server, tool_name)) = tool.split_once(':') else {
        eprintln!("--tool must be `server:tool`; found `{tool}`");
        std::process::exit(2)
    };

    let platform = Platform::embedded();
    let mcp = McpCoordinator::from_file(&config)?;
    let bridge = McpBridge::new(mcp.clone()).start(&platform).await?;
    let worker = Worker::new("mcp-caller").start(&platform).await?;

    let bridged = &bridge.definition().capabilities;
    println!("bridged {} MCP tools from {config}:", bridged.len());
    for cap in bridged {
        println!(
            "  {:<45} {}",
            cap.task_name,
            cap.description.lines().next().unwrap_or("")
        );
    }

    println!("\ncalling {tool} {args} through the `mcp-caller` worker");
    let call = McpCall {
        server: server.to_owned(),
        tool: tool_name.to_owned(),
        arguments: args,
    };
    let reply = platform
        .client("mcp-bridge-example")
        .request("mcp.call.requested", &call, "mcp.call.done")
        .timeout(std::time::Duration::from_secs(30))
        .await?;
    let outcome = reply.into_result::<McpToolOutput>();

    let stats = mcp.stats(&tool).unwrap_or_default();
    worker.shutdown().await?;
    bridge.shutdown().await?;
    mcp.shutdown().await;

    let output = outcome?;
    println!("text: {}", output.text);
    if let Some(structured) = &output.structured {
        println!("structured: {structured}");
    }
    println!(
        "{tool}: {} call(s), {} failed, mean latency {:?}",
        stats.calls(),
        stats.failures,
        stats.mean_latency()
    );
    Ok(())
}
