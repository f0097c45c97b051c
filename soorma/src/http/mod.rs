//! The HTTP layer the A2A gateway and the MCP server share (features `gateway`, `mcp`): the
//! connection loop (header-read, keep-alive and write timeouts, a connection limit, graceful
//! stop within a deadline) and
//! the checks every request passes first ([`HttpConfig`]: allowed `Host`s, `application/json`
//! bodies), the server's admission (its credentials, checked on the headers alone), then the
//! body's size, read time and the bytes all bodies being read may hold.
//!
//! ```
//! use std::time::Duration;
//! use soorma::http::HttpConfig;
//!
//! let http = HttpConfig::default()
//!     .allowed_host("agents.example.com")
//!     .header_timeout(Duration::from_secs(5))
//!     .max_body_bytes(256 * 1024)
//!     .max_connections(200);
//! # let _ = http;
//! ```

mod guard;
mod write_progress;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

pub(crate) use guard::ErrorStyle;
use guard::{Guard, HostPolicy};

/// Limits and checks of an HTTP server (the A2A gateway's, the MCP server's).
///
/// Defaults:
/// - **`Host`**: when the server is bound to a loopback address, only loopback hosts
///   (`localhost`, `127.0.0.1`, `[::1]`, any port) are accepted, so a web page cannot reach it
///   through DNS rebinding; add the names clients use with [`allowed_host`](Self::allowed_host).
///   Once a host is added, only the hosts added are accepted, whatever the bind address. A server
///   bound off loopback with no allowed host accepts any `Host`.
/// - **`Content-Type`**: a `POST` must carry `application/json` (HTTP 415 otherwise), so a web
///   page cannot send one with a plain HTML form or a "simple" cross-site request.
/// - **Headers**: a client has [`header_timeout`](Self::header_timeout) (10 s) to send a
///   request's headers, counted from when the connection opens or its previous response ends;
///   trickling clients and idle keep-alive connections are closed after it.
/// - **Body**: at most [`max_body_bytes`](Self::max_body_bytes) (4 MiB; HTTP 413, then the
///   connection is closed), read within [`body_timeout`](Self::body_timeout) (30 s; HTTP 408),
///   and only on a `POST` once the request's credentials (when the server wants some) are
///   checked, so a client without them makes the server hold nothing. The bodies held take
///   at most [`max_buffered_body_bytes`](Self::max_buffered_body_bytes) (64 MiB) in all; a
///   body over that is refused (HTTP 503, `Retry-After`) instead of waiting.
/// - **Connections**: at most [`max_connections`](Self::max_connections) (512) open at once;
///   further clients wait in the listen backlog until one closes. A connection whose client
///   stops reading (a response, or a stream, waits to be written) is closed when fewer than
///   [`min_write_bytes`](Self::min_write_bytes) (8 KiB) go out within a
///   [`write_timeout`](Self::write_timeout) (30 s), so neither a client that stops reading nor
///   one reading a trickle can hold its slot.
/// - **Stop**: open requests and streams get [`stop_timeout`](Self::stop_timeout) (10 s) to
///   finish; connections still open then are closed.
///
/// ```
/// use soorma::http::HttpConfig;
/// let http = HttpConfig::default().allowed_host("mcp.example.com:8443");
/// assert_eq!(http.allowed_hosts(), ["mcp.example.com:8443"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpConfig {
    allowed_hosts: Vec<String>,
    header_timeout: Duration,
    body_timeout: Duration,
    max_body_bytes: usize,
    max_buffered_body_bytes: usize,
    max_connections: usize,
    write_timeout: Duration,
    min_write_bytes: usize,
    stop_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 4 * 1024 * 1024,
            max_buffered_body_bytes: 64 * 1024 * 1024,
            max_connections: 512,
            write_timeout: Duration::from_secs(30),
            min_write_bytes: 8 * 1024,
            stop_timeout: Duration::from_secs(10),
        }
    }
}

impl HttpConfig {
    /// Accepts requests whose `Host` is `host`: a name or address (any port), or
    /// `name:port` (that port only); `[::1]` for IPv6. Compared without regard to case.
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().allowed_host("localhost").allowed_host("agents.internal");
    /// assert_eq!(http.allowed_hosts().len(), 2);
    /// ```
    pub fn allowed_host(mut self, host: impl Into<String>) -> Self {
        let host = host.into().trim().to_ascii_lowercase();
        if !host.is_empty() && !self.allowed_hosts.contains(&host) {
            self.allowed_hosts.push(host);
        }
        self
    }

    /// The hosts added with [`allowed_host`](Self::allowed_host).
    ///
    /// ```
    /// assert!(soorma::http::HttpConfig::default().allowed_hosts().is_empty());
    /// ```
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }

    /// How long a client may take to send a request's headers, counted from when the
    /// connection opens or its previous response ends (default 10 s). Also closes keep-alive
    /// connections idle this long.
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().header_timeout(std::time::Duration::from_secs(5));
    /// # let _ = http;
    /// ```
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long a client may take to send a request's body once its headers are in
    /// (default 30 s; HTTP 408 after it).
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().body_timeout(std::time::Duration::from_secs(10));
    /// # let _ = http;
    /// ```
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// The largest request body accepted, in bytes (default 4 MiB, at most 4 GiB; HTTP 413
    /// and the connection closed above it).
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().max_body_bytes(64 * 1024);
    /// # let _ = http;
    /// ```
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        // A body is counted against the byte budget in one semaphore permit (`u32`).
        self.max_body_bytes = bytes.min(u32::MAX as usize);
        self
    }

    /// How many bytes the request bodies held at once may take in all (default 64 MiB, at
    /// least [`max_body_bytes`](Self::max_body_bytes)): counted as a body's buffer grows,
    /// given back when the server's code drops the body (the gateway: once the call is
    /// parsed; the MCP server: once read, as its transport copies it). A body that would go
    /// over it is refused with HTTP 503 and `Retry-After`, and its connection closed.
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().max_buffered_body_bytes(16 << 20);
    /// # let _ = http;
    /// ```
    pub fn max_buffered_body_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered_body_bytes = bytes.min(Semaphore::MAX_PERMITS);
        self
    }

    /// How many connections may be open at once (default 512, at least 1); further clients
    /// wait in the listen backlog. Keep it below the process's file-descriptor limit.
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().max_connections(100);
    /// # let _ = http;
    /// ```
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// How long a response (or a stream) may wait to be written because its client does not
    /// read, before the connection is closed (default 30 s of waiting in all, idle time not
    /// counted; counted again once [`min_write_bytes`](Self::min_write_bytes) have gone out).
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().write_timeout(std::time::Duration::from_secs(10));
    /// # let _ = http;
    /// ```
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How many bytes of output a client waited on must take within each
    /// [`write_timeout`](Self::write_timeout) (default 8 KiB, about 270 bytes/s at the default
    /// timeout): a client reading a trickle, just often enough for each write to make some
    /// progress, is closed like one that stops reading.
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().min_write_bytes(64 * 1024);
    /// # let _ = http;
    /// ```
    pub fn min_write_bytes(mut self, bytes: usize) -> Self {
        self.min_write_bytes = bytes;
        self
    }

    /// How long stopping the server waits for open requests and streams to finish before it
    /// closes their connections (default 10 s).
    ///
    /// ```
    /// let http = soorma::http::HttpConfig::default().stop_timeout(std::time::Duration::from_secs(2));
    /// # let _ = http;
    /// ```
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// The largest request body accepted ([`max_body_bytes`](Self::max_body_bytes)).
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn body_limit(&self) -> usize {
        self.max_body_bytes
    }

    /// The `Host` policy of a server bound to `addr`.
    fn host_policy(&self, addr: SocketAddr) -> HostPolicy {
        if !self.allowed_hosts.is_empty() {
            HostPolicy::List(self.allowed_hosts.clone())
        } else if addr.ip().is_loopback() {
            HostPolicy::Loopback
        } else {
            HostPolicy::Any
        }
    }
}

/// A server running in the background until [`stop`](Self::stop).
#[derive(Debug)]
pub(crate) struct HttpServer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// A server's admission: wraps its routes in the checks of a request's credentials, which see
/// the headers only (the body is read after them).
pub(crate) type Admission = Box<dyn FnOnce(axum::Router) -> axum::Router + Send>;

impl HttpServer {
    /// Serves `routes` on `listener`: each request passes `config`'s header checks, then
    /// `admission`, then has its body read within `config`'s limits (errors in `style`). When
    /// stopped, `on_stop` runs first (to end long-lived streams), then the server stops taking
    /// connections and waits for open requests.
    pub(crate) fn spawn(
        listener: tokio::net::TcpListener,
        routes: axum::Router,
        admission: Admission,
        config: &HttpConfig,
        style: ErrorStyle,
        what: &'static str,
        on_stop: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let guard = Arc::new(Guard {
            hosts: config.host_policy(addr),
            max_body_bytes: config.max_body_bytes,
            body_timeout: config.body_timeout,
            buffered: Arc::new(Semaphore::new(
                config.max_buffered_body_bytes.max(config.max_body_bytes),
            )),
            style,
        });
        // The guard enforces the body limit; axum's own (2 MB on `Bytes`) would contradict it.
        // Layers run outside in: the header checks, the admission, the body.
        let routes = routes
            .layer(axum::extract::DefaultBodyLimit::disable())
            .layer(axum::middleware::from_fn_with_state(
                guard.clone(),
                guard::read_body,
            ));
        let app = admission(routes).layer(axum::middleware::from_fn_with_state(
            guard,
            guard::check_headers,
        ));
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_timeout)
            .keep_alive(true);
        let limits = ConnectionLimits {
            slots: Arc::new(Semaphore::new(config.max_connections)),
            write_timeout: config.write_timeout,
            min_write_bytes: config.min_write_bytes,
            stop_timeout: config.stop_timeout,
        };
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            listener, app, http1, limits, stopped, what, on_stop,
        ));
        Ok(Self { stop, task })
    }

    /// Stops the server and waits until it has.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// What bounds a server's connections: their number, the wait for a client to read, the wait
/// for them to finish at a stop.
struct ConnectionLimits {
    slots: Arc<Semaphore>,
    write_timeout: Duration,
    min_write_bytes: usize,
    stop_timeout: Duration,
}

/// Takes connections (one slot each) until stopped, then waits for the open ones to finish
/// (closing those still open after the stop timeout).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    http1: hyper::server::conn::http1::Builder,
    limits: ConnectionLimits,
    mut stopped: watch::Receiver<bool>,
    what: &'static str,
    on_stop: impl FnOnce() + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    // At most one task per slot runs; finished ones are reaped before each accept.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = limits.slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
            () = until_stopped(&mut stopped) => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = until_stopped(&mut stopped) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "the {what} could not accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // Output that does not move fast enough fails the connection: a client that stops
        // reading, or reads a trickle, does not keep its slot.
        let io = write_progress::WriteProgress::new(
            stream,
            limits.write_timeout,
            limits.min_write_bytes,
        );
        let connection =
            http1.serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %peer, "HTTP connection closed with an error");
            }
            drop(slot);
        });
    }
    on_stop();
    drop(listener);
    if tokio::time::timeout(limits.stop_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "the {what} stopped with connections still open after {:?}; closing them",
            limits.stop_timeout
        );
    }
    connections.shutdown().await;
}
