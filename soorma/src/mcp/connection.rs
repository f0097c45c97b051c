//! One live MCP session with a server: a child process over stdio (its stderr drained into the
//! log) or a streamable HTTP session.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;

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
        // The stdio server's process group, once started: killed at once (not by a task that
        // may never run when the caller's runtime ends) when the handshake fails or times out.
        let started = std::sync::OnceLock::new();
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
                    #[allow(unused_mut)]
                    let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
                    // Its own process group: stopping the server stops what it started.
                    #[cfg(unix)]
                    wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
                    let (process, stderr) = TokioChildProcess::builder(wrap)
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| fail(format!("cannot start `{command}`: {e}")))?;
                    let pid = process.id();
                    if let Some(pid) = pid {
                        let _ = started.set(pid);
                    }
                    if let Some(stderr) = stderr {
                        tokio::spawn(drain_stderr(config.id.clone(), stderr));
                    }
                    let service = handler
                        .serve(process)
                        .await
                        .map_err(|e| fail(format!("MCP handshake failed: {e}")))?;
                    Ok::<_, McpError>((service, pid))
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
                    let transport = StreamableHttpClientTransport::with_client(
                        http,
                        StreamableHttpClientTransportConfig::with_uri(url.as_str()),
                    );
                    let service = handler
                        .serve(transport)
                        .await
                        .map_err(|e| fail(format!("MCP handshake with {url} failed: {e}")))?;
                    Ok((service, None))
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
        let (service, pid) = match connected {
            Ok(connected) => connected,
            Err(e) => {
                if let Some(pid) = started.get() {
                    kill_group(&config.id, *pid);
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
        match service
            .close_with_timeout(std::time::Duration::from_secs(10))
            .await
        {
            Ok(Some(reason)) => tracing::debug!(server, ?reason, "MCP session closed"),
            Ok(None) => tracing::warn!(server, "the MCP session did not close within 10 s"),
            Err(e) => tracing::warn!(server, error = %e, "closing the MCP session failed"),
        }
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

/// Logs a stdio server's stderr line by line until it closes, so the pipe never fills up.
async fn drain_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => tracing::debug!(server = %server, "{line}"),
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(server = %server, error = %e, "cannot read the MCP server's stderr");
                break;
            }
        }
    }
}
