//! One live MCP session with a server: a child process over stdio (its stderr drained into the
//! log) or a streamable HTTP session.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use super::{McpError, ServerConfig, ServerTransport};

/// soorma's side of a session: identifies itself and notes tool-list changes.
pub(crate) struct SessionHandler {
    server: String,
    tools_changed: Arc<AtomicBool>,
}

impl ClientHandler for SessionHandler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities = ClientCapabilities::default();
        info.client_info = Implementation::new("soorma", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        tracing::debug!(server = %self.server, "MCP server's tool list changed");
        self.tools_changed.store(true, Ordering::Release);
    }
}

/// A connected server.
pub(crate) struct Connection {
    /// Sends requests.
    pub(crate) peer: Peer<RoleClient>,
    /// The session; closed on shutdown.
    service: tokio::sync::Mutex<RunningService<RoleClient, SessionHandler>>,
    /// The child's process id (stdio servers).
    pub(crate) pid: Option<u32>,
    /// The child process (stdio servers).
    child: Option<ChildState>,
    /// Set when an HTTP server's reply passed the size limit (HTTP servers).
    http_oversized: Option<Arc<AtomicBool>>,
    /// Set when the server says its tool list changed.
    pub(crate) tools_changed: Arc<AtomicBool>,
}

impl Connection {
    /// Starts or reaches the server and performs the MCP handshake, within the connect timeout.
    pub(crate) async fn open(config: &ServerConfig) -> Result<Self, McpError> {
        let fail = |message: String| McpError::Connect {
            server: config.id.clone(),
            message,
        };
        let tools_changed = Arc::new(AtomicBool::new(false));
        let handler = SessionHandler {
            server: config.id.clone(),
            tools_changed: tools_changed.clone(),
        };
        // The stdio server, once started: its process group is killed at once (not by a task
        // that may never run when the caller's runtime ends) when the handshake fails or times
        // out.
        let started = std::sync::OnceLock::<ChildState>::new();
        let connect = async {
            match &config.transport {
                ServerTransport::Stdio {
                    command,
                    args,
                    env,
                    cwd,
                } => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).envs(env);
                    if let Some(dir) = cwd {
                        cmd.current_dir(dir);
                    }
                    cmd.stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped());
                    #[allow(unused_mut)]
                    let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
                    // Its own process group: stopping the server stops what it started.
                    #[cfg(unix)]
                    wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
                    let mut process = wrap
                        .spawn()
                        .map_err(|e| fail(format!("cannot start `{command}`: {e}")))?;
                    let pid = process.id();
                    let (Some(stdin), Some(stdout)) =
                        (process.stdin().take(), process.stdout().take())
                    else {
                        return Err(fail(format!("`{command}` has no stdin or stdout")));
                    };
                    let stderr = process.stderr().take();
                    // Closed at once when there is no stderr to read.
                    let (stderr_read, stderr_closed) =
                        tokio::sync::watch::channel(stderr.is_none());
                    let child = ChildState {
                        process: Arc::new(tokio::sync::Mutex::new(ChildGuard {
                            process: Some(process),
                            pid,
                            exited: false,
                        })),
                        last_stderr: Arc::default(),
                        stderr_closed,
                        oversized: Arc::default(),
                    };
                    let _ = started.set(child.clone());
                    if let Some(stderr) = stderr {
                        tokio::spawn(drain_stderr(
                            config.id.clone(),
                            stderr,
                            child.last_stderr.clone(),
                            stderr_read,
                        ));
                    }
                    let stdout = BoundedLines {
                        inner: stdout,
                        run: 0,
                        oversized: child.oversized.clone(),
                    };
                    let service = match handler.serve((stdout, stdin)).await {
                        Ok(service) => service,
                        Err(e) => {
                            let why = child.why_closed().await;
                            return Err(fail(match why {
                                Some(why) => format!("`{command}` {why} before the MCP handshake"),
                                None => format!("MCP handshake failed: {}", plain_init(&e)),
                            }));
                        }
                    };
                    Ok::<_, McpError>((service, pid, Some(child), None))
                }
                ServerTransport::Http { url, headers } => {
                    let mut default_headers = reqwest::header::HeaderMap::new();
                    for (name, value) in headers {
                        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                            .map_err(|e| fail(format!("header `{name}`: {e}")))?;
                        let value = reqwest::header::HeaderValue::from_str(value)
                            .map_err(|e| fail(format!("header `{name}`: {e}")))?;
                        default_headers.insert(name, value);
                    }
                    let tls =
                        crate::tls::client_config(url.starts_with("https://")).map_err(&fail)?;
                    let http = reqwest::Client::builder()
                        .tls_backend_preconfigured(tls)
                        .default_headers(default_headers)
                        .build()
                        .map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
                    let oversized = Arc::new(AtomicBool::new(false));
                    let http = WatchedHttp {
                        inner: http,
                        oversized: oversized.clone(),
                    };
                    let transport = StreamableHttpClientTransport::with_client(
                        http,
                        StreamableHttpClientTransportConfig::with_uri(url.as_str()),
                    );
                    let service = handler.serve(transport).await.map_err(|e| {
                        fail(format!(
                            "MCP handshake with {url} failed: {}",
                            plain_init(&e)
                        ))
                    })?;
                    Ok((service, None, None, Some(oversized)))
                }
            }
        };
        let connected = tokio::time::timeout(config.timeouts.connect, connect)
            .await
            .map_err(|_| {
                fail(format!(
                    "no MCP handshake within {:?}",
                    config.timeouts.connect
                ))
            })
            .and_then(|connected| connected);
        let (service, pid, child, http_oversized) = match connected {
            Ok(connected) => connected,
            Err(e) => {
                if let Some(child) = started.get() {
                    child.process.lock().await.kill(&config.id);
                }
                return Err(e);
            }
        };
        let peer = service.peer_info();
        tracing::info!(
            server = %config.id,
            pid,
            peer = peer.as_ref().and_then(|p| p.server_info.as_ref()).map(|i| i.name.as_str()).unwrap_or("?"),
            "connected to MCP server"
        );
        Ok(Self {
            peer: service.peer().clone(),
            service: tokio::sync::Mutex::new(service),
            pid,
            child,
            http_oversized,
            tools_changed,
        })
    }

    /// Whether the session has ended (the process exited, the transport closed).
    pub(crate) fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    /// Ends the session: a stdio server's stdin is closed and the process waited for (then
    /// SIGTERM, then SIGKILL, as MCP's stdio shutdown says); an HTTP session is deleted.
    pub(crate) async fn close(&self, server: &str) {
        let mut service = self.service.lock().await;
        match service.close_with_timeout(Duration::from_secs(10)).await {
            Ok(Some(reason)) => tracing::debug!(server, ?reason, "MCP session closed"),
            Ok(None) => tracing::warn!(server, "the MCP session did not close within 10 s"),
            Err(e) => tracing::warn!(server, error = %e, "closing the MCP session failed"),
        }
        if let Some(child) = &self.child {
            child.process.lock().await.shutdown(server).await;
        }
    }

    /// Why the session ended or a request failed, in plain words (no rmcp type names): the
    /// process's exit status and last stderr line, an oversized message, a closed connection.
    pub(crate) async fn describe(&self, e: &ServiceError) -> String {
        if let Some(child) = &self.child
            && let Some(why) = child.why_closed().await
        {
            return format!("the server {why}");
        }
        if self
            .http_oversized
            .as_ref()
            .is_some_and(|o| o.load(Ordering::Acquire))
        {
            return format!("the server {}", oversized());
        }
        plain(e)
    }
}

/// An rmcp service error in plain words.
pub(crate) fn plain(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(e) => format!("{} (code {})", e.message, e.code.0),
        ServiceError::TransportClosed => "the connection closed".into(),
        ServiceError::TransportSend(e) => format!("the transport failed: {}", e.error),
        ServiceError::Timeout { timeout } => format!("no answer within {timeout:?}"),
        ServiceError::Cancelled { reason } => match reason {
            Some(reason) => format!("cancelled: {reason}"),
            None => "cancelled".into(),
        },
        ServiceError::UnexpectedResponse => {
            "the server answered with the wrong kind of result".into()
        }
        other => other.to_string(),
    }
}

/// An rmcp handshake error in plain words.
fn plain_init(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::ConnectionClosed(_) => "the server closed the connection".into(),
        E::TransportError { error, .. } => format!("the transport failed: {}", error.error),
        E::JsonRpcError(e) => format!("{} (code {})", e.message, e.code.0),
        other => other.to_string(),
    }
}

/// The largest message read from a server: rmcp's own cap (over stdio it drops longer lines
/// and the call then looks unanswered, over HTTP it ends the session without a reason; here
/// the connection ends with this reason instead).
pub(crate) const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Why a session ended whose server sent a message over [`MAX_MESSAGE`].
fn oversized() -> String {
    format!(
        "sent a message larger than {} MiB (the limit); the connection was closed",
        MAX_MESSAGE / (1024 * 1024)
    )
}

/// A stdio server's process and what it said on the way out.
#[derive(Clone)]
struct ChildState {
    process: Arc<tokio::sync::Mutex<ChildGuard>>,
    last_stderr: Arc<Mutex<String>>,
    /// Whether its stderr was read to the end (its last line is in `last_stderr`).
    stderr_closed: tokio::sync::watch::Receiver<bool>,
    oversized: Arc<AtomicBool>,
}

impl ChildState {
    /// Why the connection ended, when the server's side says: a message over the limit, or
    /// the process's exit (waited for up to 500 ms, as its stdout may close first) with its
    /// last stderr line (read to the end first, for up to 500 ms: the exit can be seen before
    /// the last line is read).
    async fn why_closed(&self) -> Option<String> {
        if self.oversized.load(Ordering::Acquire) {
            return Some(oversized());
        }
        let status = self
            .process
            .lock()
            .await
            .exit_status(Duration::from_millis(500))
            .await?;
        let mut closed = self.stderr_closed.clone();
        // (A child of the server may hold the pipe open: the wait is bounded.)
        let _ = tokio::time::timeout(Duration::from_millis(500), closed.wait_for(|c| *c)).await;
        let last = self
            .last_stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        Some(if last.is_empty() {
            format!("exited ({status})")
        } else {
            format!("exited ({status}); its last stderr line: {last}")
        })
    }
}

/// The child process; its process group is killed when dropped still running.
struct ChildGuard {
    process: Option<Box<dyn process_wrap::tokio::ChildWrapper>>,
    pid: Option<u32>,
    /// Whether its exit was seen (reaped): its pid may then belong to another process.
    exited: bool,
}

impl ChildGuard {
    /// The exit status, waiting up to `wait` for it.
    async fn exit_status(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let process = self.process.as_mut()?;
        match tokio::time::timeout(wait, process.wait()).await {
            Ok(Ok(status)) => {
                self.exited = true;
                Some(status)
            }
            _ => None,
        }
    }

    /// Kills the process group at once (not by a task that may never run when the caller's
    /// runtime ends).
    fn kill(&mut self, server: &str) {
        // Not reaped yet, so the pid (the group's id) is still this process's.
        if let Some(pid) = self.pid
            && !self.exited
        {
            kill_group(server, pid);
        }
    }

    /// MCP's stdio shutdown once stdin is closed: wait, SIGTERM, wait, SIGKILL (3 s each).
    async fn shutdown(&mut self, server: &str) {
        const WAIT: Duration = Duration::from_secs(3);
        if self.exit_status(WAIT).await.is_some() {
            return;
        }
        #[cfg(unix)]
        if let Some(process) = &self.process
            && process
                .signal(nix::sys::signal::Signal::SIGTERM as i32)
                .is_ok()
            && self.exit_status(WAIT).await.is_some()
        {
            return;
        }
        self.kill(server);
        let _ = self.exit_status(WAIT).await;
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill("(dropped)");
    }
}

/// A stdio server's stdout that fails (ending the session) once a line passes
/// [`MAX_MESSAGE`], noting why.
struct BoundedLines<R> {
    inner: R,
    /// Bytes since the last newline.
    run: usize,
    oversized: Arc<AtomicBool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let new = &buf.filled()[before..];
        this.run = match new.iter().rposition(|b| *b == b'\n') {
            Some(at) => new.len() - at - 1,
            None => this.run + new.len(),
        };
        if this.run > MAX_MESSAGE {
            this.oversized.store(true, Ordering::Release);
            return Poll::Ready(Err(std::io::Error::other("message over the size limit")));
        }
        polled
    }
}

/// Kills the process group `pid` leads (a stdio server and what it started).
fn kill_group(server: &str, pid: u32) {
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        let Ok(pid) = i32::try_from(pid) else { return };
        match killpg(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) => tracing::debug!(server, pid, "killed the MCP server's process group"),
            Err(e) => {
                tracing::debug!(server, pid, error = %e, "could not kill the MCP server's process group")
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (server, pid); // the child is killed when its handle drops
}

/// The longest stderr line logged; the rest of a longer line is dropped (and counted).
const STDERR_LINE: usize = 4096;

/// Splits a server's stderr into lines of at most [`STDERR_LINE`] bytes, holding no more than
/// that whatever the server writes.
#[derive(Default)]
struct StderrLines {
    line: Vec<u8>,
    /// Bytes of the current line dropped beyond the cap.
    dropped: usize,
}

impl StderrLines {
    /// Takes `chunk`; calls `line` for each complete line (its text and the bytes cut off it).
    fn push(&mut self, mut chunk: &[u8], mut line: impl FnMut(&str, usize)) {
        while !chunk.is_empty() {
            let end = chunk.iter().position(|b| *b == b'\n');
            let part = &chunk[..end.unwrap_or(chunk.len())];
            let room = STDERR_LINE - self.line.len();
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            self.dropped += part.len().saturating_sub(room);
            match end {
                Some(at) => {
                    self.flush(&mut line);
                    chunk = &chunk[at + 1..];
                }
                None => break,
            }
        }
    }

    /// Ends the current line (at a newline or the end of the stream).
    fn flush(&mut self, line: &mut impl FnMut(&str, usize)) {
        if !self.line.is_empty() || self.dropped > 0 {
            let text = String::from_utf8_lossy(&self.line);
            line(text.trim_end_matches('\r'), self.dropped);
        }
        self.line.clear();
        self.dropped = 0;
    }

    /// Bytes held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.line.capacity()
    }
}

/// Logs a stdio server's stderr line by line until it closes, so the pipe never fills up; reads
/// in fixed chunks and keeps at most [`STDERR_LINE`] bytes of a line. Says when it is done
/// through `closed`.
async fn drain_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    last: Arc<Mutex<String>>,
    closed: tokio::sync::watch::Sender<bool>,
) {
    let mut lines = StderrLines::default();
    let mut chunk = vec![0u8; 8192];
    let log = |text: &str, dropped: usize| {
        if !text.trim().is_empty() {
            let mut last = last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            last.clear();
            last.push_str(text.trim());
        }
        if dropped > 0 {
            tracing::debug!(server = %server, dropped, "{text} [line cut]");
        } else {
            tracing::debug!(server = %server, "{text}");
        }
    };
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => lines.push(&chunk[..n], log),
            Err(e) => {
                tracing::debug!(server = %server, error = %e, "cannot read the MCP server's stderr");
                break;
            }
        }
    }
    lines.flush(&mut { log });
    closed.send_replace(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_errors_are_plain_words() {
        let transport = rmcp::transport::DynamicTransportError::from_parts(
            "rmcp::transport::child_process::TokioChildProcess",
            std::any::TypeId::of::<()>(),
            Box::new(std::io::Error::other("broken pipe")),
        );
        let cases = [
            (
                ServiceError::TransportSend(transport),
                "the transport failed: broken pipe",
            ),
            (ServiceError::TransportClosed, "the connection closed"),
            (
                ServiceError::Timeout {
                    timeout: Duration::from_secs(2),
                },
                "no answer within 2s",
            ),
        ];
        for (e, expected) in cases {
            assert_eq!(plain(&e), expected);
        }
    }

    #[test]
    fn stderr_lines_are_bounded() {
        let mut lines = StderrLines::default();
        let mut seen = Vec::new();
        lines.push(b"one\ntw", |t, d| seen.push((t.to_owned(), d)));
        lines.push(b"o\r\n", |t, d| seen.push((t.to_owned(), d)));
        assert_eq!(seen, [("one".to_owned(), 0), ("two".to_owned(), 0)]);
        // 10 MB without a newline: never more than the cap held, the excess counted.
        seen.clear();
        for _ in 0..1280 {
            lines.push(&[b'x'; 8192], |t, d| seen.push((t.to_owned(), d)));
            assert!(lines.held() <= STDERR_LINE, "{}", lines.held());
        }
        lines.push(b"\nend\n", |t, d| seen.push((t.len().to_string(), d)));
        assert_eq!(
            seen,
            [
                (STDERR_LINE.to_string(), 1280 * 8192 - STDERR_LINE),
                ("3".to_owned(), 0)
            ]
        );
    }
}

/// rmcp's HTTP client (reqwest), watched for replies over its size limits: rmcp ends the
/// session when an SSE event passes 16 MiB or a JSON body does, without saying why; this
/// notes it, so the session's end is reported as an oversized message.
#[derive(Clone)]
struct WatchedHttp {
    inner: reqwest::Client,
    oversized: Arc<AtomicBool>,
}

mod watched_http {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use futures_util::StreamExt;
    use reqwest::header::{HeaderName, HeaderValue};
    use rmcp::model::ClientJsonRpcMessage;
    use rmcp::transport::common::client_side_sse::BoxedSseResponse;
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    };

    use super::WatchedHttp;

    type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;

    impl WatchedHttp {
        fn note<T>(&self, result: &HttpResult<T>) {
            if let Err(StreamableHttpError::ResponseBodyTooLarge { .. }) = result {
                self.oversized.store(true, Ordering::Release);
            }
        }

        /// Notes an SSE event over the limit (rmcp's error says "exceeded the maximum size").
        fn watch(&self, stream: BoxedSseResponse) -> BoxedSseResponse {
            let oversized = self.oversized.clone();
            stream
                .inspect(move |item| {
                    if let Err(e) = item
                        && std::error::Error::source(e)
                            .map_or_else(|| e.to_string(), ToString::to_string)
                            .contains("exceeded the maximum size")
                    {
                        oversized.store(true, Ordering::Release);
                    }
                })
                .boxed()
        }

        fn watch_post(
            &self,
            result: HttpResult<StreamableHttpPostResponse>,
        ) -> HttpResult<StreamableHttpPostResponse> {
            self.note(&result);
            match result {
                Ok(StreamableHttpPostResponse::Sse(stream, session)) => {
                    Ok(StreamableHttpPostResponse::Sse(self.watch(stream), session))
                }
                other => other,
            }
        }
    }

    impl StreamableHttpClient for WatchedHttp {
        type Error = reqwest::Error;

        async fn post_message(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> HttpResult<StreamableHttpPostResponse> {
            let result = self
                .inner
                .post_message(uri, message, session_id, auth_header, custom_headers)
                .await;
            self.watch_post(result)
        }

        async fn post_message_with_max_sse_event_size(
            &self,
            uri: Arc<str>,
            message: ClientJsonRpcMessage,
            session_id: Option<Arc<str>>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> HttpResult<StreamableHttpPostResponse> {
            let result = self
                .inner
                .post_message_with_max_sse_event_size(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await;
            self.watch_post(result)
        }

        async fn delete_session(
            &self,
            uri: Arc<str>,
            session_id: Arc<str>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> HttpResult<()> {
            self.inner
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await
        }

        async fn get_stream(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
        ) -> HttpResult<BoxedSseResponse> {
            let result = self
                .inner
                .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
                .await;
            self.note(&result);
            result.map(|s| self.watch(s))
        }

        async fn get_stream_with_max_sse_event_size(
            &self,
            uri: Arc<str>,
            session_id: Option<Arc<str>>,
            last_event_id: Option<String>,
            auth_header: Option<String>,
            custom_headers: HashMap<HeaderName, HeaderValue>,
            max_sse_event_size: usize,
        ) -> HttpResult<BoxedSseResponse> {
            let result = self
                .inner
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await;
            self.note(&result);
            result.map(|s| self.watch(s))
        }
    }
}
