//! The `research_fanout` example run as separate processes on a real nats-server: one process
//! per agent (two researcher instances sharing the work), a client process submitting tasks,
//! and a graceful SIGTERM shutdown of every agent afterwards.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use soorma_tests::nats_server::NatsServer;

const READY: Duration = Duration::from_secs(60);
const FINISH: Duration = Duration::from_secs(180);

/// `target/<profile>/examples/research_fanout`, built by `cargo test --workspace`.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("examples").join("research_fanout");
    assert!(
        bin.exists(),
        "{} is missing: build the examples first (`cargo test --workspace` does, or \
         `cargo build -p soorma-examples --examples`)",
        bin.display()
    );
    bin
}

/// An agent process; SIGKILLed on drop unless it was stopped.
struct AgentProcess {
    name: String,
    child: Child,
}

impl AgentProcess {
    fn spawn(server: &NatsServer, name: &str) -> Self {
        let mut child = Command::new(example_binary())
            .args(["--agent", name])
            .env("SOORMA_NATS_URL", server.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn agent process");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains(" ready on the nats platform") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(READY)
            .unwrap_or_else(|_| panic!("agent process `{name}` did not report ready"));
        Self {
            name: name.to_string(),
            child,
        }
    }

    /// SIGTERM, then waits for a clean exit.
    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {}", self.name);
        let deadline = Instant::now() + READY;
        loop {
            if let Some(exit) = self.child.try_wait().expect("wait for agent") {
                assert!(exit.success(), "`{}` exited with {exit}", self.name);
                return;
            }
            assert!(
                Instant::now() < deadline,
                "`{}` did not shut down on SIGTERM",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn research_fanout_runs_as_one_process_per_agent() {
    let server = NatsServer::start();
    let agents: Vec<AgentProcess> = [
        "sentiment",
        "entities",
        "summarizer",
        "researcher",
        "researcher",
    ]
    .into_iter()
    .map(|name| AgentProcess::spawn(&server, name))
    .collect();
    let tasks = 60;
    let mut client = Command::new(example_binary())
        .args(["--client", "--tasks", &tasks.to_string()])
        .env("SOORMA_NATS_URL", server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client process");
    let deadline = Instant::now() + FINISH;
    let status = loop {
        if let Some(status) = client.try_wait().expect("wait for client") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = client.kill();
            panic!("the client did not finish within {FINISH:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = client.wait_with_output().expect("client output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success(),
        "client failed ({status}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{tasks} research tasks fanned out and in ({} sub-tasks) on the nats platform",
            tasks * 3
        )),
        "{stdout}"
    );
    // Each report line carries real analysis results.
    assert!(stdout.contains("sentiment"), "{stdout}");
    for agent in agents {
        agent.terminate();
    }
}
