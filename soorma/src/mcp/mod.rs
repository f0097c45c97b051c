//! MCP both ways (feature `mcp`): call the tools of MCP servers from agents, and serve the
//! platform's tools and workers to MCP clients.
//!
//! - [`McpCoordinator`] is the client side: it reads an `mcp.json` ([`McpConfig`]), starts
//!   stdio servers or reaches streamable-HTTP ones, lists and calls their tools (qualified
//!   as `server:tool`) with argument validation, timeouts, cancellation, a circuit breaker
//!   and statistics per tool.
//! - [`McpBridge`] puts every tool of those servers on the bus as a soorma tool, so agents
//!   invoke and workers delegate to MCP tools like to any agent.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use soorma::prelude::*;
//! use soorma::mcp::{McpBridge, McpCoordinator, McpToolOutput};
//!
//! let platform = Platform::embedded();
//! let mcp = McpCoordinator::from_file("mcp.json")?;
//! let bridge = McpBridge::new(mcp.clone()).start(&platform).await?;
//! let sum: McpToolOutput = platform
//!     .client("app")
//!     .invoke(&McpBridge::event_name("everything", "get-sum"), serde_json::json!({"a": 2, "b": 3}), "sum.done")
//!     .await?;
//! println!("{}", sum.text);
//! bridge.shutdown().await?;
//! mcp.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! See `docs/mcp.md`.

mod breaker;
mod bridge;
mod config;
mod connection;
mod content;
mod coordinator;
mod error;
mod stats;

pub use breaker::CircuitState;
pub use bridge::{DEFAULT_BRIDGE_NAME, McpBridge};
pub use config::{
    BreakerConfig, ConfigError, ConfigProblem, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_CONCURRENT_CALLS, McpConfig, ServerConfig, ServerTransport, Timeouts,
};
pub use content::{McpContent, McpToolOutput};
pub use coordinator::{
    CallOptions, McpCoordinator, TOOL_DESCRIPTIONS_PROMPT, ToolInfo, ToolSummary,
};
pub use error::McpError;
pub use stats::ToolStats;

/// The `rmcp` crate soorma's MCP support is built on, for its model types.
pub use rmcp;

pub mod server;

pub use server::{McpIdentity, McpServer, McpServerHandle, TokenVerifier};
