//! The `research_fanout` example run as separate processes on a real nats-server: one process
//! per agent (two researcher instances sharing the work), a client process submitting tasks,
//! and a graceful SIGTERM shutdown of every agent afterwards; and the `a2a_gateway` example
//! answering a plain HTTP client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use soorma_tests::example_binary;
use soorma_tests::nats_server::NatsServer;

const READY: Duration = Duration::from_secs(60);
const FINISH: Duration = Duration::from_secs(180);

/// An agent process; SIGKILLed on drop unless it was stopped.
struct AgentProcess {
    name: String,
    child: Child,
}

impl AgentProcess {
    fn spawn(server: &NatsServer, name: &str) -> Self {
        let mut child = Command::new(example_binary("research_fanout"))
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
    let mut client = Command::new(example_binary("research_fanout"))
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

/// POSTs `body` as JSON over a plain TCP connection (HTTP/1.1, `Connection: close`).
fn http_post(port: u16, path: &str, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the gateway");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

#[test]
fn a2a_gateway_example_answers_a_plain_http_client_with_the_calculators_result() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(example_binary("a2a_gateway"))
        .env("PORT", port.to_string())
        .env_remove("SOORMA_NATS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the gateway example");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("A2A gateway on") {
                let _ = tx.send(());
            }
        }
    });
    let gateway = AgentProcess {
        name: "a2a_gateway".into(),
        child,
    };
    rx.recv_timeout(READY).expect("the gateway example started");
    let (head, body) = http_post(
        port,
        "/agents/calculator",
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-1","role":"ROLE_USER","parts":[{"data":{"expression":"6 * 7"}}]}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains(r#""state":"TASK_STATE_COMPLETED""#), "{body}");
    assert!(body.contains(r#""result":42.0"#), "{body}");
    // The root serves the default agent too.
    let (_, root) = http_post(
        port,
        "/",
        r#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m-2","role":"ROLE_USER","parts":[{"data":{"expression":"1 + 2"}}]}}}"#,
    );
    assert!(root.contains(r#""result":3.0"#), "{root}");
    gateway.terminate();
}
