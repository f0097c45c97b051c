//! The MCP coordinator and bridge against real MCP servers: the published reference server
//! `@modelcontextprotocol/server-everything` (npm, over stdio and streamable HTTP) and the
//! in-repo fault server (slow, failing and crashing tools).

use std::time::Duration;

use serde_json::{Value, json};
use soorma::mcp::{
    BreakerConfig, CallOptions, CircuitState, McpBridge, McpConfig, McpContent, McpCoordinator,
    McpError, McpToolOutput, ServerConfig,
};
use soorma::prelude::*;
use soorma_tests::mcp_peers::{everything_server, free_port, process_alive};
use soorma_tests::nats_server::NatsServer;

fn everything(id: &str) -> ServerConfig {
    ServerConfig::stdio(id, everything_server().to_string_lossy())
        .arg("stdio")
        .call_timeout(Duration::from_secs(20))
}

fn fault_server(id: &str) -> ServerConfig {
    ServerConfig::stdio(id, env!("CARGO_BIN_EXE_mcp_fault_server"))
        .call_timeout(Duration::from_secs(10))
}

fn coordinator(config: McpConfig) -> McpCoordinator {
    soorma_tests::init_tracing();
    McpCoordinator::new(config).expect("a valid MCP configuration")
}

async fn wait_until_dead(pid: u32) -> bool {
    for _ in 0..100 {
        if !process_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_is_listed_and_called_over_stdio() {
    let mcp = coordinator(McpConfig::new().server(everything("everything")));
    let tools = mcp.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.qualified_name.as_str()).collect();
    for expected in [
        "everything:echo",
        "everything:get-sum",
        "everything:get-structured-content",
        "everything:get-tiny-image",
        "everything:get-resource-reference",
    ] {
        assert!(names.contains(&expected), "{expected} missing in {names:?}");
    }
    assert!(
        tools
            .iter()
            .find(|t| t.name == "get-sum")
            .is_some_and(|t| !t.description.is_empty())
    );

    // The full schema on first use.
    let sum = mcp.tool("get-sum").await.unwrap();
    assert_eq!(sum.input_schema["required"], json!(["a", "b"]));

    // Text, by qualified and unqualified name.
    let out = mcp
        .call("everything:get-sum", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert!(out.text.contains('5'), "{out:?}");
    let echoed = mcp
        .call("echo", json!({"message": "soorma"}))
        .await
        .unwrap();
    assert!(echoed.text.contains("soorma"), "{echoed:?}");

    // Structured content.
    let weather = mcp
        .call("get-structured-content", json!({"location": "Chicago"}))
        .await
        .unwrap();
    let structured = weather.structured.expect("structured content");
    assert!(structured["temperature"].is_number(), "{structured}");

    // An image.
    let image = mcp.call("get-tiny-image", json!({})).await.unwrap();
    assert!(
        image
            .content
            .iter()
            .any(|c| matches!(c, McpContent::Image { mime_type, data } if mime_type == "image/png" && !data.is_empty())),
        "{image:?}"
    );

    // An embedded resource.
    let resource = mcp
        .call(
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 1}),
        )
        .await
        .unwrap();
    assert!(
        resource.content.iter().any(
            |c| matches!(c, McpContent::Resource { uri, text: Some(_), .. } if !uri.is_empty())
        ),
        "{resource:?}"
    );

    // Arguments are checked before anything is sent.
    let bad = mcp.call("get-sum", json!({"a": "two"})).await.unwrap_err();
    let McpError::InvalidArguments { tool, violations } = &bad else {
        panic!("{bad:?}")
    };
    assert_eq!(tool, "everything:get-sum");
    let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
    assert!(
        paths.contains(&"/a") && paths.contains(&""),
        "{violations:?}"
    );
    // Names a caller invents (a model told to, say) are refused and leave nothing behind.
    for i in 0..50 {
        assert!(matches!(
            mcp.call(&format!("everything:no-such-tool-{i}"), json!({}))
                .await,
            Err(McpError::UnknownTool { .. })
        ));
    }
    assert!(mcp.stats("everything:no-such-tool-7").is_none());
    assert!(matches!(
        mcp.call("nowhere:echo", json!({})).await,
        Err(McpError::UnknownServer { .. })
    ));

    // Stats count the calls that reached the server, not the rejected arguments.
    let stats = mcp.stats("everything:get-sum").unwrap();
    assert_eq!((stats.successes, stats.failures), (1, 0));
    assert_eq!(stats.circuit, Some(CircuitState::Closed));
    assert!(stats.max_latency > Duration::ZERO);

    // No `tool-descriptions` prompt on this server: a generated description.
    let described = mcp.tool_descriptions("everything").await.unwrap();
    assert!(
        described.contains("- `everything:get-sum`: ")
            && described.contains("`a` (number, required)"),
        "{described}"
    );

    // Shutdown ends the child process.
    let pid = mcp.server_pid("everything").await.expect("a child process");
    assert!(process_alive(pid));
    mcp.shutdown().await;
    assert!(wait_until_dead(pid).await, "server {pid} still running");
    assert!(matches!(
        mcp.call("echo", json!({"message": "x"})).await,
        Err(McpError::Shutdown)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_name_two_servers_have_must_be_qualified() {
    let mcp = coordinator(
        McpConfig::new()
            .server(everything("left"))
            .server(fault_server("right")),
    );
    // `echo` is on both.
    let err = mcp
        .call("echo", json!({"message": "hi"}))
        .await
        .unwrap_err();
    let McpError::AmbiguousTool { candidates, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(candidates, &["left:echo", "right:echo"]);
    assert!(
        err.to_string()
            .contains("qualify it as one of left:echo, right:echo")
    );
    // Each server's `echo` has its own schema.
    let left = mcp
        .call("left:echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert!(left.text.contains("hi"));
    let right = mcp.call("right:echo", json!({"text": "ho"})).await.unwrap();
    assert_eq!(right.text, "ho");
    // A name only one server has needs no qualifier.
    assert!(mcp.call("get-sum", json!({"a": 1, "b": 1})).await.is_ok());
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_is_called_over_streamable_http() {
    let port = free_port();
    let mut child = tokio::process::Command::new(everything_server())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mcp-server-everything starts");
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the HTTP server did not listen on {port}");

    let mcp = coordinator(McpConfig::new().server(ServerConfig::http(
        "web",
        format!("http://127.0.0.1:{port}/mcp"),
    )));
    let tools = mcp.server_tools("web").await.unwrap();
    assert!(tools.iter().any(|t| t.name == "get-sum"));
    let out = mcp
        .call("web:get-sum", json!({"a": 20, "b": 22}))
        .await
        .unwrap();
    assert!(out.text.contains("42"), "{out:?}");
    assert_eq!(mcp.server_pid("web").await, None);
    mcp.shutdown().await;
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_times_out_and_the_server_is_told_to_cancel() {
    let mcp = coordinator(McpConfig::new().server(fault_server("faults")));
    let started = std::time::Instant::now();
    let err = mcp
        .call_with(
            "slow",
            json!({"ms": 10_000}),
            CallOptions::new().timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::Timeout { tool, after } if tool == "faults:slow" && *after == Duration::from_millis(300)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The server saw `notifications/cancelled` and stopped the call.
    let mut cancelled = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let counters = mcp.call("counters", json!({})).await.unwrap();
        cancelled = counters.structured.unwrap()["cancelled"].as_u64().unwrap();
        if cancelled == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, 1);
    // Dropping a call cancels it too: drop it once the server has started it.
    let calls_before = server_calls(&mcp).await;
    let pending = tokio::spawn({
        let mcp = mcp.clone();
        async move { mcp.call("slow", json!({"ms": 10_000})).await }
    });
    let mut started = false;
    for _ in 0..250 {
        // Each look is a call too: the slow call has started when the count moved by two.
        if server_calls(&mcp).await >= calls_before + 2 {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(started, "the slow call never reached the server");
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let counters = mcp.call("counters", json!({})).await.unwrap();
        cancelled = counters.structured.unwrap()["cancelled"].as_u64().unwrap();
        if cancelled == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cancelled, 2);
    let stats = mcp.stats("faults:slow").unwrap();
    assert_eq!(stats.failures, 1);
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_opens_its_circuit_which_recovers_after_the_cool_down() {
    // A cool-down long enough for the checks below on a loaded machine.
    let cool_down = Duration::from_secs(3);
    let breaker = BreakerConfig::new(3, Duration::from_secs(60), cool_down);
    let mcp = coordinator(
        McpConfig::new()
            .server(fault_server("faults"))
            .circuit_breaker(breaker),
    );
    for _ in 0..3 {
        let err = mcp.call("flaky", json!({"fail": true})).await.unwrap_err();
        let McpError::ToolFailed { output, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(output.text, "flaky failed on purpose");
    }
    let calls_before = server_calls(&mcp).await;
    // Open: fails fast without reaching the server, even with good arguments.
    let err = mcp.call("flaky", json!({"fail": false})).await.unwrap_err();
    assert!(
        matches!(&err, McpError::CircuitOpen { tool, retry_in } if tool == "faults:flaky" && *retry_in <= cool_down),
        "{err:?}"
    );
    assert_eq!(server_calls(&mcp).await, calls_before + 1); // only the `counters` call itself
    // Other tools of the server are not affected.
    assert_eq!(
        mcp.call("echo", json!({"text": "ok"})).await.unwrap().text,
        "ok"
    );
    let stats = mcp.stats("faults:flaky").unwrap();
    assert_eq!((stats.failures, stats.rejected), (3, 1));
    assert_eq!(stats.circuit, Some(CircuitState::Open));

    // After the cool-down a failing probe reopens it...
    tokio::time::sleep(cool_down + Duration::from_millis(100)).await;
    assert!(matches!(
        mcp.call("flaky", json!({"fail": true})).await,
        Err(McpError::ToolFailed { .. })
    ));
    assert!(matches!(
        mcp.call("flaky", json!({"fail": false})).await,
        Err(McpError::CircuitOpen { .. })
    ));
    // ...and a successful one closes it.
    tokio::time::sleep(cool_down + Duration::from_millis(100)).await;
    assert_eq!(
        mcp.call("flaky", json!({"fail": false}))
            .await
            .unwrap()
            .text,
        "flaky worked"
    );
    assert_eq!(
        mcp.stats("faults:flaky").unwrap().circuit,
        Some(CircuitState::Closed)
    );
    assert!(mcp.call("flaky", json!({"fail": false})).await.is_ok());
    mcp.shutdown().await;
}

async fn server_calls(mcp: &McpCoordinator) -> u64 {
    let c = mcp.call("faults:counters", json!({})).await.unwrap();
    c.structured.unwrap()["calls"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_a_clear_error_and_the_next_call_reconnects() {
    let mcp = coordinator(McpConfig::new().server(fault_server("faults")));
    let first_pid: u32 = mcp
        .call("pid", json!({}))
        .await
        .unwrap()
        .text
        .parse()
        .unwrap();
    assert_eq!(mcp.server_pid("faults").await, Some(first_pid));

    let err = mcp.call("crash", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, McpError::Disconnected { server, .. } if server == "faults"),
        "{err:?}"
    );
    assert!(wait_until_dead(first_pid).await);

    let second_pid: u32 = mcp
        .call("pid", json!({}))
        .await
        .unwrap()
        .text
        .parse()
        .unwrap();
    assert_ne!(first_pid, second_pid);
    assert_eq!(
        mcp.call("echo", json!({"text": "back"}))
            .await
            .unwrap()
            .text,
        "back"
    );
    mcp.shutdown().await;
    assert!(wait_until_dead(second_pid).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_tool_descriptions_prompt_and_media_results_are_used() {
    let mcp = coordinator(McpConfig::new().server(fault_server("faults")));
    let described = mcp.tool_descriptions("faults").await.unwrap();
    assert_eq!(
        described,
        "The fault server: echo repeats text; slow waits; flaky fails on request."
    );
    let all = mcp.describe_tools().await.unwrap();
    assert!(all.starts_with("## MCP server `faults`"));
    let media = mcp.call("media", json!({})).await.unwrap();
    assert_eq!(
        media.content,
        vec![
            McpContent::Image {
                data: "iVBORw0KGgo=".into(),
                mime_type: "image/png".into()
            },
            McpContent::Resource {
                uri: "test://notes.txt".into(),
                mime_type: Some("text/plain".into()),
                text: Some("a note".into()),
                blob: None
            }
        ]
    );
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paging_for_ever_is_a_protocol_error() {
    let mcp = coordinator(McpConfig::new().server(fault_server("endless").arg("--endless-pages")));
    let started = std::time::Instant::now();
    let err = mcp.list_tools().await.unwrap_err();
    assert!(
        matches!(&err, McpError::Protocol { server, message } if server == "endless" && message.contains("more than 100 pages")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_a_connect_error_naming_it() {
    let mcp = coordinator(
        McpConfig::new()
            .server(ServerConfig::stdio("ghost", "/nonexistent/mcp-server"))
            .circuit_breaker(BreakerConfig::new(
                2,
                Duration::from_secs(60),
                Duration::from_secs(60),
            )),
    );
    let err = mcp.list_tools().await.unwrap_err();
    assert!(
        matches!(&err, McpError::Connect { server, message } if server == "ghost" && message.contains("/nonexistent/mcp-server")),
        "{err:?}"
    );
    // Calls of a server that cannot start fail its tool; once the circuit is open, a
    // qualified call does not even try to start the server.
    for _ in 0..2 {
        assert!(matches!(
            mcp.call("ghost:lookup", json!({})).await,
            Err(McpError::Connect { .. })
        ));
    }
    assert!(matches!(
        mcp.call("ghost:lookup", json!({})).await,
        Err(McpError::CircuitOpen { .. })
    ));
    let stats = mcp.stats("ghost:lookup").unwrap();
    assert_eq!((stats.failures, stats.rejected), (2, 1));
    let config = McpConfig::from_json(r#"{"servers": [{"id": "x", "http": {"url": 7}}]}"#);
    assert_eq!(
        config.unwrap_err().to_string(),
        "invalid MCP configuration: servers[0].http.url: must be a string"
    );
}

/// A worker that delegates to a bridged MCP tool and completes with its text.
#[on_task("sum.requested", agent = "mcp-summer")]
async fn sum(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let event = McpBridge::event_name("everything", "get-sum");
    let args = task.data.clone();
    task.delegate_with(Delegation::new(&event, &args, "sum.computed"))
        .await?;
    Ok(())
}

#[on_result("sum.computed", agent = "mcp-summer")]
async fn summed(result: ResultContext<McpToolOutput>) -> soorma::Result<bool> {
    let mut task = result.record_in_parent().await?;
    match &result.data {
        Some(out) => task.complete(json!({"text": out.text})).await,
        None => {
            task.fail(result.error.as_deref().unwrap_or("the MCP tool failed"))
                .await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridged_tools_are_invoked_and_delegated_to_on_the_embedded_bus() {
    bridged_tools_are_invoked_and_delegated_to(Platform::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridged_tools_are_invoked_and_delegated_to_on_nats() {
    let server = NatsServer::start();
    let platform = soorma::nats::connect(soorma::nats::NatsConfig::new(server.url()))
        .await
        .unwrap();
    bridged_tools_are_invoked_and_delegated_to(platform).await;
}

async fn bridged_tools_are_invoked_and_delegated_to(platform: Platform) {
    let mcp = coordinator(
        McpConfig::new()
            .server(everything("everything"))
            .server(fault_server("faults")),
    );
    let bridge = McpBridge::new(mcp.clone()).start(&platform).await.unwrap();
    let worker = Worker::new("mcp-summer").start(&platform).await.unwrap();

    // Every tool is a capability whose payload schema is the MCP input schema.
    let schema = platform
        .discovery()
        .request_schema("mcp.everything.get-sum")
        .await
        .unwrap()
        .expect("a bridged capability");
    assert_eq!(schema["required"], json!(["a", "b"]));
    assert!(
        platform
            .discovery()
            .capability("mcp.faults.flaky")
            .await
            .unwrap()
            .is_some()
    );

    let client = platform.client("mcp-test");
    let echoed: McpToolOutput = client
        .invoke(
            "mcp.faults.echo",
            json!({"text": "over the bus"}),
            "echo.done",
        )
        .await
        .unwrap();
    assert_eq!(echoed.text, "over the bus");

    // Structured content and media reach the caller.
    let weather: McpToolOutput = client
        .invoke(
            "mcp.everything.get-structured-content",
            json!({"location": "New York"}),
            "weather.done",
        )
        .await
        .unwrap();
    assert!(weather.structured.unwrap()["humidity"].is_number());
    let media: McpToolOutput = client
        .invoke("mcp.faults.media", json!({}), "media.done")
        .await
        .unwrap();
    assert!(matches!(media.content[0], McpContent::Image { .. }));

    // An MCP tool error is an error reply.
    let failed = client
        .invoke::<McpToolOutput>("mcp.faults.flaky", json!({"fail": true}), "flaky.done")
        .await
        .unwrap_err();
    assert!(
        failed.to_string().contains("flaky failed on purpose"),
        "{failed}"
    );
    // Bad arguments are refused before they are published.
    let invalid = client
        .invoke::<McpToolOutput>("mcp.everything.get-sum", json!({"a": 1}), "sum.done")
        .await
        .unwrap_err();
    assert!(
        matches!(invalid, soorma::Error::SchemaViolation { .. }),
        "{invalid}"
    );

    // A worker delegates to the MCP tool like to any agent.
    let reply = client
        .request("sum.requested", json!({"a": 40, "b": 2}), "sum.done")
        .timeout(Duration::from_secs(20))
        .await
        .unwrap();
    let done: Value = reply.into_result().unwrap();
    assert!(done["text"].as_str().unwrap().contains("42"), "{done}");

    worker.shutdown().await.unwrap();
    bridge.shutdown().await.unwrap();
    mcp.shutdown().await;
}

/// Both ways at once: one platform serves its calculator over MCP, another platform's
/// coordinator calls it and bridges it onto its own bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_platform_is_called_and_bridged_by_another() {
    let serving = Platform::embedded();
    let calculator = soorma_examples::calculator::calculator()
        .start(&serving)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = soorma::mcp::McpServer::new(&serving)
        .spawn(listener)
        .await
        .unwrap();

    let mcp = coordinator(
        McpConfig::new().server(ServerConfig::http("remote", server.url()).header("X-Trace", "1")),
    );
    let out = mcp
        .call("remote:calculate.requested", json!({"expression": "6 * 7"}))
        .await
        .unwrap();
    assert_eq!(
        out.structured,
        Some(json!({"expression": "6 * 7", "result": 42.0}))
    );
    let err = mcp
        .call("remote:calculate.requested", json!({"expression": "1 / 0"}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("division by zero"), "{err}");

    let local = Platform::embedded();
    let bridge = McpBridge::new(mcp.clone()).start(&local).await.unwrap();
    let event = McpBridge::event_name("remote", "calculate.requested");
    assert_eq!(event, "mcp.remote.calculate_requested");
    let bridged: McpToolOutput = local
        .client("both-ways")
        .invoke(&event, json!({"expression": "2 + 2"}), "sum.done")
        .await
        .unwrap();
    assert_eq!(
        bridged.structured,
        Some(json!({"expression": "2 + 2", "result": 4.0}))
    );

    bridge.shutdown().await.unwrap();
    mcp.shutdown().await;
    server.shutdown().await;
    calculator.shutdown().await.unwrap();
}

// Client hardening: servers that hang, die, flood stderr.

/// How many processes have exactly `args` as their command line.
fn processes_running(args: &[&str]) -> usize {
    let wanted: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| *cmdline == wanted)
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn a_server_that_never_answers_the_handshake_is_killed_with_its_children() {
    // A shell (the server) with a child of its own; neither ever speaks MCP.
    let script = "sleep 613.25; true";
    let count =
        || processes_running(&["sh", "-c", script]) + processes_running(&["sleep", "613.25"]);
    // A process that gives up and exits at once (its runtime gone, like `soorma mcp call`
    // timing out): nothing may be left behind.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let running = runtime.block_on(async {
        let mcp = coordinator(
            McpConfig::new().server(
                ServerConfig::stdio("mute", "sh")
                    .args(["-c", script])
                    .connect_timeout(Duration::from_millis(300)),
            ),
        );
        let during = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            count()
        });
        for _ in 0..3 {
            let e = mcp.list_tools().await.unwrap_err();
            assert!(matches!(e, McpError::Connect { .. }), "{e}");
        }
        during.await.unwrap()
    });
    drop(runtime);
    assert!(running > 0, "the test did not see the server run");
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = count();
        if left == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left, 0, "processes of timed-out handshakes still running");
}

/// The peak resident memory of this process, in kB (`VmHWM`).
#[cfg(target_os = "linux")]
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_stderr_without_a_newline_does_not_grow_memory() {
    // 200 MB on stderr without a newline, then silence (it never answers the handshake).
    let mcp = coordinator(
        McpConfig::new().server(
            ServerConfig::stdio("flood", "sh")
                .args([
                    "-c",
                    "head -c 200000000 /dev/zero >&2; echo done >&2; sleep 30",
                ])
                .connect_timeout(Duration::from_secs(4)),
        ),
    );
    let before = peak_rss_kb();
    let e = mcp.list_tools().await.unwrap_err();
    assert!(matches!(e, McpError::Connect { .. }), "{e}");
    let grown_mb = (peak_rss_kb() - before) / 1024;
    assert!(grown_mb < 64, "peak memory grew by {grown_mb} MB");
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_servers_and_oversized_replies_are_reported_in_plain_words() {
    let mcp = coordinator(McpConfig::new().server(fault_server("faults")));
    // A server that dies mid-call: its exit status and last words.
    let err = mcp.call("crash", json!({})).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(&err, McpError::Disconnected { .. }), "{err:?}");
    assert!(message.contains("exit status: 3"), "{message}");
    assert!(message.contains("crashing on purpose"), "{message}");
    // A reply over the 16 MiB limit: said so (not "did not answer" after the timeout).
    let started = std::time::Instant::now();
    let err = mcp.call("huge", json!({"mb": 17})).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("larger than 16 MiB"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Under the limit it arrives, and the server was reconnected to.
    let big = mcp.call("huge", json!({"mb": 2})).await.unwrap();
    assert_eq!(big.text.len(), 2 * 1024 * 1024);
    for message in [&message] {
        for rmcp_name in [
            "ServiceError",
            "TransportClosed",
            "rmcp::",
            "DynamicTransportError",
        ] {
            assert!(!message.contains(rmcp_name), "{message}");
        }
    }
    mcp.shutdown().await;

    // A server that exits at once: its status, not a handshake error.
    let mcp = coordinator(McpConfig::new().server(
        ServerConfig::stdio("quitter", "sh").args(["-c", "echo no config found >&2; exit 7"]),
    ));
    let err = mcp.list_tools().await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(&err, McpError::Connect { .. }), "{err:?}");
    assert!(message.contains("exit status: 7"), "{message}");
    assert!(message.contains("no config found"), "{message}");
    mcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_concurrent_calls_are_limited() {
    let mcp = coordinator(McpConfig::new().server(fault_server("faults").max_concurrent_calls(2)));
    mcp.call("echo", json!({"text": "warm up"})).await.unwrap();
    // Four 400 ms calls, two at a time: two rounds.
    let started = std::time::Instant::now();
    let calls = (0..4).map(|_| mcp.call("slow", json!({"ms": 400})));
    for result in futures_util::future::join_all(calls).await {
        result.unwrap();
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(780),
        "{took:?}: more than 2 at once"
    );
    // A call waiting for a slot longer than its timeout times out.
    let slow = mcp.call("slow", json!({"ms": 600}));
    let slow2 = mcp.call("slow", json!({"ms": 600}));
    let waiting = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        mcp.call_with(
            "echo",
            json!({"text": "late"}),
            CallOptions::default().timeout(Duration::from_millis(200)),
        )
        .await
    };
    let (a, b, late) = tokio::join!(slow, slow2, waiting);
    a.unwrap();
    b.unwrap();
    assert!(matches!(late, Err(McpError::Timeout { .. })), "{late:?}");
    mcp.shutdown().await;
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct HugeReply {
    mb: usize,
}

async fn huge_reply(req: Invocation<HugeReply>) -> Result<String, ToolError> {
    Ok("x".repeat(req.data.mb * 1024 * 1024))
}

/// Over streamable HTTP too, a reply over the 16 MiB limit is reported as such in plain words,
/// at once (not as "did not answer" after the call's timeout), and the next call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_reply_over_streamable_http_is_reported_in_plain_words() {
    let platform = Platform::embedded();
    let tool = Tool::new("huge")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("huge.requested", huge_reply))
        .start(&platform)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = soorma::mcp::McpServer::new(&platform)
        .spawn(listener)
        .await
        .unwrap();
    let mcp = coordinator(McpConfig::new().server(
        ServerConfig::http("web", server.url().to_string()).call_timeout(Duration::from_secs(20)),
    ));
    let started = std::time::Instant::now();
    let err = mcp
        .call("web:huge.requested", json!({"mb": 17}))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("larger than 16 MiB"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for rmcp_name in [
        "ServiceError",
        "TransportClosed",
        "rmcp::",
        "DynamicTransportError",
    ] {
        assert!(!message.contains(rmcp_name), "{message}");
    }
    let small = mcp
        .call("web:huge.requested", json!({"mb": 1}))
        .await
        .unwrap();
    assert!(small.text.len() >= 1024 * 1024, "{}", small.text.len());
    mcp.shutdown().await;
    server.shutdown().await;
    tool.shutdown().await.unwrap();
}
