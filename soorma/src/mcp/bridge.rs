//! The bridge: every tool of the configured MCP servers as a soorma tool on the bus.

use serde_json::Value;

use super::{McpCoordinator, McpError, McpToolOutput};
use crate::runtime::handler::schema_of;
use crate::{
    AgentBuilder, AgentHandle, Error, Handler, Invocation, Platform, Result, Tool, ToolError,
};

/// The default agent name of a bridge.
pub const DEFAULT_BRIDGE_NAME: &str = "mcp-bridge";

/// An agent that exposes the tools of MCP servers on the bus.
///
/// Each tool `t` of server `s` becomes a capability consuming
/// [`McpBridge::event_name(s, t)`](Self::event_name) (`mcp.s.t`) on `action-requests`, whose
/// payload schema is the tool's MCP input schema (so requests and delegations are validated
/// against it) and whose reply is an [`McpToolOutput`]. MCP failures (a tool error result, a
/// JSON-RPC error, a timeout, an open circuit, a lost server) become error replies.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use soorma::prelude::*;
/// use soorma::mcp::{McpBridge, McpCoordinator, McpToolOutput};
///
/// let platform = Platform::embedded();
/// let mcp = McpCoordinator::from_file("mcp.json")?;
/// let bridge = McpBridge::new(mcp.clone()).start(&platform).await?;
///
/// // Any agent can now call `everything:echo` through the bus.
/// let echoed: McpToolOutput = platform.client("app")
///     .invoke(&McpBridge::event_name("everything", "echo"), serde_json::json!({"message": "hi"}), "echo.done")
///     .await?;
/// assert!(echoed.text.contains("hi"));
/// bridge.shutdown().await?;
/// mcp.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct McpBridge {
    coordinator: McpCoordinator,
    name: String,
    servers: Option<Vec<String>>,
}

impl McpBridge {
    /// A bridge for every server of the coordinator, named [`DEFAULT_BRIDGE_NAME`].
    ///
    /// ```
    /// use soorma::mcp::{McpBridge, McpConfig, McpCoordinator, ServerConfig};
    ///
    /// let mcp = McpCoordinator::new(McpConfig::new().server(ServerConfig::stdio("x", "mcp-x")))?;
    /// let bridge = McpBridge::new(mcp).name("tools");
    /// # let _ = bridge;
    /// # Ok::<(), soorma::mcp::McpError>(())
    /// ```
    pub fn new(coordinator: McpCoordinator) -> Self {
        Self {
            coordinator,
            name: DEFAULT_BRIDGE_NAME.to_owned(),
            servers: None,
        }
    }

    /// Sets the agent's name (default `mcp-bridge`).
    ///
    /// ```
    /// # use soorma::mcp::{McpBridge, McpConfig, McpCoordinator};
    /// # let mcp = McpCoordinator::new(McpConfig::new())?;
    /// let bridge = McpBridge::new(mcp).name("search-tools");
    /// # let _ = bridge; Ok::<(), soorma::mcp::McpError>(())
    /// ```
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Bridges only this server (call again for more; default: every server).
    ///
    /// ```
    /// # use soorma::mcp::{McpBridge, McpConfig, McpCoordinator};
    /// # let mcp = McpCoordinator::new(McpConfig::new())?;
    /// let bridge = McpBridge::new(mcp).server("everything");
    /// # let _ = bridge; Ok::<(), soorma::mcp::McpError>(())
    /// ```
    #[must_use]
    pub fn server(mut self, id: impl Into<String>) -> Self {
        self.servers.get_or_insert_with(Vec::new).push(id.into());
        self
    }

    /// The event a bridged tool consumes: `mcp.<server>.<tool>`, with characters other than
    /// letters, digits, `_` and `-` in the tool name replaced by `_`.
    ///
    /// ```
    /// use soorma::mcp::McpBridge;
    ///
    /// assert_eq!(McpBridge::event_name("everything", "get-sum"), "mcp.everything.get-sum");
    /// assert_eq!(McpBridge::event_name("fs", "read.file"), "mcp.fs.read_file");
    /// ```
    pub fn event_name(server: &str, tool: &str) -> String {
        let tool: String = tool
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("mcp.{server}.{tool}")
    }

    /// The bridge as an agent builder, one handler per tool, to adjust (concurrency, tenant,
    /// description) before starting it. Lists the servers' tools; a server that cannot be
    /// reached is skipped with a warning, and if none can be reached this fails.
    ///
    /// ```no_run
    /// # async fn demo(platform: soorma::Platform, mcp: soorma::mcp::McpCoordinator) -> soorma::Result<()> {
    /// let bridge = soorma::mcp::McpBridge::new(mcp).agent().await?.concurrency(16).start(&platform).await?;
    /// # bridge.shutdown().await }
    /// ```
    pub async fn agent(&self) -> Result<AgentBuilder> {
        let servers: Vec<String> = match &self.servers {
            Some(s) => s.clone(),
            None => self
                .coordinator
                .servers()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let mut agent = Tool::new(&self.name)
            .use_registered_handlers(false)
            .description(format!(
                "MCP tools of {} as soorma tools",
                servers
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        let mut events = std::collections::HashSet::new();
        let mut failures = Vec::new();
        for server in &servers {
            let tools = match self.coordinator.server_tools(server).await {
                Ok(tools) => tools,
                Err(e) => {
                    tracing::warn!(server = %server, error = %e, "MCP server not bridged");
                    failures.push(e.to_string());
                    continue;
                }
            };
            for summary in tools {
                let event = Self::event_name(server, &summary.name);
                if !events.insert(event.clone()) {
                    tracing::warn!(tool = %summary.qualified_name, event = %event, "MCP tool not bridged: another tool of the server maps to the same event");
                    continue;
                }
                let info = match self.coordinator.tool(&summary.qualified_name).await {
                    Ok(info) => info,
                    Err(e) => {
                        tracing::warn!(tool = %summary.qualified_name, error = %e, "MCP tool not bridged");
                        continue;
                    }
                };
                let mut description = summary.description.clone();
                if description.is_empty() {
                    description = format!("MCP tool `{}`", summary.qualified_name);
                }
                agent = agent.handler(
                    bridged_tool(self.coordinator.clone(), summary.qualified_name, &event)
                        .with_payload_schema(info.input_schema)
                        .with_response_schema(schema_of::<McpToolOutput>())
                        .with_description(description),
                );
                tracing::debug!(event = %event, "MCP tool bridged");
            }
        }
        if !servers.is_empty() && failures.len() == servers.len() {
            return Err(Error::Config(format!(
                "no MCP server could be bridged: {}",
                failures.join("; ")
            )));
        }
        Ok(agent)
    }

    /// Lists the tools and starts the bridge agent on the platform.
    ///
    /// ```no_run
    /// # async fn demo(platform: soorma::Platform, mcp: soorma::mcp::McpCoordinator) -> soorma::Result<()> {
    /// let bridge = soorma::mcp::McpBridge::new(mcp).start(&platform).await?;
    /// # bridge.shutdown().await }
    /// ```
    pub async fn start(self, platform: &Platform) -> Result<AgentHandle> {
        self.agent().await?.start(platform).await
    }
}

/// The handler of one bridged tool: calls it through the coordinator; failures are error
/// replies.
fn bridged_tool(coordinator: McpCoordinator, qualified: String, event: &str) -> Handler {
    let call = move |req: Invocation<Value>| {
        let coordinator = coordinator.clone();
        let qualified = qualified.clone();
        async move {
            coordinator
                .call(&qualified, req.data)
                .await
                .map_err(tool_error)
        }
    };
    Handler::on_invoke(event, call)
}

fn tool_error(e: McpError) -> ToolError {
    ToolError::new(e.to_string())
}
