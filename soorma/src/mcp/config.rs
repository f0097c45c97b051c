//! The MCP servers to connect to: `mcp.json`, or built in code.
//!
//! ```json
//! {
//!   "servers": [
//!     {"id": "everything", "stdio": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}},
//!     {"id": "search", "http": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer s3cret"}},
//!      "timeouts": {"connect_ms": 5000, "call_ms": 20000}, "max_concurrent_calls": 8}
//!   ],
//!   "circuit_breaker": {"failures": 5, "window_ms": 60000, "cool_down_ms": 30000}
//! }
//! ```
//!
//! The `mcpServers` map used by desktop MCP clients (`{"mcpServers": {"id": {"command": ..,
//! "args": .., "env": ..}}}` or `{"url": ..}`) is read too. Every problem is reported at once,
//! each with the path of the field at fault.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

/// The default time to start or reach a server and finish the MCP handshake.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time a tool call may take.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The MCP servers a [`McpCoordinator`](super::McpCoordinator) talks to, and its circuit breaker.
///
/// ```
/// use soorma::mcp::{McpConfig, ServerConfig};
///
/// let config = McpConfig::from_json(r#"{"servers": [
///     {"id": "files", "stdio": {"command": "mcp-files", "args": ["--root", "/srv"]}},
///     {"id": "web", "http": {"url": "http://127.0.0.1:8000/mcp"}}
/// ]}"#)?;
/// assert_eq!(config.servers.len(), 2);
///
/// let same = McpConfig::new()
///     .server(ServerConfig::stdio("files", "mcp-files").args(["--root", "/srv"]))
///     .server(ServerConfig::http("web", "http://127.0.0.1:8000/mcp"));
/// assert_eq!(same.servers[0], config.servers[0]);
/// # Ok::<(), soorma::mcp::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct McpConfig {
    /// The servers, in the order given.
    pub servers: Vec<ServerConfig>,
    /// When a tool's circuit opens and for how long.
    pub circuit_breaker: BreakerConfig,
}

/// One MCP server: its id (the `server` in `server:tool`), how to reach it, its timeouts.
///
/// ```
/// use std::time::Duration;
/// use soorma::mcp::{ServerConfig, ServerTransport};
///
/// let s = ServerConfig::stdio("calc", "python3")
///     .args(["-m", "calc_server"])
///     .env("CALC_PRECISION", "10")
///     .call_timeout(Duration::from_secs(5));
/// assert!(matches!(s.transport, ServerTransport::Stdio { .. }));
/// assert_eq!(s.timeouts.call, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The server's id: letters, digits, `_` and `-`.
    pub id: String,
    /// How to reach it.
    pub transport: ServerTransport,
    /// How long to wait for it.
    pub timeouts: Timeouts,
    /// How many of its tool calls may run at once (`max_concurrent_calls`, default
    /// [`DEFAULT_MAX_CONCURRENT_CALLS`]); further calls wait for a slot within their timeout.
    pub max_concurrent_calls: usize,
}

/// How many tool calls one server runs at once unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 16;

/// How a server is reached.
///
/// ```
/// use soorma::mcp::{ServerConfig, ServerTransport};
///
/// let s = ServerConfig::http("web", "http://127.0.0.1:8000/mcp").header("X-Api-Key", "k");
/// let ServerTransport::Http { url, headers } = &s.transport else { unreachable!() };
/// assert_eq!((url.as_str(), headers["X-Api-Key"].as_str()), ("http://127.0.0.1:8000/mcp", "k"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerTransport {
    /// A child process speaking MCP on its stdin and stdout; its stderr goes to the log.
    Stdio {
        /// The program (looked up on `PATH` when it has no `/`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Its working directory (default: the current one).
        cwd: Option<PathBuf>,
    },
    /// MCP's streamable HTTP transport.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Extra headers sent with every request (API keys, bearer tokens).
        headers: BTreeMap<String, String>,
    },
}

/// How long to wait for a server.
///
/// ```
/// use soorma::mcp::Timeouts;
///
/// let t = Timeouts::default();
/// assert_eq!((t.connect.as_secs(), t.call.as_secs()), (30, 60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// Starting or reaching the server, including the MCP handshake (`connect_ms`).
    pub connect: Duration,
    /// One tool call, unless the call sets its own (`call_ms`).
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: DEFAULT_CONNECT_TIMEOUT,
            call: DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// The circuit breaker of every tool: after `failures` failed calls within `window` the
/// tool's circuit opens and calls fail fast with `CircuitOpen`; after `cool_down` one probe
/// call goes through, and its outcome closes or reopens the circuit.
///
/// ```
/// use std::time::Duration;
/// use soorma::mcp::BreakerConfig;
///
/// let b = BreakerConfig::new(3, Duration::from_secs(10), Duration::from_secs(5));
/// assert_eq!(b.failures, 3);
/// assert_eq!(BreakerConfig::default().failures, 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Failures within the window that open the circuit (`failures`, at least 1).
    pub failures: u32,
    /// The window the failures are counted in (`window_ms`).
    pub window: Duration,
    /// How long the circuit stays open before a probe (`cool_down_ms`).
    pub cool_down: Duration,
}

impl BreakerConfig {
    /// A breaker that opens after `failures` failures within `window`, for `cool_down`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = soorma::mcp::BreakerConfig::new(2, Duration::from_secs(1), Duration::from_millis(500));
    /// assert_eq!(b.cool_down, Duration::from_millis(500));
    /// ```
    pub fn new(failures: u32, window: Duration, cool_down: Duration) -> Self {
        Self {
            failures,
            window,
            cool_down,
        }
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self::new(5, Duration::from_secs(60), Duration::from_secs(30))
    }
}

impl McpConfig {
    /// An empty configuration; add servers with [`server`](Self::server).
    ///
    /// ```
    /// assert!(soorma::mcp::McpConfig::new().servers.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a server.
    ///
    /// ```
    /// use soorma::mcp::{McpConfig, ServerConfig};
    ///
    /// let c = McpConfig::new().server(ServerConfig::stdio("a", "mcp-a"));
    /// assert_eq!(c.servers[0].id, "a");
    /// ```
    #[must_use]
    pub fn server(mut self, server: ServerConfig) -> Self {
        self.servers.push(server);
        self
    }

    /// Sets the circuit breaker of every tool.
    ///
    /// ```
    /// use std::time::Duration;
    /// use soorma::mcp::{BreakerConfig, McpConfig};
    ///
    /// let b = BreakerConfig::new(2, Duration::from_secs(5), Duration::from_secs(1));
    /// assert_eq!(McpConfig::new().circuit_breaker(b).circuit_breaker, b);
    /// ```
    #[must_use]
    pub fn circuit_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.circuit_breaker = breaker;
        self
    }

    /// Reads and checks an `mcp.json` file.
    ///
    /// ```
    /// let err = soorma::mcp::McpConfig::load("/no/such/mcp.json").unwrap_err();
    /// assert!(err.to_string().contains("/no/such/mcp.json"));
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::one("", format!("cannot read {}: {e}", path.display())).in_file(path)
        })?;
        Self::from_json(&text).map_err(|e| e.in_file(path))
    }

    /// Parses and checks an `mcp.json` document.
    ///
    /// ```
    /// let err = soorma::mcp::McpConfig::from_json(r#"{"servers": [
    ///     {"id": "a", "stdio": {"command": ""}},
    ///     {"id": "a", "http": {"url": "ftp://x"}, "timeouts": {"call_ms": "soon"}}
    /// ]}"#).unwrap_err();
    /// let fields: Vec<&str> = err.problems.iter().map(|p| p.field.as_str()).collect();
    /// assert_eq!(fields, ["servers[1].timeouts.call_ms", "servers[0].stdio.command",
    ///                     "servers[1].http.url", "servers[1].id"]);
    /// ```
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let root: Value = serde_json::from_str(json)
            .map_err(|e| ConfigError::one("", format!("not valid JSON: {e}")))?;
        let mut p = Problems::default();
        let config = parse(&root, &mut p);
        if let Err(e) = config.validate() {
            // The problems of what did parse; a field already reported is not reported again.
            let reported: Vec<String> = p.0.iter().map(|p| p.field.clone()).collect();
            p.0.extend(e.problems.into_iter().filter(|v| {
                !reported.iter().any(|r| {
                    v.field == *r
                        || (v.field.starts_with(r.as_str())
                            && matches!(v.field.as_bytes().get(r.len()), Some(b'.' | b'[')))
                })
            }));
        }
        p.into_result(config)
    }

    /// Checks ids (present, unique, letters, digits, `_`, `-`), commands, URLs, timeouts and
    /// the breaker; configurations built in code are checked when the coordinator is made.
    ///
    /// ```
    /// use soorma::mcp::{McpConfig, ServerConfig};
    ///
    /// let c = McpConfig::new().server(ServerConfig::http("has space", "http://x/mcp"));
    /// assert_eq!(c.validate().unwrap_err().problems[0].field, "servers[0].id");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        let mut seen = BTreeMap::new();
        for (i, s) in self.servers.iter().enumerate() {
            let at = format!("servers[{i}]");
            match &s.transport {
                ServerTransport::Stdio { command, .. } => {
                    if command.trim().is_empty() {
                        p.add(format!("{at}.stdio.command"), "must name a program");
                    }
                }
                ServerTransport::Http { url, headers } => {
                    if !(url.starts_with("http://") || url.starts_with("https://"))
                        || url.len() <= "https://".len()
                    {
                        p.add(
                            format!("{at}.http.url"),
                            format!("must be an http:// or https:// URL; found `{url}`"),
                        );
                    }
                    for name in headers.keys() {
                        if name.is_empty()
                            || !name
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
                        {
                            p.add(
                                format!("{at}.http.headers"),
                                format!("`{name}` is not a valid header name"),
                            );
                        }
                    }
                }
            }
            if s.timeouts.connect.is_zero() {
                p.add(format!("{at}.timeouts.connect_ms"), "must be more than 0");
            }
            if s.timeouts.call.is_zero() {
                p.add(format!("{at}.timeouts.call_ms"), "must be more than 0");
            }
            if s.max_concurrent_calls == 0 {
                p.add(format!("{at}.max_concurrent_calls"), "must be more than 0");
            }
            if s.id.is_empty()
                || !s
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
            {
                p.add(
                    format!("{at}.id"),
                    format!(
                        "must be letters, digits, `_` or `-` (it prefixes tool names as `id:tool`); found `{}`",
                        s.id
                    ),
                );
            } else if let Some(first) = seen.insert(s.id.as_str(), i) {
                p.add(
                    format!("{at}.id"),
                    format!("`{}` is already the id of servers[{first}]", s.id),
                );
            }
        }
        let b = &self.circuit_breaker;
        if b.failures == 0 {
            p.add("circuit_breaker.failures", "must be at least 1");
        }
        if b.window.is_zero() {
            p.add("circuit_breaker.window_ms", "must be more than 0");
        }
        if b.cool_down.is_zero() {
            p.add("circuit_breaker.cool_down_ms", "must be more than 0");
        }
        p.into_result(())
    }
}

impl ServerConfig {
    /// A server started as a child process that speaks MCP over stdio.
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("everything", "mcp-server-everything").arg("stdio");
    /// assert_eq!(s.id, "everything");
    /// ```
    pub fn stdio(id: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            transport: ServerTransport::Stdio {
                command: command.into(),
                args: Vec::new(),
                env: BTreeMap::new(),
                cwd: None,
            },
            timeouts: Timeouts::default(),
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
        }
    }

    /// A server reached over MCP's streamable HTTP transport.
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::http("web", "http://127.0.0.1:3001/mcp");
    /// assert_eq!(s.id, "web");
    /// ```
    pub fn http(id: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            transport: ServerTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            timeouts: Timeouts::default(),
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
        }
    }

    /// Adds an argument (stdio servers; ignored for HTTP).
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("x", "node").arg("server.js");
    /// # let _ = s;
    /// ```
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        if let ServerTransport::Stdio { args, .. } = &mut self.transport {
            args.push(arg.into());
        }
        self
    }

    /// Adds arguments (stdio servers; ignored for HTTP).
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("x", "python3").args(["-m", "server"]);
    /// # let _ = s;
    /// ```
    #[must_use]
    pub fn args<I, S>(mut self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let ServerTransport::Stdio { args, .. } = &mut self.transport {
            args.extend(more.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of the child process (stdio servers; ignored for HTTP).
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("x", "mcp-x").env("API_KEY", "k");
    /// # let _ = s;
    /// ```
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let ServerTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the working directory of the child process (stdio servers; ignored for HTTP).
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("x", "./server").cwd("/opt/x");
    /// # let _ = s;
    /// ```
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let ServerTransport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header sent with every request (HTTP servers; ignored for stdio).
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::http("x", "https://mcp.example.com/mcp")
    ///     .header("Authorization", "Bearer t0ken");
    /// # let _ = s;
    /// ```
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let ServerTransport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// Sets the connect timeout (process start or HTTP reach, plus the MCP handshake).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let s = soorma::mcp::ServerConfig::stdio("x", "mcp-x").connect_timeout(Duration::from_secs(5));
    /// assert_eq!(s.timeouts.connect, Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Sets how many of the server's tool calls may run at once (at least 1); further calls
    /// wait for a slot within their timeout.
    ///
    /// ```
    /// let s = soorma::mcp::ServerConfig::stdio("x", "mcp-x").max_concurrent_calls(4);
    /// assert_eq!(s.max_concurrent_calls, 4);
    /// ```
    pub fn max_concurrent_calls(mut self, calls: usize) -> Self {
        self.max_concurrent_calls = calls.max(1);
        self
    }

    /// Sets the default timeout of a tool call.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let s = soorma::mcp::ServerConfig::stdio("x", "mcp-x").call_timeout(Duration::from_secs(5));
    /// assert_eq!(s.timeouts.call, Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.call = timeout;
        self
    }
}

/// A configuration that cannot be used: every problem, each with the field at fault.
///
/// ```
/// let err = soorma::mcp::McpConfig::from_json(r#"{"servers": [{"id": "x"}]}"#).unwrap_err();
/// assert_eq!(err.problems[0].field, "servers[0]");
/// assert!(err.to_string().contains("`stdio` or `http`"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ConfigError {
    /// The file, when the configuration was read from one.
    pub file: Option<PathBuf>,
    /// What is wrong, in document order.
    pub problems: Vec<ConfigProblem>,
}

/// One problem of a configuration.
///
/// ```
/// let p = soorma::mcp::ConfigProblem::new("servers[0].id", "must not be empty");
/// assert_eq!(p.to_string(), "servers[0].id: must not be empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The field's path, such as `servers[1].stdio.command` (`""`: the whole document).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigProblem {
    /// A problem of `field`.
    ///
    /// ```
    /// let p = soorma::mcp::ConfigProblem::new("", "not valid JSON");
    /// assert_eq!(p.to_string(), "not valid JSON");
    /// ```
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "invalid MCP configuration {}", file.display())?,
            None => f.write_str("invalid MCP configuration")?,
        }
        for (i, p) in self.problems.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    fn one(field: &str, message: String) -> Self {
        Self {
            file: None,
            problems: vec![ConfigProblem::new(field, message)],
        }
    }

    fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_owned());
        self
    }
}

#[derive(Default)]
struct Problems(Vec<ConfigProblem>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigProblem::new(field, message));
    }

    fn into_result<T>(self, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError {
                file: None,
                problems: self.0,
            })
        }
    }
}

/// Reads the document into a configuration, noting every type problem; what is wrong is left
/// at its default so that [`McpConfig::validate`] can still report the rest.
fn parse(root: &Value, p: &mut Problems) -> McpConfig {
    let mut config = McpConfig::new();
    let Some(root) = root.as_object() else {
        p.add("", "must be a JSON object with `servers`");
        return config;
    };
    unknown_fields(root, &["servers", "mcpServers", "circuit_breaker"], "", p);
    match (root.get("servers"), root.get("mcpServers")) {
        (Some(Value::Array(servers)), None) => {
            for (i, s) in servers.iter().enumerate() {
                config.servers.push(server(s, &format!("servers[{i}]"), p));
            }
        }
        (Some(_), None) => p.add("servers", "must be an array of servers"),
        (None, Some(Value::Object(servers))) => {
            for (id, s) in servers {
                config
                    .servers
                    .push(desktop_server(id, s, &format!("mcpServers.{id}"), p));
            }
        }
        (None, Some(_)) => p.add("mcpServers", "must be an object of servers by id"),
        (Some(_), Some(_)) => p.add("", "give `servers` or `mcpServers`, not both"),
        (None, None) => p.add("servers", "is missing: list the MCP servers to connect to"),
    }
    if let Some(b) = root.get("circuit_breaker") {
        match b.as_object() {
            Some(b) => {
                unknown_fields(
                    b,
                    &["failures", "window_ms", "cool_down_ms"],
                    "circuit_breaker",
                    p,
                );
                let c = &mut config.circuit_breaker;
                if let Some(n) = millis_or_count(b, "failures", "circuit_breaker", p) {
                    c.failures = u32::try_from(n).unwrap_or(u32::MAX);
                }
                if let Some(ms) = millis_or_count(b, "window_ms", "circuit_breaker", p) {
                    c.window = Duration::from_millis(ms);
                }
                if let Some(ms) = millis_or_count(b, "cool_down_ms", "circuit_breaker", p) {
                    c.cool_down = Duration::from_millis(ms);
                }
            }
            None => p.add("circuit_breaker", "must be an object"),
        }
    }
    config
}

fn server(v: &Value, at: &str, p: &mut Problems) -> ServerConfig {
    let mut s = ServerConfig::stdio("", "");
    let Some(o) = v.as_object() else {
        p.add(at, "must be an object with `id` and `stdio` or `http`");
        return s;
    };
    unknown_fields(
        o,
        &["id", "stdio", "http", "timeouts", "max_concurrent_calls"],
        at,
        p,
    );
    if let Some(n) = millis_or_count(o, "max_concurrent_calls", at, p) {
        s.max_concurrent_calls = usize::try_from(n).unwrap_or(usize::MAX);
    }
    match o.get("id") {
        Some(Value::String(id)) => s.id = id.clone(),
        Some(_) => p.add(format!("{at}.id"), "must be a string"),
        None => p.add(format!("{at}.id"), "is missing"),
    }
    match (o.get("stdio"), o.get("http")) {
        (Some(stdio), None) => s.transport = stdio_transport(stdio, &format!("{at}.stdio"), p),
        (None, Some(http)) => s.transport = http_transport(http, &format!("{at}.http"), p),
        (Some(_), Some(_)) => p.add(at, "give `stdio` or `http`, not both"),
        (None, None) => p.add(
            at,
            "needs `stdio` or `http`: `\"stdio\": {\"command\": ..}` or `\"http\": {\"url\": ..}`",
        ),
    }
    if let Some(t) = o.get("timeouts") {
        let tat = format!("{at}.timeouts");
        match t.as_object() {
            Some(t) => {
                unknown_fields(t, &["connect_ms", "call_ms"], &tat, p);
                if let Some(ms) = millis_or_count(t, "connect_ms", &tat, p) {
                    s.timeouts.connect = Duration::from_millis(ms);
                }
                if let Some(ms) = millis_or_count(t, "call_ms", &tat, p) {
                    s.timeouts.call = Duration::from_millis(ms);
                }
            }
            None => p.add(tat, "must be an object"),
        }
    }
    s
}

/// A server of the desktop clients' `mcpServers` map: `command`/`args`/`env`/`cwd` or `url`.
fn desktop_server(id: &str, v: &Value, at: &str, p: &mut Problems) -> ServerConfig {
    let mut s = ServerConfig::stdio(id, "");
    let Some(o) = v.as_object() else {
        p.add(at, "must be an object with `command` or `url`");
        return s;
    };
    if o.contains_key("url") {
        s.transport = http_transport(v, at, p);
    } else if o.contains_key("command") {
        s.transport = stdio_transport(v, at, p);
    } else {
        p.add(at, "needs `command` (stdio) or `url` (streamable HTTP)");
    }
    s
}

fn stdio_transport(v: &Value, at: &str, p: &mut Problems) -> ServerTransport {
    let mut command = String::new();
    let mut args = Vec::new();
    let mut env = BTreeMap::new();
    let mut cwd = None;
    let Some(o) = v.as_object() else {
        p.add(at, "must be an object with `command`");
        return ServerTransport::Stdio {
            command,
            args,
            env,
            cwd,
        };
    };
    unknown_fields(o, &["command", "args", "env", "cwd", "type"], at, p);
    match o.get("command") {
        Some(Value::String(c)) => command = c.clone(),
        Some(_) => p.add(format!("{at}.command"), "must be a string"),
        None => p.add(format!("{at}.command"), "is missing"),
    }
    if let Some(a) = o.get("args") {
        match a.as_array() {
            Some(a) => {
                for (i, arg) in a.iter().enumerate() {
                    match arg.as_str() {
                        Some(arg) => args.push(arg.to_owned()),
                        None => p.add(format!("{at}.args[{i}]"), "must be a string"),
                    }
                }
            }
            None => p.add(format!("{at}.args"), "must be an array of strings"),
        }
    }
    if let Some(e) = o.get("env") {
        env = string_map(e, &format!("{at}.env"), p);
    }
    if let Some(c) = o.get("cwd") {
        match c.as_str() {
            Some(c) => cwd = Some(PathBuf::from(c)),
            None => p.add(format!("{at}.cwd"), "must be a string"),
        }
    }
    ServerTransport::Stdio {
        command,
        args,
        env,
        cwd,
    }
}

fn http_transport(v: &Value, at: &str, p: &mut Problems) -> ServerTransport {
    let mut url = String::new();
    let mut headers = BTreeMap::new();
    let Some(o) = v.as_object() else {
        p.add(at, "must be an object with `url`");
        return ServerTransport::Http { url, headers };
    };
    unknown_fields(o, &["url", "headers", "type"], at, p);
    match o.get("url") {
        Some(Value::String(u)) => url = u.clone(),
        Some(_) => p.add(format!("{at}.url"), "must be a string"),
        None => p.add(format!("{at}.url"), "is missing"),
    }
    if let Some(h) = o.get("headers") {
        headers = string_map(h, &format!("{at}.headers"), p);
    }
    ServerTransport::Http { url, headers }
}

fn string_map(v: &Value, at: &str, p: &mut Problems) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match v.as_object() {
        Some(o) => {
            for (k, v) in o {
                match v.as_str() {
                    Some(v) => {
                        out.insert(k.clone(), v.to_owned());
                    }
                    None => p.add(format!("{at}.{k}"), "must be a string"),
                }
            }
        }
        None => p.add(at, "must be an object of strings"),
    }
    out
}

fn millis_or_count(o: &Map<String, Value>, key: &str, at: &str, p: &mut Problems) -> Option<u64> {
    let v = o.get(key)?;
    match v.as_u64() {
        Some(n) => Some(n),
        None => {
            p.add(
                format!("{at}.{key}"),
                format!("must be a whole number; found {v}"),
            );
            None
        }
    }
}

fn unknown_fields(o: &Map<String, Value>, known: &[&str], at: &str, p: &mut Problems) {
    for key in o.keys() {
        if !known.contains(&key.as_str()) {
            let field = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            p.add(
                field,
                format!("unknown field; expected one of {}", known.join(", ")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms_and_timeouts() {
        let c = McpConfig::from_json(
            r#"{"servers": [{"id": "a", "stdio": {"command": "x", "args": ["1"], "env": {"K": "V"}, "cwd": "/tmp"},
                              "timeouts": {"connect_ms": 100, "call_ms": 200}, "max_concurrent_calls": 3}],
                "circuit_breaker": {"failures": 2, "window_ms": 1000, "cool_down_ms": 50}}"#,
        )
        .unwrap();
        let s = &c.servers[0];
        assert_eq!(
            s,
            &ServerConfig::stdio("a", "x")
                .arg("1")
                .env("K", "V")
                .cwd("/tmp")
                .connect_timeout(Duration::from_millis(100))
                .call_timeout(Duration::from_millis(200))
                .max_concurrent_calls(3)
        );
        assert_eq!(
            c.circuit_breaker,
            BreakerConfig::new(2, Duration::from_secs(1), Duration::from_millis(50))
        );
        let d = McpConfig::from_json(
            r#"{"mcpServers": {"web": {"url": "https://x.example/mcp", "headers": {"Authorization": "t"}},
                                "local": {"command": "mcp-local"}}}"#,
        )
        .unwrap();
        assert_eq!(d.servers.len(), 2);
        assert!(
            matches!(&d.servers[1].transport, ServerTransport::Http { url, .. } if url == "https://x.example/mcp")
        );
    }

    #[test]
    fn reports_every_problem_with_its_field() {
        let err = McpConfig::from_json(
            r#"{"servers": [{"id": "", "stdio": {"command": 1, "args": [2], "env": {"A": 3}}, "extra": true},
                            {"id": "b:c", "http": {"url": "localhost"}},
                            {"id": "d", "stdio": {"command": "x"}, "http": {"url": "http://x"}}],
                "circuit_breaker": {"failures": 0}}"#,
        )
        .unwrap_err();
        let fields: Vec<&str> = err.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "servers[0].extra",
                "servers[0].stdio.command",
                "servers[0].stdio.args[0]",
                "servers[0].stdio.env.A",
                "servers[2]",
                "servers[0].id",
                "servers[1].http.url",
                "servers[1].id",
                "circuit_breaker.failures",
            ]
        );
        assert!(err.to_string().starts_with("invalid MCP configuration: "));
    }

    #[test]
    fn rejects_what_is_not_a_configuration() {
        assert_eq!(
            McpConfig::from_json("[]").unwrap_err().problems[0].message,
            "must be a JSON object with `servers`"
        );
        assert!(
            McpConfig::from_json("{")
                .unwrap_err()
                .to_string()
                .contains("not valid JSON")
        );
        assert_eq!(
            McpConfig::from_json("{}").unwrap_err().problems[0].field,
            "servers"
        );
    }
}
