//! MCP both ways (feature `mcp`): call the tools of MCP servers from agents, and serve the
//! platform's tools and workers to MCP clients.

/// The `rmcp` crate soorma's MCP support is built on, for its model types.
pub use rmcp;

pub mod server;

pub use server::{McpServer, McpServerHandle};
