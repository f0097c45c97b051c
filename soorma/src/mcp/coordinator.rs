//! The MCP coordinator: one client for every configured server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, PaginatedRequestParams};
use serde_json::Value;
use tracing::Instrument;

use super::breaker::{Admitted, CircuitBreaker};
use super::connection::{Connection, plain};
use super::stats::StatsCell;
use super::{BreakerConfig, McpConfig, McpError, McpToolOutput, ServerConfig, ToolStats};
use crate::error::SchemaViolation;

/// The name of the prompt a server may offer to describe its tools to a model.
pub const TOOL_DESCRIPTIONS_PROMPT: &str = "tool-descriptions";

/// The most tools whose circuit and statistics a coordinator keeps.
const MAX_TOOL_STATES: usize = 4096;

/// The most pages, items and bytes (as JSON) one listing of a server's tools or prompts takes:
/// a server paging for ever, or with huge pages, is a protocol error, not memory used up.
const MAX_LIST_PAGES: usize = 100;
const MAX_LISTED: usize = 10_000;
const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// Every item of a paged listing of `what`, page by page (`page(cursor)`: the items and the
/// next cursor); `Ok(Err(_))` says which bound a server went past, or that it sent a cursor
/// again.
async fn list_bounded<T, F, Fut>(
    what: &str,
    mut page: F,
) -> Result<Result<Vec<T>, String>, ServiceError>
where
    T: serde::Serialize,
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let (mut bytes, mut seen) = (0usize, std::collections::HashSet::new());
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let (found, next) = page(cursor).await?;
        for item in found {
            bytes += serde_json::to_vec(&item).map_or(0, |json| json.len());
            items.push(item);
            if items.len() > MAX_LISTED || bytes > MAX_LISTED_BYTES {
                return Ok(Err(format!(
                    "its {what} list is larger than {MAX_LISTED} items or {MAX_LISTED_BYTES} bytes"
                )));
            }
        }
        match next {
            None => return Ok(Ok(items)),
            Some(next) if !seen.insert(next.clone()) => {
                return Ok(Err(format!(
                    "its {what} list repeats the cursor {:?}",
                    crate::util::bounded(&next, 64)
                )));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Ok(Err(format!(
        "its {what} list has more than {MAX_LIST_PAGES} pages"
    )))
}

/// Calls the tools of the configured MCP servers.
///
/// Servers are connected lazily (on the first listing or call) and reconnected after they go
/// away. Tool names are `server:tool`; an unqualified name works when exactly one server has
/// the tool. Arguments are checked against the tool's input schema before they are sent; every
/// call has a timeout (the server's `call_ms`, or [`CallOptions::timeout`]) after which the
/// server is sent `notifications/cancelled`; each tool has a circuit breaker and statistics.
/// [`shutdown`](Self::shutdown) ends every session and child process.
///
/// ```no_run
/// # async fn demo() -> Result<(), soorma::mcp::McpError> {
/// use soorma::mcp::McpCoordinator;
///
/// let mcp = McpCoordinator::from_file("mcp.json")?;
/// for tool in mcp.list_tools().await? {
///     println!("{}: {}", tool.qualified_name, tool.description);
/// }
/// let out = mcp.call("everything:get-sum", serde_json::json!({"a": 2, "b": 3})).await?;
/// println!("{}", out.text);
/// mcp.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct McpCoordinator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpCoordinator")
            .field("servers", &self.servers())
            .finish_non_exhaustive()
    }
}

struct Inner {
    servers: Vec<Server>,
    breaker: BreakerConfig,
    /// Breakers and stats by qualified tool name; they outlive catalog refreshes.
    tools: Mutex<HashMap<String, Arc<ToolState>>>,
    shut_down: AtomicBool,
}

struct Server {
    config: ServerConfig,
    /// One permit per tool call running (`max_concurrent_calls`).
    calls: tokio::sync::Semaphore,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    catalog: tokio::sync::Mutex<Option<Arc<Catalog>>>,
}

/// A server's tools as last listed.
struct Catalog {
    tools: Vec<CatalogTool>,
}

struct CatalogTool {
    tool: rmcp::model::Tool,
    /// Compiled on the first call.
    validator: OnceLock<Result<Arc<jsonschema::Validator>, String>>,
}

struct ToolState {
    breaker: Arc<CircuitBreaker>,
    stats: StatsCell,
}

impl ToolState {
    /// Lets a call through, or refuses it while the circuit is open.
    fn admit(&self, qualified: &str) -> Result<Admitted, McpError> {
        self.breaker.admit().map_err(|retry_in| {
            self.stats.reject();
            McpError::CircuitOpen {
                tool: qualified.to_owned(),
                retry_in,
            }
        })
    }
}

/// A tool's name and description, as listed.
///
/// ```
/// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
/// let tools = mcp.list_tools().await?;
/// let names: Vec<&str> = tools.iter().map(|t| t.qualified_name.as_str()).collect();
/// # let _ = names; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSummary {
    /// The server's id.
    pub server: String,
    /// The tool's name on its server.
    pub name: String,
    /// `server:name`.
    pub qualified_name: String,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// What it does (`""` when the server gave no description).
    pub description: String,
}

/// Everything about one tool, including its schemas.
///
/// ```
/// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
/// let tool = mcp.tool("get-sum").await?;
/// assert_eq!(tool.input_schema["type"], "object");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolInfo {
    /// The name and description.
    pub summary: ToolSummary,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// The JSON Schema of its structured content, when it declares one.
    pub output_schema: Option<Value>,
}

/// Options of one call.
///
/// ```
/// use std::time::Duration;
/// use soorma::mcp::CallOptions;
///
/// let opts = CallOptions::new().timeout(Duration::from_secs(2));
/// assert_eq!(opts.timeout, Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    /// The call's timeout (default: the server's `call_ms`).
    pub timeout: Option<Duration>,
}

impl CallOptions {
    /// Default options.
    ///
    /// ```
    /// assert_eq!(soorma::mcp::CallOptions::new().timeout, None);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the call's timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = soorma::mcp::CallOptions::new().timeout(Duration::from_millis(500));
    /// assert_eq!(o.timeout, Some(Duration::from_millis(500)));
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl McpCoordinator {
    /// A coordinator for these servers; nothing is connected yet.
    ///
    /// ```
    /// use soorma::mcp::{McpConfig, McpCoordinator, ServerConfig};
    ///
    /// let mcp = McpCoordinator::new(McpConfig::new().server(ServerConfig::stdio("x", "mcp-x")))?;
    /// assert_eq!(mcp.servers(), ["x"]);
    /// assert!(McpCoordinator::new(McpConfig::new().server(ServerConfig::stdio("x", ""))).is_err());
    /// # Ok::<(), soorma::mcp::McpError>(())
    /// ```
    pub fn new(config: McpConfig) -> Result<Self, McpError> {
        config.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                servers: config
                    .servers
                    .into_iter()
                    .map(|config| Server {
                        calls: tokio::sync::Semaphore::new(
                            config
                                .max_concurrent_calls
                                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
                        ),
                        config,
                        connection: tokio::sync::Mutex::new(None),
                        catalog: tokio::sync::Mutex::new(None),
                    })
                    .collect(),
                breaker: config.circuit_breaker,
                tools: Mutex::new(HashMap::new()),
                shut_down: AtomicBool::new(false),
            }),
        })
    }

    /// A coordinator for the servers of an `mcp.json` file.
    ///
    /// ```
    /// let err = soorma::mcp::McpCoordinator::from_file("/no/such/mcp.json").unwrap_err();
    /// assert!(matches!(err, soorma::mcp::McpError::Config(_)));
    /// ```
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, McpError> {
        Self::new(McpConfig::load(path)?)
    }

    /// The configured server ids.
    ///
    /// ```
    /// # use soorma::mcp::{McpConfig, McpCoordinator, ServerConfig};
    /// let mcp = McpCoordinator::new(McpConfig::new()
    ///     .server(ServerConfig::stdio("a", "mcp-a"))
    ///     .server(ServerConfig::http("b", "http://127.0.0.1:9/mcp")))?;
    /// assert_eq!(mcp.servers(), ["a", "b"]);
    /// # Ok::<(), soorma::mcp::McpError>(())
    /// ```
    pub fn servers(&self) -> Vec<&str> {
        self.inner
            .servers
            .iter()
            .map(|s| s.config.id.as_str())
            .collect()
    }

    /// The tools of every server (connecting them as needed). Fails if a server cannot be
    /// reached; [`server_tools`](Self::server_tools) lists one server.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// for t in mcp.list_tools().await? {
    ///     println!("{} — {}", t.qualified_name, t.description);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_tools(&self) -> Result<Vec<ToolSummary>, McpError> {
        let listings = futures_util::future::join_all(
            self.inner
                .servers
                .iter()
                .map(|s| self.server_tools(&s.config.id)),
        )
        .await;
        let mut all = Vec::new();
        for listing in listings {
            all.extend(listing?);
        }
        Ok(all)
    }

    /// The tools of one server.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// let tools = mcp.server_tools("everything").await?;
    /// # let _ = tools; Ok(()) }
    /// ```
    pub async fn server_tools(&self, server: &str) -> Result<Vec<ToolSummary>, McpError> {
        let server = self.server(server)?;
        let catalog = self.catalog(server).await?;
        Ok(catalog
            .tools
            .iter()
            .map(|t| summary(&server.config.id, &t.tool))
            .collect())
    }

    /// One tool with its schemas; `name` is `server:tool` or an unambiguous tool name.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// let echo = mcp.tool("everything:echo").await?;
    /// println!("{}", echo.input_schema);
    /// # Ok(()) }
    /// ```
    pub async fn tool(&self, name: &str) -> Result<ToolInfo, McpError> {
        let (server, catalog, i) = self.resolve(name).await?;
        let tool = &catalog.tools[i].tool;
        Ok(ToolInfo {
            summary: summary(&server.config.id, tool),
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|s| Value::Object((**s).clone())),
        })
    }

    /// Calls a tool with the server's call timeout.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// let out = mcp.call("get-sum", serde_json::json!({"a": 1, "b": 2})).await?;
    /// assert!(out.text.contains('3'));
    /// # Ok(()) }
    /// ```
    pub async fn call(&self, name: &str, arguments: Value) -> Result<McpToolOutput, McpError> {
        self.call_with(name, arguments, CallOptions::new()).await
    }

    /// Calls a tool. The arguments (a JSON object; `null` for none) are checked against the
    /// tool's input schema first. Dropping the future cancels the call at the server.
    ///
    /// A result with `isError: true` is [`McpError::ToolFailed`]; a call that does not finish
    /// in time is [`McpError::Timeout`]; while the tool's circuit is open, calls fail at once
    /// with [`McpError::CircuitOpen`].
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// use std::time::Duration;
    /// use soorma::mcp::{CallOptions, McpError};
    ///
    /// let slow = mcp.call_with("search:crawl", serde_json::json!({"url": "https://example.com"}),
    ///     CallOptions::new().timeout(Duration::from_secs(2))).await;
    /// if let Err(McpError::Timeout { .. }) = slow { /* the server was told to stop */ }
    /// # Ok(()) }
    /// ```
    pub async fn call_with(
        &self,
        name: &str,
        arguments: Value,
        options: CallOptions,
    ) -> Result<McpToolOutput, McpError> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(McpError::Shutdown);
        }
        // A qualified call meets an open circuit before anything is started or listed.
        let early = match name.split_once(':') {
            Some((server, _)) if self.server(server).is_ok() => {
                let state = self.tool_state(name);
                let admitted = state.admit(name)?;
                Some((state, admitted))
            }
            _ => None,
        };
        let started = Instant::now();
        let (server, catalog, i) = match self.resolve(name).await {
            Ok(found) => found,
            Err(e) => {
                if let Some((state, admitted)) = early {
                    if matches!(e, McpError::Connect { .. } | McpError::Disconnected { .. }) {
                        // A server that cannot be reached fails its tools too.
                        admitted.finish(false);
                        state.stats.record(false, started.elapsed());
                    } else {
                        // Not the tool's failure (a name a caller invents, a listing that
                        // failed): nothing is kept for it.
                        drop(admitted);
                        self.forget_unknown(name, &state);
                    }
                }
                return Err(e);
            }
        };
        let entry = &catalog.tools[i];
        let qualified = format!("{}:{}", server.config.id, entry.tool.name);
        let span = tracing::info_span!("mcp.call", tool = %qualified);
        async {
            let arguments = match arguments {
                Value::Null => serde_json::Map::new(),
                Value::Object(map) => map,
                other => {
                    return Err(McpError::InvalidArguments {
                        tool: qualified.clone(),
                        violations: vec![SchemaViolation::new(
                            "",
                            format!("arguments must be a JSON object; found {other}"),
                        )],
                    });
                }
            };
            // Rejected arguments give an early permit back (`early` is dropped).
            check_arguments(&qualified, entry, &arguments)?;
            let (state, admitted) = match early {
                Some(early) => early,
                None => {
                    let state = self.tool_state(&qualified);
                    let admitted = state.admit(&qualified)?;
                    (state, admitted)
                }
            };
            let connection = match self.connection(server).await {
                Ok(c) => c,
                Err(e) => {
                    admitted.finish(false);
                    state.stats.record(false, started.elapsed());
                    return Err(e);
                }
            };
            let timeout = options.timeout.unwrap_or(server.config.timeouts.call);
            let mut params = CallToolRequestParams::new(entry.tool.name.to_string());
            params.arguments = Some(arguments);
            let started = Instant::now();
            // Dropping the request (on timeout, or when our caller goes away) sends
            // `notifications/cancelled`.
            // A slot among the server's concurrent calls is waited for within the timeout.
            let outcome = tokio::time::timeout(timeout, async {
                let _slot = server.calls.acquire().await;
                connection.peer.call_tool(params).await
            })
            .await;
            let latency = started.elapsed();
            let result = match outcome {
                Err(_) => Err(McpError::Timeout {
                    tool: qualified.clone(),
                    after: timeout,
                }),
                Ok(Ok(result)) => {
                    let output = McpToolOutput::from_call_result(
                        &serde_json::to_value(&result).unwrap_or(Value::Null),
                    );
                    if output.is_error {
                        Err(McpError::ToolFailed {
                            tool: qualified.clone(),
                            output: Box::new(output),
                        })
                    } else {
                        Ok(output)
                    }
                }
                Ok(Err(e)) => Err(self.service_error(server, &connection, e).await),
            };
            admitted.finish(result.is_ok());
            state.stats.record(result.is_ok(), latency);
            match &result {
                Ok(_) => tracing::debug!(?latency, "MCP tool call succeeded"),
                Err(e) => tracing::warn!(?latency, error = %e, "MCP tool call failed"),
            }
            result
        }
        .instrument(span)
        .await
    }

    /// The statistics of one tool (`server:tool`), once it has been called.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// if let Some(s) = mcp.stats("everything:echo") {
    ///     println!("{} ok, {} failed, mean {:?}", s.successes, s.failures, s.mean_latency());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stats(&self, qualified_name: &str) -> Option<ToolStats> {
        let tools = self.inner.tools.lock().unwrap_or_else(|e| e.into_inner());
        tools
            .get(qualified_name)
            .map(|t| t.stats.snapshot(t.breaker.state()))
    }

    /// The statistics of every tool called so far, by qualified name.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) {
    /// for (tool, s) in mcp.all_stats() {
    ///     println!("{tool}: {} calls, circuit {:?}", s.calls(), s.circuit);
    /// }
    /// # }
    /// ```
    pub fn all_stats(&self) -> Vec<(String, ToolStats)> {
        let tools = self.inner.tools.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = tools
            .iter()
            .map(|(name, t)| (name.clone(), t.stats.snapshot(t.breaker.state())))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// A description of a server's tools for a model: the text of the server's
    /// `tool-descriptions` prompt when it offers one, else one generated from its tool list
    /// (names, descriptions, arguments).
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// let prompt = mcp.tool_descriptions("everything").await?;
    /// # let _ = prompt; Ok(()) }
    /// ```
    pub async fn tool_descriptions(&self, server: &str) -> Result<String, McpError> {
        let server = self.server(server)?;
        let connection = self.connection(server).await?;
        let offers_prompts = connection
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.prompts.is_some());
        if offers_prompts {
            match self.prompt_text(server, &connection).await {
                Ok(Some(text)) => return Ok(text),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(server = %server.config.id, error = %e, "cannot read the MCP server's prompts; describing its tools from the tool list")
                }
            }
        }
        let catalog = self.catalog(server).await?;
        Ok(describe(&server.config.id, &catalog))
    }

    /// The text of the server's `tool-descriptions` prompt, if it has one (within the
    /// server's connect timeout).
    async fn prompt_text(
        &self,
        server: &Server,
        connection: &Connection,
    ) -> Result<Option<String>, McpError> {
        let limit = server.config.timeouts.connect;
        let protocol = |message: String| McpError::Protocol {
            server: server.config.id.clone(),
            message,
        };
        let late = |what: &str| protocol(format!("{what} did not answer within {limit:?}"));
        let listing = list_bounded("prompts", |cursor| async {
            let page = connection
                .peer
                .list_prompts(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await?;
            Ok((page.prompts, page.next_cursor))
        });
        let prompts = tokio::time::timeout(limit, listing)
            .await
            .map_err(|_| late("prompts/list"))?
            .map_err(|e| protocol(plain(&e)))?
            .map_err(protocol)?;
        if !prompts.iter().any(|p| p.name == TOOL_DESCRIPTIONS_PROMPT) {
            return Ok(None);
        }
        let prompt = tokio::time::timeout(
            limit,
            connection
                .peer
                .get_prompt(GetPromptRequestParams::new(TOOL_DESCRIPTIONS_PROMPT)),
        )
        .await
        .map_err(|_| late("prompts/get"))?
        .map_err(|e| protocol(e.to_string()))?;
        let text: Vec<String> = prompt
            .messages
            .iter()
            .filter_map(|m| {
                serde_json::to_value(&m.content)
                    .ok()?
                    .get("text")?
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        Ok(Some(text.join("\n")))
    }

    /// [`tool_descriptions`](Self::tool_descriptions) of every server, one section each.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// let system_prompt = format!("You can call these tools:\n\n{}", mcp.describe_tools().await?);
    /// # let _ = system_prompt; Ok(()) }
    /// ```
    pub async fn describe_tools(&self) -> Result<String, McpError> {
        let mut out = String::new();
        for s in &self.inner.servers {
            let section = self.tool_descriptions(&s.config.id).await?;
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("## MCP server `{}`\n\n{section}\n", s.config.id));
        }
        Ok(out)
    }

    /// The process id of a stdio server's child, while it is connected.
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) -> Result<(), soorma::mcp::McpError> {
    /// mcp.server_tools("everything").await?; // connects
    /// assert!(mcp.server_pid("everything").await.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn server_pid(&self, server: &str) -> Option<u32> {
        let server = self.server(server).ok()?;
        let connection = server.connection.lock().await;
        connection
            .as_ref()
            .filter(|c| !c.is_closed())
            .and_then(|c| c.pid)
    }

    /// Ends every session: stdio servers get their stdin closed and are waited for (then
    /// SIGTERM, then SIGKILL to their process group); HTTP sessions are closed. Later calls
    /// fail with [`McpError::Shutdown`].
    ///
    /// ```no_run
    /// # async fn demo(mcp: soorma::mcp::McpCoordinator) {
    /// mcp.shutdown().await;
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::Release);
        let closing = self.inner.servers.iter().map(|s| async move {
            let connection = s.connection.lock().await.take();
            if let Some(c) = connection {
                c.close(&s.config.id).await;
            }
        });
        futures_util::future::join_all(closing).await;
    }

    fn server(&self, id: &str) -> Result<&Server, McpError> {
        self.inner
            .servers
            .iter()
            .find(|s| s.config.id == id)
            .ok_or_else(|| McpError::UnknownServer {
                server: id.to_owned(),
                known: self.servers().join(", "),
            })
    }

    /// The circuit and statistics of the tool `qualified`; past [`MAX_TOOL_STATES`] tools
    /// (names a caller invents, on a server that cannot be reached to tell), a new name's are
    /// not kept.
    fn tool_state(&self, qualified: &str) -> Arc<ToolState> {
        let mut tools = self.inner.tools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state) = tools.get(qualified) {
            return state.clone();
        }
        let state = Arc::new(ToolState {
            breaker: Arc::new(CircuitBreaker::new(self.inner.breaker)),
            stats: StatsCell::default(),
        });
        if tools.len() < MAX_TOOL_STATES {
            tools.insert(qualified.to_owned(), state.clone());
        }
        state
    }

    /// Drops the state of `qualified` (a tool its server may not have) unless another call
    /// holds it too.
    fn forget_unknown(&self, qualified: &str, state: &Arc<ToolState>) {
        let mut tools = self.inner.tools.lock().unwrap_or_else(|e| e.into_inner());
        // Ours (the map's and this call's references) and nobody else's.
        if tools
            .get(qualified)
            .is_some_and(|s| Arc::ptr_eq(s, state) && Arc::strong_count(s) == 2)
        {
            tools.remove(qualified);
        }
    }

    /// The server's live connection, (re)connecting when there is none.
    async fn connection(&self, server: &Server) -> Result<Arc<Connection>, McpError> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(McpError::Shutdown);
        }
        let mut slot = server.connection.lock().await;
        // Checked again under the lock: `shutdown` may have emptied the slot meanwhile.
        if self.inner.shut_down.load(Ordering::Acquire) {
            return Err(McpError::Shutdown);
        }
        if let Some(c) = slot.as_ref() {
            if !c.is_closed() {
                return Ok(c.clone());
            }
            tracing::info!(server = %server.config.id, "MCP server went away; reconnecting");
        }
        let c = Arc::new(Connection::open(&server.config).await?);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// The server's tools, listed on first use and again after it says they changed.
    async fn catalog(&self, server: &Server) -> Result<Arc<Catalog>, McpError> {
        let connection = self.connection(server).await?;
        let mut slot = server.catalog.lock().await;
        let changed = connection.tools_changed.swap(false, Ordering::AcqRel);
        if let Some(c) = slot.as_ref().filter(|_| !changed) {
            return Ok(c.clone());
        }
        let listing = list_bounded("tools", |cursor| async {
            let page = connection
                .peer
                .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                .await?;
            Ok((page.tools, page.next_cursor))
        });
        let listed = tokio::time::timeout(server.config.timeouts.connect, listing)
            .await
            .map_err(|_| {
                if changed {
                    connection.tools_changed.store(true, Ordering::Release);
                }
                McpError::Protocol {
                    server: server.config.id.clone(),
                    message: format!(
                        "tools/list did not answer within {:?}",
                        server.config.timeouts.connect
                    ),
                }
            })?;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(message)) => {
                if changed {
                    connection.tools_changed.store(true, Ordering::Release);
                }
                return Err(McpError::Protocol {
                    server: server.config.id.clone(),
                    message,
                });
            }
            Err(e) => {
                if changed {
                    connection.tools_changed.store(true, Ordering::Release);
                }
                return Err(self.service_error(server, &connection, e).await);
            }
        };
        tracing::debug!(server = %server.config.id, tools = tools.len(), "listed MCP tools");
        let catalog = Arc::new(Catalog {
            tools: tools
                .into_iter()
                .map(|tool| CatalogTool {
                    tool,
                    validator: OnceLock::new(),
                })
                .collect(),
        });
        self.forget_missing(&server.config.id, &catalog);
        *slot = Some(catalog.clone());
        Ok(catalog)
    }

    /// Drops the states of `server`'s tools that its `catalog` does not have (names kept while
    /// it could not be reached to tell), unless a call holds them.
    fn forget_missing(&self, server: &str, catalog: &Catalog) {
        let mut tools = self.inner.tools.lock().unwrap_or_else(|e| e.into_inner());
        tools.retain(|qualified, state| {
            let Some((owner, tool)) = qualified.split_once(':') else {
                return true;
            };
            owner != server
                || catalog.tools.iter().any(|t| t.tool.name == tool)
                || Arc::strong_count(state) > 1
        });
    }

    /// Finds a tool by `server:tool` or by an unambiguous name.
    async fn resolve(&self, name: &str) -> Result<(&Server, Arc<Catalog>, usize), McpError> {
        let unknown = || McpError::UnknownTool {
            tool: name.to_owned(),
        };
        if let Some((server, tool)) = name.split_once(':') {
            let server = self.server(server)?;
            let catalog = self.catalog(server).await?;
            let i = catalog
                .tools
                .iter()
                .position(|t| t.tool.name == tool)
                .ok_or_else(unknown)?;
            return Ok((server, catalog, i));
        }
        let catalogs = futures_util::future::join_all(
            self.inner
                .servers
                .iter()
                .map(|s| async move { (s, self.catalog(s).await) }),
        )
        .await;
        let mut found = Vec::new();
        let mut unreachable = None;
        for (server, catalog) in catalogs {
            match catalog {
                Ok(catalog) => {
                    if let Some(i) = catalog.tools.iter().position(|t| t.tool.name == name) {
                        found.push((server, catalog, i));
                    }
                }
                Err(e) => {
                    tracing::warn!(server = %server.config.id, error = %e, "MCP server unreachable while resolving `{name}`");
                    unreachable.get_or_insert(e);
                }
            }
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(unreachable.unwrap_or_else(unknown)),
            _ => Err(McpError::AmbiguousTool {
                tool: name.to_owned(),
                candidates: found
                    .iter()
                    .map(|(s, _, _)| format!("{}:{name}", s.config.id))
                    .collect(),
            }),
        }
    }

    /// Classifies an rmcp error; a lost connection is dropped so the next call reconnects.
    async fn service_error(
        &self,
        server: &Server,
        connection: &Arc<Connection>,
        e: ServiceError,
    ) -> McpError {
        let id = server.config.id.clone();
        match e {
            ServiceError::McpError(e) => McpError::Protocol {
                server: id,
                message: format!("{} (code {})", e.message, e.code.0),
            },
            e if connection.is_closed()
                || matches!(
                    e,
                    ServiceError::TransportClosed | ServiceError::TransportSend(_)
                ) =>
            {
                let mut slot = server.connection.lock().await;
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, connection)) {
                    *slot = None;
                }
                McpError::Disconnected {
                    server: id,
                    message: connection.describe(&e).await,
                }
            }
            e => McpError::Protocol {
                server: id,
                message: plain(&e),
            },
        }
    }
}

fn summary(server: &str, tool: &rmcp::model::Tool) -> ToolSummary {
    ToolSummary {
        server: server.to_owned(),
        name: tool.name.to_string(),
        qualified_name: format!("{server}:{}", tool.name),
        title: tool.title.clone(),
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
    }
}

/// Checks the arguments against the tool's input schema (compiled once per listing).
fn check_arguments(
    qualified: &str,
    entry: &CatalogTool,
    arguments: &serde_json::Map<String, Value>,
) -> Result<(), McpError> {
    let validator = entry.validator.get_or_init(|| {
        jsonschema::validator_for(&Value::Object((*entry.tool.input_schema).clone()))
            .map(Arc::new)
            .map_err(|e| e.to_string())
    });
    let validator = match validator {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(tool = qualified, error = %e, "the MCP tool's input schema does not compile; arguments are not checked");
            return Ok(());
        }
    };
    let arguments = Value::Object(arguments.clone());
    let violations: Vec<SchemaViolation> = validator
        .iter_errors(&arguments)
        .map(|e| SchemaViolation::new(e.instance_path().to_string(), e.to_string()))
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(McpError::InvalidArguments {
            tool: qualified.to_owned(),
            violations,
        })
    }
}

/// A generated description of a server's tools: name, description, arguments.
fn describe(server: &str, catalog: &Catalog) -> String {
    let mut out = String::new();
    for t in &catalog.tools {
        let tool = &t.tool;
        out.push_str(&format!("- `{server}:{}`", tool.name));
        if let Some(d) = tool.description.as_deref().filter(|d| !d.is_empty()) {
            out.push_str(&format!(": {}", d.trim()));
        }
        out.push('\n');
        let required: Vec<&str> = tool
            .input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = tool
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
        {
            for (name, schema) in props {
                let kind = schema.get("type").and_then(Value::as_str).unwrap_or("any");
                let need = if required.contains(&name.as_str()) {
                    "required"
                } else {
                    "optional"
                };
                out.push_str(&format!("  - `{name}` ({kind}, {need})"));
                if let Some(d) = schema.get("description").and_then(Value::as_str) {
                    out.push_str(&format!(": {d}"));
                }
                out.push('\n');
            }
        }
    }
    out
}
