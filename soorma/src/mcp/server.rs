//! The platform's tools and workers as an MCP server: over stdio, any byte stream, or
//! streamable HTTP.
//!
//! Every capability of a served agent (kind [`Tool`](crate::AgentKind::Tool) or
//! [`Worker`](crate::AgentKind::Worker)) is an MCP tool named after the event it consumes, with
//! the capability's description and payload schema as `inputSchema` (a payload that is not an
//! object travels wrapped as the `input` argument). `tools/list` reads the registry, so agents
//! started later appear. `tools/call` sends an action request and waits for the reply (a tool's
//! answer, a worker's `complete`) up to [`McpServer::call_timeout`]; an error reply, a payload
//! the schema rejects, or a timeout is a result with `isError: true`. A call with a
//! `progressToken` gets the worker's `task.progress` events as `notifications/progress`.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> soorma::Result<()> {
//! let platform = soorma::Platform::from_env().await?;
//! soorma::mcp::McpServer::new(&platform).serve_stdio().await // until stdin closes
//! # }
//! ```

mod catalog;
mod gate;
mod progress;
mod stdio;

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::CustomRequest;
use rmcp::model::CustomResult;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::http::{Admission, ErrorStyle, HttpConfig, HttpServer};
use crate::platform::Platform;
use crate::platform::snapshot::{AgentsRead, AgentsSnapshot, PerRead};
use crate::util::new_id;
use catalog::{Catalog, INPUT, Route, Scope};
use gate::{CappedSessions, Gate, StaticToken};
pub use gate::{McpIdentity, TokenVerifier};
use progress::{ProgressRouter, Subscription};

/// How old a registry read may be for a call to be routed from it (a tool it lacks is looked
/// for in a read begun after the call).
const CATALOG_FRESH: Duration = Duration::from_secs(5);

/// An MCP server offering the tools and workers on a platform.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use soorma::mcp::McpServer;
/// use soorma::mcp::rmcp::{ServiceExt, model::CallToolRequestParams};
/// use soorma::prelude::*;
///
/// /// Doubles a number.
/// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
///
/// let platform = Platform::embedded();
/// let tool = Tool::new("doubler").use_registered_handlers(false)
///     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
///
/// // An MCP client on one end of a pipe, the server on the other.
/// let (client_io, server_io) = tokio::io::duplex(64 * 1024);
/// let (read, write) = tokio::io::split(server_io);
/// tokio::spawn(McpServer::new(&platform).serve_io(read, write));
/// let client = ().serve(client_io).await?;
///
/// let tools = client.list_all_tools().await?;
/// assert_eq!(tools[0].name, "double.requested");
/// let args = serde_json::json!({"input": 21}).as_object().cloned().unwrap();
/// let call = CallToolRequestParams::new("double.requested").with_arguments(args);
/// let result = client.call_tool(call).await?;
/// assert_eq!(result.content[0].as_text().unwrap().text, "42");
/// client.cancel().await?;
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use = "an MCP server does nothing until served"]
pub struct McpServer {
    platform: Platform,
    agents: Vec<String>,
    name: String,
    version: String,
    instructions: Option<String>,
    call_timeout: Duration,
    tenant: Option<String>,
    http: HttpConfig,
    allowed_origins: Vec<String>,
    verifier: Option<Verifier>,
    max_sessions: usize,
    session_idle: Duration,
    max_calls: usize,
}

/// The bearer-token verifier of a server (not printed).
#[derive(Clone)]
struct Verifier(Arc<dyn TokenVerifier>);

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<token verifier>")
    }
}

impl McpServer {
    /// A server for every tool and worker on `platform` (narrow it with [`agent`](Self::agent)).
    ///
    /// ```
    /// let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded());
    /// # let _ = server;
    /// ```
    pub fn new(platform: &Platform) -> Self {
        Self {
            platform: platform.clone(),
            agents: Vec::new(),
            name: "soorma".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: None,
            call_timeout: default_call_timeout(platform),
            tenant: None,
            http: HttpConfig::default(),
            allowed_origins: Vec::new(),
            verifier: None,
            max_sessions: 256,
            session_idle: Duration::from_secs(300),
            max_calls: 256,
        }
    }

    /// Offers the agent registered as `name`; once one is added, only the agents added are.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).agent("calculator").agent("batch");
    /// # let _ = s;
    /// ```
    pub fn agent(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.agents.contains(&name) {
            self.agents.push(name);
        }
        self
    }

    /// The server's name in `initialize` (default `soorma`).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).name("calculators");
    /// # let _ = s;
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The server's version in `initialize` (default: soorma's version).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).version("1.2.0");
    /// # let _ = s;
    /// ```
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Instructions for the client's model, sent in `initialize`.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .instructions("Use `calculate.requested` for arithmetic.");
    /// # let _ = s;
    /// ```
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    /// How long a tool call waits for its reply before it fails (default 120 s, or longer on a
    /// platform that redelivers later: 30 s past its redelivery delay, `ack_wait` on NATS, so
    /// that a call outlives the redelivery of its request after a crash, as a client's does).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .call_timeout(std::time::Duration::from_secs(600));
    /// # let _ = s;
    /// ```
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Acts for `tenant`: requests carry it, and agents registered for another tenant are not
    /// offered (by default only agents serving every tenant are).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).tenant("acme");
    /// # let _ = s;
    /// ```
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Accepts HTTP requests whose `Host` is `host` (a name, or `name:port`); see
    /// [`HttpConfig::allowed_host`]. Only loopback hosts are accepted by default on a loopback
    /// address, against DNS rebinding.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).allowed_host("mcp.example.com");
    /// # let _ = s;
    /// ```
    pub fn allowed_host(mut self, host: impl Into<String>) -> Self {
        self.http = self.http.allowed_host(host);
        self
    }

    /// The HTTP server's limits and checks: allowed `Host`s, timeouts, body size, connections
    /// (default [`HttpConfig::default`]). Hosts added with [`allowed_host`](Self::allowed_host)
    /// are kept.
    ///
    /// ```
    /// use soorma::http::HttpConfig;
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .http(HttpConfig::default().max_connections(64));
    /// # let _ = s;
    /// ```
    pub fn http(mut self, config: HttpConfig) -> Self {
        let hosts = std::mem::take(&mut self.http).allowed_hosts().to_vec();
        self.http = hosts.into_iter().fold(config, HttpConfig::allowed_host);
        self
    }

    /// Accepts HTTP requests from web pages of `origin` (`scheme://host[:port]`, `:*` for any
    /// port, `null` for `Origin: null`). By default every request carrying an `Origin` is
    /// refused (HTTP 403), as the MCP specification requires of servers that do not serve
    /// browsers; requests without one (non-browser clients) are not affected.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .allowed_origin("http://localhost:6274");
    /// # let _ = s;
    /// ```
    pub fn allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Requires `Authorization: Bearer <token>` on every HTTP request (HTTP 401 with
    /// `WWW-Authenticate: Bearer` otherwise); the identity is `bearer`. Replaces a
    /// [`token_verifier`](Self::token_verifier).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).bearer_token("s3cret");
    /// # let _ = s;
    /// ```
    pub fn bearer_token(self, token: impl Into<String>) -> Self {
        self.token_verifier(StaticToken(token.into()))
    }

    /// Requires a bearer token `verifier` accepts on every HTTP request (HTTP 401 with
    /// `WWW-Authenticate: Bearer` otherwise). The identity it returns is logged with each tool
    /// call and put in the request's extensions as [`McpIdentity`].
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .token_verifier(|token: &str| (token == "t-alice").then(|| "alice".to_owned()));
    /// # let _ = s;
    /// ```
    pub fn token_verifier(mut self, verifier: impl TokenVerifier) -> Self {
        self.verifier = Some(Verifier(Arc::new(verifier)));
        self
    }

    /// How many HTTP sessions the server keeps at once (default 256, at least 1); a client
    /// opening one more gets HTTP 503 until one ends or expires.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).max_sessions(32);
    /// # let _ = s;
    /// ```
    pub fn max_sessions(mut self, sessions: usize) -> Self {
        self.max_sessions = sessions.max(1);
        self
    }

    /// How many tool calls the server runs at once, over all sessions (default 256, at least
    /// 1); a call beyond them is answered at once with a tool error saying the server is busy.
    /// A call holds its place until its agent replies, the call times out
    /// ([`call_timeout`](Self::call_timeout)) or its client cancels it, even when the client
    /// has gone.
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).max_calls(32);
    /// # let _ = s;
    /// ```
    pub fn max_calls(mut self, calls: usize) -> Self {
        self.max_calls = calls.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// How long an HTTP session may go without a request before it ends (default 5 min).
    ///
    /// ```
    /// let s = soorma::mcp::McpServer::new(&soorma::Platform::embedded())
    ///     .session_idle_timeout(std::time::Duration::from_secs(60));
    /// # let _ = s;
    /// ```
    pub fn session_idle_timeout(mut self, idle: Duration) -> Self {
        self.session_idle = idle;
        self
    }

    /// Serves one MCP client on stdin/stdout until stdin closes. Stdout carries the protocol:
    /// log to stderr.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> soorma::Result<()> {
    /// soorma::mcp::McpServer::new(&soorma::Platform::embedded()).serve_stdio().await
    /// # }
    /// ```
    pub async fn serve_stdio(self) -> Result<()> {
        let (stdin, stdout) = rmcp::transport::stdio();
        self.serve_io(stdin, stdout).await
    }

    /// Serves one MCP client on a byte stream (newline-delimited JSON-RPC) until it closes. A
    /// line that is not JSON is answered with a -32700 parse error, JSON that is no JSON-RPC
    /// message with -32600; lines over 16 MiB are skipped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use soorma::mcp::rmcp::ServiceExt;
    ///
    /// let platform = soorma::Platform::embedded();
    /// let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    /// let (read, write) = tokio::io::split(server_io);
    /// let server = tokio::spawn(soorma::mcp::McpServer::new(&platform).serve_io(read, write));
    /// let client = ().serve(client_io).await?;
    /// assert!(client.list_all_tools().await?.is_empty()); // no agents yet
    /// client.cancel().await?; // closes the stream: the server returns
    /// server.await??;
    /// # Ok(()) }
    /// ```
    pub async fn serve_io<R, W>(self, reader: R, writer: W) -> Result<()>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let service = McpService::new(self);
        let running = service
            .serve(stdio::LineTransport::new(reader, writer))
            .await
            .map_err(|e| Error::Config(format!("MCP client did not initialize: {e}")))?;
        let reason = running
            .waiting()
            .await
            .map_err(|e| Error::Handler(format!("the MCP server stopped: {e}")))?;
        tracing::info!(?reason, "MCP session ended");
        Ok(())
    }

    /// The streamable HTTP endpoint as an axum router serving `/mcp`, to merge into an app.
    ///
    /// ```
    /// let app: axum::Router = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).router();
    /// # let _ = app;
    /// ```
    pub fn router(self) -> axum::Router {
        let config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(self.http.body_limit());
        let (routes, gate) = self.routes_with(config);
        routes.layer(axum::middleware::from_fn_with_state(gate, gate::check))
    }

    /// The `/mcp` route, and the gate its requests pass first (bearer token, session cap).
    fn routes_with(self, mut config: StreamableHttpServerConfig) -> (axum::Router, Arc<Gate>) {
        if !self.http.allowed_hosts().is_empty() {
            let hosts = config
                .allowed_hosts
                .iter()
                .cloned()
                .chain(self.http.allowed_hosts().iter().cloned())
                .collect::<Vec<_>>();
            config = config.with_allowed_hosts(hosts);
        }
        config = config
            .with_allowed_origins(self.allowed_origins.clone())
            .enforce_origin_validation();
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(self.session_idle);
        let sessions = Arc::new(sessions);
        let gate = Arc::new(Gate {
            verifier: self.verifier.as_ref().map(|v| v.0.clone()),
            sessions: sessions.clone(),
            max_sessions: self.max_sessions,
        });
        let capped = CappedSessions {
            inner: sessions,
            max: self.max_sessions,
        };
        let service = McpService::new(self);
        let http =
            StreamableHttpService::new(move || Ok(service.clone()), Arc::new(capped), config);
        (axum::Router::new().route_service("/mcp", http), gate)
    }

    /// Serves streamable HTTP at `/mcp` on `listener` in the background; see [`McpServerHandle`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).spawn(listener).await?;
    /// assert!(server.url().ends_with("/mcp"));
    /// server.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn spawn(self, listener: tokio::net::TcpListener) -> Result<McpServerHandle> {
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("MCP server listener: {e}")))?;
        let url = format!("http://{addr}/mcp");
        if !addr.ip().is_loopback() && self.verifier.is_none() {
            tracing::warn!(
                %addr,
                "the MCP server listens off loopback without a bearer token: anyone who reaches \
                 it can call every tool (set McpServer::bearer_token or token_verifier)"
            );
        }
        // The shared HTTP layer checks `Host` for the bind address (any host off loopback
        // without an allowlist), so rmcp's own loopback-only check is off here.
        // The shared HTTP layer limits bodies (413, then the connection closed); rmcp's own
        // limit (4 MiB by default) is set to the same, so a larger `max_body_bytes` holds.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_max_request_body_bytes(self.http.body_limit());
        let sessions = config.cancellation_token.clone();
        let http_config = self.http.clone();
        let (routes, gate) = self.routes_with(config);
        // The gate sees the headers alone: a request without a valid token has no body read.
        let admission: Admission = Box::new(move |routes: axum::Router| {
            routes.layer(axum::middleware::from_fn_with_state(gate, gate::check))
        });
        // Stopping ends open sessions and their event streams first, so the server can stop.
        let http = HttpServer::spawn(
            listener,
            routes,
            admission,
            &http_config,
            ErrorStyle::JsonRpc,
            "MCP server",
            move || sessions.cancel(),
        )
        .map_err(|e| Error::Config(format!("MCP server listener: {e}")))?;
        tracing::info!(%url, "MCP server listening");
        Ok(McpServerHandle { addr, url, http })
    }

    /// Serves streamable HTTP at `/mcp` on `listener` until Ctrl-C / SIGTERM.
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> soorma::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8000").await.unwrap();
    /// soorma::mcp::McpServer::new(&soorma::Platform::embedded()).serve(listener).await
    /// # }
    /// ```
    pub async fn serve(self, listener: tokio::net::TcpListener) -> Result<()> {
        let handle = self.spawn(listener).await?;
        crate::util::shutdown_signal().await;
        handle.shutdown().await;
        Ok(())
    }
}

/// A running streamable HTTP MCP server.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).spawn(listener).await?;
/// println!("MCP endpoint: {}", server.url());
/// server.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct McpServerHandle {
    addr: SocketAddr,
    url: String,
    http: HttpServer,
}

impl McpServerHandle {
    /// The address the server listens on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// # let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).spawn(listener).await?;
    /// assert!(server.local_addr().ip().is_loopback());
    /// # server.shutdown().await; Ok(()) }
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint, `http://<address>/mcp`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// # let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).spawn(listener).await?;
    /// assert_eq!(server.url(), format!("http://{}/mcp", server.local_addr()));
    /// # server.shutdown().await; Ok(()) }
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Ends the open sessions, stops taking connections and waits for the server to stop.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let server = soorma::mcp::McpServer::new(&soorma::Platform::embedded()).spawn(listener).await?;
    /// server.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        self.http.stop().await;
    }
}

/// The default call timeout on `platform`: 120 s, and at least what a client waits for by
/// default there (its redelivery delay plus [`Client::DEFAULT_TIMEOUT`]).
fn default_call_timeout(platform: &Platform) -> Duration {
    Duration::from_secs(120).max(Client::default_timeout_on(platform))
}

/// The rmcp server handler; one per server, shared by its sessions.
#[derive(Clone)]
struct McpService {
    shared: Arc<Shared>,
}

struct Shared {
    config: McpServer,
    client: Client,
    reply_event: String,
    /// The tools of the registry reads, built once per read.
    catalog: PerRead<Catalog>,
    /// The registry's agents: `tools/list` and unknown names share reads of it.
    registry: AgentsSnapshot,
    progress: ProgressRouter,
    /// One permit per tool call running ([`McpServer::max_calls`]).
    calls: Arc<tokio::sync::Semaphore>,
}

impl McpService {
    fn new(config: McpServer) -> Self {
        let mut client = config
            .platform
            .client("mcp-server")
            .with_timeout(config.call_timeout);
        if let Some(tenant) = &config.tenant {
            client = client.with_tenant(tenant);
        }
        Self {
            shared: Arc::new(Shared {
                client,
                reply_event: format!("mcp-server.replied.{}", new_id()),
                catalog: PerRead::default(),
                registry: config.platform.agents().clone(),
                progress: ProgressRouter::default(),
                calls: Arc::new(tokio::sync::Semaphore::new(config.max_calls)),
                config,
            }),
        }
    }
}

impl Shared {
    /// The tools on the platform now (from a registry read begun after this call, shared
    /// with the calls waiting for one).
    async fn catalog(&self) -> std::result::Result<Arc<Catalog>, String> {
        Ok(self.catalog_of(self.registry.current().await?))
    }

    /// The catalog of the registry read `agents` (or of a newer one already built).
    fn catalog_of(&self, agents: AgentsRead) -> Arc<Catalog> {
        let scope = Scope {
            agents: &self.config.agents,
            tenant: self.config.tenant.as_deref(),
        };
        self.catalog
            .of(agents, |agents| Catalog::build(agents, &scope))
    }

    /// Where the tool `name` goes: from a registry read at most [`CATALOG_FRESH`] old that
    /// holds it, else from one begun after this call (the tool may have just registered).
    async fn route(&self, name: &str) -> std::result::Result<Route, ErrorData> {
        let read = self
            .registry
            .recent_with(CATALOG_FRESH, |read| {
                self.catalog_of(read.clone()).routes.contains_key(name)
            })
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        self.catalog_of(read)
            .routes
            .get(name)
            .cloned()
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!(
                        "unknown tool `{name}`: this server offers no such tool (see tools/list)"
                    ),
                    Some(json!({"tool": name})),
                )
            })
    }
}

impl ServerHandler for McpService {
    fn get_info(&self) -> ServerConfig {
        let config = &self.shared.config;
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(&config.name, &config.version));
        if let Some(instructions) = &config.instructions {
            info = info.with_instructions(instructions);
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        match self.shared.catalog().await {
            Ok(catalog) => Ok(ListToolsResult::with_all_items(catalog.tools.clone())),
            Err(e) => Err(ErrorData::internal_error(e, None)),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpIdentity>())
            .map(|identity| identity.0.clone());
        let span = tracing::info_span!(
            "soorma.mcp.call",
            tool = %request.name,
            request_id = %context.id,
            caller = caller.as_deref().unwrap_or("-"),
        );
        self.call(request, context)
            .instrument(span)
            .await
            .map(Into::into)
    }

    /// A request rmcp could not read as the method it names arrives here: a known method
    /// with parameters of the wrong shape is -32602 (invalid params), anything else -32601.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CustomResult, ErrorData> {
        let problem = match request.method.as_str() {
            "tools/call" => request.params_as::<CallToolRequestParams>().err(),
            "tools/list" => request.params_as::<PaginatedRequestParams>().err(),
            "initialize"
            | "ping"
            | "resources/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
            | "completion/complete"
            | "logging/setLevel" => Some(serde::de::Error::custom("parameters of the wrong shape")),
            _ => None,
        };
        match problem {
            Some(e) => {
                tracing::info!(method = %request.method, error = %e, "MCP request with invalid parameters");
                Err(ErrorData::invalid_params(
                    format!("invalid parameters for `{}`: {e}", request.method),
                    None,
                ))
            }
            None => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method `{}` not found", request.method),
                None,
            )),
        }
    }
}

impl McpService {
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let shared = &self.shared;
        let name = request.name.to_string();
        let route = shared.route(&name).await?;
        // Held until the call is answered.
        let Ok(_running) = shared.calls.clone().try_acquire_owned() else {
            tracing::warn!(tool = %name, max = shared.config.max_calls, "MCP tool call refused: the server is busy");
            return Ok(failure(format!(
                "the server is busy: {} tool calls are running; try again later",
                shared.config.max_calls
            )));
        };
        let arguments = request.arguments.unwrap_or_default();
        let payload = if route.wrapped {
            match arguments.get(INPUT) {
                Some(input) => input.clone(),
                None => {
                    return Ok(failure(format!(
                        "`{name}` takes its input as the `{INPUT}` argument"
                    )));
                }
            }
        } else {
            Value::Object(arguments)
        };
        let call = shared
            .client
            .request(&route.event, payload, &shared.reply_event)
            .correlation_id(new_id());
        let (tenant, request_id) = match call.envelope() {
            Ok(envelope) => (envelope.tenant().to_owned(), envelope.id.clone()),
            Err(e) => return Ok(failure(e.to_string())),
        };
        let mut progress = match context.meta.get_progress_token() {
            Some(token) => shared
                .progress
                .subscribe(&shared.config.platform, &tenant, &request_id)
                .await
                .map(|sub| Progress::new(token, sub, context.peer.clone())),
            None => None,
        };
        tracing::debug!(event_type = %route.event, %request_id, "MCP tool call sent");
        let outcome = tokio::select! {
            reply = call.into_future() => Some(reply),
            () = context.ct.cancelled() => None,
            () = forward(progress.as_mut()) => None,
        };
        if let Some(progress) = progress.as_mut() {
            progress.drain().await;
        }
        let result = match outcome {
            None => {
                // `notifications/cancelled`: stop the agent's work too.
                if let Err(e) = shared.client.cancel(&request_id).await {
                    tracing::warn!(error = %e, %request_id, "could not tell the agent to stop the cancelled call");
                }
                tracing::info!(%request_id, "MCP tool call cancelled by the client");
                failure("cancelled by the client")
            }
            Some(Ok(reply)) if reply.is_success() => {
                success(reply.reply.result.unwrap_or(Value::Null))
            }
            Some(Ok(reply)) => {
                let message = reply.reply.error.unwrap_or_default();
                tracing::info!(error = %message, "MCP tool call failed");
                failure(format!("`{name}` failed: {message}"))
            }
            Some(Err(e @ Error::SchemaViolation { .. })) => {
                tracing::info!(error = %e, "MCP tool call rejected");
                failure(format!("invalid arguments: {e}"))
            }
            Some(Err(Error::Timeout { after, .. })) => {
                tracing::warn!(?after, "MCP tool call timed out");
                failure(format!("`{name}` did not answer within {after:?}"))
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "MCP tool call failed");
                failure(format!("`{name}` failed: {e}"))
            }
        };
        Ok(result)
    }
}

fn success(value: Value) -> CallToolResult {
    let text = value.to_string();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

fn failure(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// Forwards one call's progress events to the client as `notifications/progress`.
struct Progress {
    token: ProgressToken,
    sub: Subscription,
    peer: Peer<RoleServer>,
    last: Option<f64>,
}

impl Progress {
    fn new(token: ProgressToken, sub: Subscription, peer: Peer<RoleServer>) -> Self {
        Self {
            token,
            sub,
            peer,
            last: None,
        }
    }

    async fn notify(&mut self, progress: soorma_common::TaskProgress) {
        // MCP progress must increase; a repeated or lower value is dropped.
        if self.last.is_some_and(|last| progress.progress <= last) {
            tracing::debug!(
                progress = progress.progress,
                "progress not above the last reported; not forwarded"
            );
            return;
        }
        self.last = Some(progress.progress);
        let mut params =
            ProgressNotificationParam::new(self.token.clone(), progress.progress).with_total(1.0);
        if let Some(message) = progress.message {
            params = params.with_message(message);
        }
        if let Err(e) = self.peer.notify_progress(params).await {
            tracing::debug!(error = %e, "could not send a progress notification");
        }
    }

    /// Forwards what has arrived already (before the reply was seen): the latest report.
    async fn drain(&mut self) {
        if !self.sub.rx.has_changed().unwrap_or(false) {
            return;
        }
        let latest = self.sub.rx.borrow_and_update().clone();
        if let Some(progress) = latest {
            self.notify(progress).await;
        }
    }
}

/// Forwards progress for as long as it is polled (never completes).
async fn forward(progress: Option<&mut Progress>) {
    if let Some(progress) = progress {
        // A client slower than the reports gets the latest one each time it is ready.
        while progress.sub.rx.changed().await.is_ok() {
            let latest = progress.sub.rx.borrow_and_update().clone();
            if let Some(event) = latest {
                progress.notify(event).await;
            }
        }
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use soorma_common::{EventEnvelope, Topic};

    use super::*;
    use crate::engine::EngineParts;
    use crate::engine::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    use crate::spi::bus::{EventBus, Subscription, SubscriptionSpec};
    use crate::util::BoxFuture;

    /// A bus that redelivers an unsettled event after `delay` (as NATS does after `ack_wait`).
    struct Redelivering {
        inner: EmbeddedBus,
        delay: Duration,
    }

    impl EventBus for Redelivering {
        fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, crate::error::Result<()>> {
            self.inner.publish(envelope)
        }

        fn subscribe(
            &self,
            spec: SubscriptionSpec,
        ) -> BoxFuture<'_, crate::error::Result<Box<dyn Subscription>>> {
            self.inner.subscribe(spec)
        }

        fn observe(
            &self,
            topic: Option<Topic>,
        ) -> BoxFuture<'_, crate::error::Result<Box<dyn Subscription>>> {
            self.inner.observe(topic)
        }

        fn redelivery_delay(&self) -> Option<Duration> {
            Some(self.delay)
        }
    }

    fn platform(delay: Duration) -> Platform {
        Platform::from_parts(EngineParts::new(
            "redelivering",
            Arc::new(Redelivering {
                inner: EmbeddedBus::new(),
                delay,
            }),
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryRegistry::new()),
        ))
    }

    #[test]
    fn a_calls_default_timeout_outlives_the_redelivery_of_its_request() {
        let embedded = McpServer::new(&Platform::embedded());
        assert_eq!(embedded.call_timeout, Duration::from_secs(120));
        let quick = McpServer::new(&platform(Duration::from_secs(30)));
        assert_eq!(quick.call_timeout, Duration::from_secs(120));
        let slow = McpServer::new(&platform(Duration::from_secs(150)));
        assert_eq!(slow.call_timeout, Duration::from_secs(180));
        let set = McpServer::new(&platform(Duration::from_secs(150)))
            .call_timeout(Duration::from_secs(5));
        assert_eq!(set.call_timeout, Duration::from_secs(5), "as set");
    }
}
