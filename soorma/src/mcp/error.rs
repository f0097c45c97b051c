//! What can go wrong talking to MCP servers.

use std::time::Duration;

use crate::error::SchemaViolation;

use super::ConfigError;
use super::content::McpToolOutput;

/// Why an MCP operation failed.
///
/// ```
/// use std::time::Duration;
/// use soorma::mcp::McpError;
///
/// let e = McpError::CircuitOpen { tool: "web:fetch".into(), retry_in: Duration::from_secs(3) };
/// assert_eq!(e.to_string(), "the circuit of `web:fetch` is open after repeated failures; retry in 3s");
/// assert!(!e.reached_server());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No server has this id.
    #[error("no MCP server `{server}` is configured (servers: {known})")]
    UnknownServer {
        /// The id asked for.
        server: String,
        /// The configured ids, comma separated.
        known: String,
    },
    /// No server has a tool of this name.
    #[error("no MCP tool `{tool}`")]
    UnknownTool {
        /// The name asked for.
        tool: String,
    },
    /// An unqualified name that more than one server has; qualify it as `server:tool`.
    #[error("the MCP tool name `{tool}` is ambiguous: qualify it as one of {}", candidates.join(", "))]
    AmbiguousTool {
        /// The name asked for.
        tool: String,
        /// The qualified names that match.
        candidates: Vec<String>,
    },
    /// The arguments do not match the tool's input schema; nothing was sent.
    #[error("invalid arguments for `{tool}`: {}", join(violations))]
    InvalidArguments {
        /// The qualified tool name.
        tool: String,
        /// Every violation.
        violations: Vec<SchemaViolation>,
    },
    /// The server could not be started or reached, or the MCP handshake failed.
    #[error("cannot connect to MCP server `{server}`: {message}")]
    Connect {
        /// The server id.
        server: String,
        /// What happened.
        message: String,
    },
    /// The connection to the server was lost (the process exited, the HTTP session ended);
    /// the next call reconnects.
    #[error("MCP server `{server}` went away: {message}")]
    Disconnected {
        /// The server id.
        server: String,
        /// What happened.
        message: String,
    },
    /// The call did not finish in time; the server was sent `notifications/cancelled`.
    #[error("MCP tool `{tool}` did not answer within {after:?}; the call was cancelled")]
    Timeout {
        /// The qualified tool name.
        tool: String,
        /// The timeout.
        after: Duration,
    },
    /// The tool failed too often recently; calls fail fast until the cool-down ends.
    #[error("the circuit of `{tool}` is open after repeated failures; retry in {}s", retry_in.as_secs_f64().ceil())]
    CircuitOpen {
        /// The qualified tool name.
        tool: String,
        /// When the next probe call is let through.
        retry_in: Duration,
    },
    /// The tool ran and reported an error (`isError: true`).
    #[error("MCP tool `{tool}` failed: {}", failure_text(output))]
    ToolFailed {
        /// The qualified tool name.
        tool: String,
        /// What the tool returned.
        output: Box<McpToolOutput>,
    },
    /// The server answered with a JSON-RPC error (unknown tool, bad params, internal error).
    #[error("MCP server `{server}` rejected the request: {message}")]
    Protocol {
        /// The server id.
        server: String,
        /// The server's error message and code.
        message: String,
    },
    /// The coordinator was shut down.
    #[error("the MCP coordinator is shut down")]
    Shutdown,
}

impl McpError {
    /// Whether the call may have reached the server, so the tool may have run: retrying it may
    /// repeat its effects. `false` for errors raised before anything was sent (names,
    /// arguments, configuration, an open circuit, no connection).
    ///
    /// ```
    /// use soorma::mcp::McpError;
    ///
    /// assert!(McpError::Disconnected { server: "a".into(), message: "exited".into() }.reached_server());
    /// assert!(!McpError::UnknownTool { tool: "x".into() }.reached_server());
    /// ```
    pub fn reached_server(&self) -> bool {
        matches!(
            self,
            McpError::Disconnected { .. }
                | McpError::Timeout { .. }
                | McpError::ToolFailed { .. }
                | McpError::Protocol { .. }
        )
    }

    /// Whether the same call may succeed later: the server could not be reached or went away,
    /// the call timed out, or its circuit is open. (A timed-out call may have run: see
    /// [`reached_server`](Self::reached_server).)
    ///
    /// ```
    /// use soorma::mcp::McpError;
    ///
    /// assert!(McpError::Connect { server: "a".into(), message: "refused".into() }.is_retryable());
    /// assert!(!McpError::UnknownTool { tool: "x".into() }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            McpError::Connect { .. }
                | McpError::Disconnected { .. }
                | McpError::Timeout { .. }
                | McpError::CircuitOpen { .. }
        )
    }
}

impl From<McpError> for crate::error::Error {
    /// Boxed in [`Error::Other`](crate::Error::Other), as retryable as
    /// [`McpError::is_retryable`] says, so `?` works in a `soorma::Result` fn.
    ///
    /// ```
    /// use soorma::mcp::McpError;
    /// let err = soorma::Error::from(McpError::Shutdown);
    /// assert!(matches!(err.downcast_ref::<McpError>(), Some(McpError::Shutdown)));
    /// assert!(!err.is_retryable());
    /// ```
    fn from(error: McpError) -> Self {
        let retryable = error.is_retryable();
        crate::error::Error::other_with_retry(error, retryable)
    }
}

fn join(violations: &[SchemaViolation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn failure_text(output: &McpToolOutput) -> String {
    if output.text.is_empty() {
        "(no message)".to_owned()
    } else {
        output.text.clone()
    }
}
