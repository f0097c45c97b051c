//! `soorma mcp ...`: MCP servers' tools from the command line and on the shared platform, and
//! the shared platform's agents as an MCP server.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use soorma::mcp::{
    CallOptions, McpBridge, McpCoordinator, McpError, McpServer, McpToolOutput, ToolSummary,
};

use crate::CliError;
use crate::output::{errln, out, outln};
use crate::platform::connect;

/// `soorma mcp tools --config <mcp.json> [--json]`: the tools of every configured server.
pub async fn tools(config: &Path, json: bool) -> Result<(), CliError> {
    let mcp = McpCoordinator::from_file(config)?;
    let listed = mcp.list_tools().await;
    let result = match listed {
        Ok(tools) if json => {
            let mut all = Vec::new();
            for t in &tools {
                match mcp.tool(&t.qualified_name).await {
                    Ok(info) => all.push(serde_json::json!({
                        "name": t.qualified_name,
                        "description": t.description,
                        "input_schema": info.input_schema,
                        "output_schema": info.output_schema,
                        "event": McpBridge::event_name(&t.server, &t.name),
                    })),
                    Err(e) => {
                        mcp.shutdown().await;
                        return Err(e.into());
                    }
                }
            }
            serde_json::to_string_pretty(&all)
                .map_err(|source| CliError::Json {
                    what: "the tools",
                    source,
                })
                .and_then(|text| outln!("{text}"))
        }
        Ok(tools) => out!("{}", render_tools(&tools)),
        Err(e) => Err(e.into()),
    };
    mcp.shutdown().await;
    result
}

/// The listing `soorma mcp tools` prints: per tool its qualified name, the event it has on the
/// bus when bridged, and its description's first line.
///
/// ```
/// # use soorma::mcp::ToolSummary;
/// let text = soorma_cli::mcp::render_tools(&[]);
/// assert_eq!(text, "no tools\n");
/// ```
pub fn render_tools(tools: &[ToolSummary]) -> String {
    if tools.is_empty() {
        return "no tools\n".into();
    }
    let mut out = String::new();
    for t in tools {
        let _ = writeln!(
            out,
            "{}  (bridged as {})\n    {}",
            t.qualified_name,
            McpBridge::event_name(&t.server, &t.name),
            t.description.lines().next().unwrap_or_default()
        );
    }
    out
}

/// `soorma mcp call <tool> [--args JSON] --config <mcp.json>`: calls one tool and prints what
/// it returned as JSON; a failed call is an error (exit status 1).
pub async fn call(
    config: &Path,
    tool: &str,
    args: &str,
    timeout: Option<Duration>,
) -> Result<(), CliError> {
    let arguments: serde_json::Value = serde_json::from_str(args).map_err(|e| {
        CliError::Mcp(McpError::InvalidArguments {
            tool: tool.to_owned(),
            violations: vec![soorma::SchemaViolation::new(
                "",
                format!("--args is not JSON: {e}"),
            )],
        })
    })?;
    let mcp = McpCoordinator::from_file(config)?;
    let mut options = CallOptions::new();
    if let Some(t) = timeout {
        options = options.timeout(t);
    }
    let outcome = mcp.call_with(tool, arguments, options).await;
    mcp.shutdown().await;
    let output: McpToolOutput = outcome?;
    let text = serde_json::to_string_pretty(&output).map_err(|source| CliError::Json {
        what: "the tool's output",
        source,
    })?;
    outln!("{text}")
}

/// `soorma mcp bridge --config <mcp.json> [--name N]`: bridges the configured servers' tools
/// onto the shared platform until Ctrl-C / SIGTERM.
pub async fn bridge(config: &Path, name: Option<String>) -> Result<(), CliError> {
    let connected = connect("mcp bridge").await?;
    let mcp = McpCoordinator::from_file(config)?;
    let mut bridge = McpBridge::new(mcp.clone());
    if let Some(name) = name {
        bridge = bridge.name(name);
    }
    let handle = match bridge.start(&connected.platform).await {
        Ok(h) => h,
        Err(e) => {
            mcp.shutdown().await;
            return Err(e.into());
        }
    };
    let capabilities = &handle.definition().capabilities;
    let mut listing = format!(
        "bridged {} MCP tools onto {} as agent `{}`:\n",
        capabilities.len(),
        connected.url,
        handle.name()
    );
    for cap in capabilities {
        let _ = writeln!(listing, "  {}", cap.consumed_event.event_name);
    }
    listing.push_str("Ctrl-C to stop");
    // A closed stdout ends the bridge (after stopping it) like Ctrl-C does.
    let printed = outln!("{listing}");
    if printed.is_ok() {
        crate::shutdown_signal().await;
    }
    let stopped = handle.shutdown().await;
    mcp.shutdown().await;
    printed?;
    stopped.map_err(Into::into)
}

/// How `soorma mcp serve --http` serves.
#[derive(Debug)]
pub struct HttpServe {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// The bearer token clients must send (`--token`).
    pub token: Option<String>,
    /// The `Host`s accepted (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
}

/// `soorma mcp serve [--http ADDR [--token T] [--allowed-host H]...] [--agent NAME]...`: serves
/// the shared platform's tools and workers as an MCP server, over stdio (the default; stdout is
/// the protocol, messages go to stderr) or streamable HTTP at `http://ADDR/mcp`, until stdin
/// closes or Ctrl-C / SIGTERM.
pub async fn serve(http: Option<HttpServe>, agents: Vec<String>) -> Result<(), CliError> {
    let connected = connect("mcp serve").await?;
    let mut server = McpServer::new(&connected.platform).name("soorma");
    for agent in agents {
        server = server.agent(agent);
    }
    let http = match http {
        Some(http) => {
            if let Some(token) = http.token {
                server = server.bearer_token(token);
            } else if !http.addr.ip().is_loopback() {
                errln!(
                    "warning: serving MCP on {} without --token: anyone who can reach it can call every tool",
                    http.addr
                );
            }
            for host in http.allowed_hosts {
                server = server.allowed_host(host);
            }
            Some(http.addr)
        }
        None => None,
    };
    match http {
        None => {
            errln!(
                "serving the agents of {} over MCP on stdin/stdout",
                connected.url
            );
            server.serve_stdio().await.map_err(Into::into)
        }
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                CliError::Mcp(McpError::Connect {
                    server: "soorma mcp serve".into(),
                    message: format!("cannot listen on {addr}: {e}"),
                })
            })?;
            let handle = server.spawn(listener).await?;
            // A closed stdout stops serving like Ctrl-C does.
            let printed = outln!(
                "serving the agents of {} over MCP at {}\nCtrl-C to stop",
                connected.url,
                handle.url()
            );
            if printed.is_ok() {
                crate::shutdown_signal().await;
            }
            handle.shutdown().await;
            printed
        }
    }
}
