//! The MCP server end to end with an rmcp client: streamable HTTP against an in-process server
//! (embedded platform and a real nats-server), and stdio against the `mcp_server` example
//! binary.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use soorma::http::HttpConfig;
use soorma::mcp::{McpServer, McpServerHandle};
use soorma::prelude::*;
use soorma::{AgentCapability, AgentDefinition, AgentHandle, AgentKind, EventDefinition, Platform};
use soorma_examples::calculator::{batch_calculator, calculator};
use soorma_tests::agents::{Tracked, sleeper};
use soorma_tests::example_binary;
use soorma_tests::nats_server::NatsServer;
use soorma_tests::raw_http;

async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data * 2)
}

/// An MCP client recording the progress notifications it receives.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

struct Setup {
    agents: Vec<AgentHandle>,
    server: McpServerHandle,
}

impl Setup {
    async fn start(platform: &Platform, server: McpServer) -> Self {
        let agents = vec![
            calculator().start(platform).await.unwrap(),
            batch_calculator().start(platform).await.unwrap(),
        ];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = server.spawn(listener).await.unwrap();
        Self { agents, server }
    }

    async fn client(&self) -> RunningService<RoleClient, Recorder> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let transport = StreamableHttpClientTransport::from_uri(self.server.url());
        Recorder::default().serve(transport).await.unwrap()
    }

    async fn shutdown(self) {
        self.server.shutdown().await;
        for a in self.agents {
            a.shutdown().await.unwrap();
        }
    }
}

fn args(value: Value) -> CallToolRequestParams {
    CallToolRequestParams::new("calculate.requested")
        .with_arguments(value.as_object().cloned().expect("object arguments"))
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn tools_and_calls(platform: Platform) {
    let s = Setup::start(&platform, McpServer::new(&platform)).await;
    let client = s.client().await;

    // tools/list: both agents' capabilities, with their schemas.
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["batch.requested", "calculate.requested"]);
    let calc = &tools[1];
    assert_eq!(
        calc.description.as_deref(),
        Some("Evaluates an arithmetic expression.")
    );
    assert_eq!(calc.input_schema["type"], "object");
    assert_eq!(
        calc.input_schema["properties"]["expression"]["type"],
        "string"
    );
    let output = calc
        .output_schema
        .as_ref()
        .expect("calculate has an output schema");
    assert!(output["properties"].get("result").is_some());
    assert!(
        tools[0].input_schema["properties"]
            .get("expressions")
            .is_some()
    );

    // A result: text and structured content.
    let ok = client
        .call_tool(args(json!({"expression": "6 * 7"})))
        .await
        .unwrap();
    assert_eq!(ok.is_error, Some(false));
    let six_times_seven = json!({"expression": "6 * 7", "result": 42.0});
    assert_eq!(ok.structured_content, Some(six_times_seven.clone()));
    assert_eq!(
        serde_json::from_str::<Value>(&text(&ok)).unwrap(),
        six_times_seven
    );

    // The tool's error reply: an error result with its message.
    let failed = client
        .call_tool(args(json!({"expression": "1 / 0"})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    assert!(
        text(&failed).contains("division by zero"),
        "{}",
        text(&failed)
    );

    // Arguments the payload schema rejects: an error result naming the violation.
    let invalid = client
        .call_tool(args(json!({"expression": 42})))
        .await
        .unwrap();
    assert_eq!(invalid.is_error, Some(true));
    let message = text(&invalid);
    assert!(message.contains("invalid arguments"), "{message}");
    assert!(message.contains("/expression"), "{message}");

    // An unknown tool: a JSON-RPC error naming it.
    let unknown = client
        .call_tool(CallToolRequestParams::new("nope.requested"))
        .await
        .unwrap_err();
    match unknown {
        ServiceError::McpError(e) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert!(e.message.contains("nope.requested"), "{}", e.message);
        }
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }

    // A worker: progress notifications (rmcp's client puts a `progressToken` on every request),
    // then the completed result.
    let call = CallToolRequestParams::new("batch.requested").with_arguments(
        json!({"expressions": ["1 + 1", "2 * 3"]})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let done = client.call_tool(call).await.unwrap();
    assert_eq!(done.is_error, Some(false), "{}", text(&done));
    assert_eq!(
        serde_json::from_str::<Value>(&text(&done)).unwrap(),
        json!([
            {"expression": "1 + 1", "result": 2.0},
            {"expression": "2 * 3", "result": 6.0}
        ])
    );
    // rmcp's client handles notifications on their own tasks: wait for them to be recorded.
    let mut progress = Vec::new();
    for _ in 0..100 {
        progress = client.service().progress.lock().unwrap().clone();
        if progress.iter().any(|p| p.progress == 0.1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!progress.is_empty(), "no progress notification arrived");
    // Recorded in the order the client's notification tasks ran, not necessarily as sent.
    progress.sort_by(|a, b| a.progress.total_cmp(&b.progress));
    assert_eq!(progress[0].progress, 0.1, "{progress:?}");
    assert_eq!(progress[0].total, Some(1.0));
    assert_eq!(
        progress[0].message.as_deref(),
        Some("fanning out to the calculator")
    );
    assert!(
        progress.windows(2).all(|w| w[0].progress < w[1].progress),
        "a progress value was sent twice: {progress:?}"
    );

    // An agent started later is listed; a payload that is not an object is wrapped as `input`.
    let doubler = Tool::new("doubler")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("double.requested", double))
        .start(&platform)
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let double_tool = tools
        .iter()
        .find(|t| t.name == "double.requested")
        .expect("the doubler is listed");
    assert_eq!(double_tool.input_schema["required"], json!(["input"]));
    let doubled = client
        .call_tool(
            CallToolRequestParams::new("double.requested")
                .with_arguments(json!({"input": 21}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(text(&doubled), "42");
    assert_eq!(doubled.structured_content, None);

    client.cancel().await.unwrap();
    doubler.shutdown().await.unwrap();
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_tools_and_calls_over_http() {
    soorma_tests::init_tracing();
    tools_and_calls(Platform::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_tools_and_calls_over_http() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = soorma::nats::connect(soorma::nats::NatsConfig::new(server.url()))
        .await
        .unwrap();
    tools_and_calls(platform).await;
}

/// Registers a tool `ghost` (`haunt.requested`) that nobody runs: calls to it time out.
async fn register_ghost(platform: &Platform) {
    let ghost = AgentCapability::new(
        "haunt",
        EventDefinition::new("haunt.requested", soorma::Topic::ActionRequests),
    );
    platform
        .registry()
        .register(AgentDefinition::new("ghost-1", "ghost", AgentKind::Tool).with_capability(ghost))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_and_timeouts() {
    soorma_tests::init_tracing();
    let platform = Platform::embedded();
    // A tool in the registry that nobody runs: calls to it time out.
    register_ghost(&platform).await;
    let server = McpServer::new(&platform)
        .agent("ghost")
        .agent("calculator")
        .call_timeout(Duration::from_millis(200));
    let s = Setup::start(&platform, server).await;
    let client = s.client().await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["calculate.requested", "haunt.requested"]); // not the batch calculator

    let late = client
        .call_tool(CallToolRequestParams::new("haunt.requested"))
        .await
        .unwrap();
    assert_eq!(late.is_error, Some(true));
    assert!(
        text(&late).contains("did not answer within"),
        "{}",
        text(&late)
    );

    let out_of_scope = client
        .call_tool(CallToolRequestParams::new("batch.requested"))
        .await
        .unwrap_err();
    assert!(
        matches!(out_of_scope, ServiceError::McpError(e) if e.code == ErrorCode::INVALID_PARAMS)
    );

    client.cancel().await.unwrap();
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_limit_are_refused_as_busy() {
    let platform = Platform::embedded();
    register_ghost(&platform).await;
    let server = McpServer::new(&platform)
        .max_calls(1)
        // Long enough that a loaded machine refuses the second call before the first ends.
        .call_timeout(Duration::from_secs(8));
    let s = Setup::start(&platform, server).await;
    let client = s.client().await;
    let mut requests = platform
        .bus()
        .observe(Some(soorma::Topic::ActionRequests))
        .await
        .unwrap();
    // A call nobody answers holds the only place until it times out.
    let peer = client.peer().clone();
    let waiting = tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new("haunt.requested"))
            .await
            .unwrap()
    });
    // Its request is sent once the call holds its place; then another call is refused.
    loop {
        let request = tokio::time::timeout(Duration::from_secs(10), requests.next())
            .await
            .expect("the call's request")
            .expect("the observer");
        if request.envelope.event_type == "haunt.requested" {
            break;
        }
    }
    let busy = client
        .call_tool(args(json!({"expression": "6*7"})))
        .await
        .unwrap();
    assert_eq!(busy.is_error, Some(true), "{}", text(&busy));
    assert!(text(&busy).contains("busy"), "{}", text(&busy));
    let late = waiting.await.unwrap();
    assert!(
        text(&late).contains("did not answer within"),
        "{}",
        text(&late)
    );
    // Its place is free again.
    let answered = client
        .call_tool(args(json!({"expression": "6*7"})))
        .await
        .unwrap();
    assert_eq!(answered.is_error, Some(false), "{}", text(&answered));
    client.cancel().await.unwrap();
    s.shutdown().await;
}

async fn calculate_six_times_seven<S: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
) {
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["batch.requested", "calculate.requested"]);
    let result = client
        .call_tool(args(json!({"expression": "6 * 7"})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    assert_eq!(
        result.structured_content,
        Some(json!({"expression": "6 * 7", "result": 42.0}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_example_with_a_child_process_transport() {
    let command = tokio::process::Command::new(example_binary("mcp_server"));
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    calculate_six_times_seven(&client).await;
    client.cancel().await.unwrap(); // closes stdin, waits for the child
}

/// The probe that crashed the `mcp_server` example ("thread 'tokio-rt-worker' has overflowed
/// its stack"): 200,000 nested parentheses are a tool error, and the process keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_example_answers_200000_nested_parentheses_with_a_tool_error_and_lives() {
    let mut child = tokio::process::Command::new(example_binary("mcp_server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let client = ().serve((stdout, stdin)).await.unwrap();
    let deep = format!("{}1{}", "(".repeat(200_000), ")".repeat(200_000));
    let result = client
        .call_tool(args(json!({"expression": deep})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true), "{}", text(&result));
    assert!(
        text(&result).contains("nested deeper than"),
        "{}",
        text(&result)
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the mcp_server process exited"
    );
    calculate_six_times_seven(&client).await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_example_exits_when_its_client_goes() {
    let mut child = tokio::process::Command::new(example_binary("mcp_server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let client = ().serve((stdout, stdin)).await.unwrap();
    calculate_six_times_seven(&client).await;
    drop(client); // the child's stdin closes
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the server exits when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
}

// Hardening: raw HTTP over TCP (soorma_tests::raw_http) for what an MCP client will not send.

const WAIT: Duration = Duration::from_secs(5);

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}})
    .to_string()
}

/// An `initialize` POST to `/mcp` with `extra` header lines (each ending in `\r\n`).
fn initialize(host: &str, content_type: &str, extra: &str) -> Vec<u8> {
    let body = initialize_body();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
         Accept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn spawn_server(server: McpServer, bind: &str) -> McpServerHandle {
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    server.spawn(listener).await.unwrap()
}

/// One `initialize` POST to `addr` (with its own `Host`) with `extra` header lines.
async fn initialize_on(addr: std::net::SocketAddr, extra: &str) -> raw_http::RawResponse {
    status_of(
        addr,
        &initialize(&addr.to_string(), "application/json", extra),
    )
    .await
}

/// The status of one raw request to `addr`.
async fn status_of(addr: std::net::SocketAddr, request: &[u8]) -> raw_http::RawResponse {
    let mut c = raw_http::connect(addr).await;
    raw_http::exchange(&mut c, request, WAIT)
        .await
        .expect("a response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_hosts_and_non_json_posts_are_refused() {
    let platform = Platform::embedded();
    let server = spawn_server(McpServer::new(&platform), "127.0.0.1:0").await;
    let addr = server.local_addr();

    // A web page's request (it carries an Origin): refused unless the origin is allowed.
    let r = initialize_on(addr, "Origin: http://evil.example\r\n").await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = status_of(addr, &initialize("evil.example", "application/json", "")).await;
    assert_eq!(r.status, 403, "DNS rebinding: {r:?}");
    let r = status_of(addr, &initialize(&addr.to_string(), "text/plain", "")).await;
    assert_eq!(r.status, 415, "{r:?}");
    assert!(r.body.contains("\"jsonrpc\""), "JSON-RPC shaped: {r:?}");
    server.shutdown().await;

    let server = spawn_server(
        McpServer::new(&platform).allowed_origin("http://localhost:6274"),
        "127.0.0.1:0",
    )
    .await;
    let addr = server.local_addr();
    let r = initialize_on(addr, "Origin: http://localhost:6274\r\n").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = initialize_on(addr, "Origin: http://localhost:6275\r\n").await;
    assert_eq!(r.status, 403, "{r:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_body_bytes_holds_above_the_transports_own_limit() {
    let platform = Platform::embedded();
    let server = spawn_server(
        McpServer::new(&platform).http(HttpConfig::default().max_body_bytes(8 << 20)),
        "127.0.0.1:0",
    )
    .await;
    let addr = server.local_addr();
    // A 5 MB request: over rmcp's own 4 MiB, within the 8 MiB asked for.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1", "pad": "x".repeat(5_000_000)}}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = status_of(addr, request.as_bytes()).await;
    assert_eq!(r.status, 200, "{}", r.headers);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_an_allowlist_decides_the_host() {
    let platform = Platform::embedded();
    let server = spawn_server(
        McpServer::new(&platform).allowed_host("mcp.example.com"),
        "0.0.0.0:0",
    )
    .await;
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], server.local_addr().port()).into();
    let r = status_of(addr, &initialize("127.0.0.1", "application/json", "")).await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = status_of(addr, &initialize("mcp.example.com", "application/json", "")).await;
    assert_eq!(r.status, 200, "{r:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_is_required_when_set() {
    let platform = Platform::embedded();
    let s = Setup::start(&platform, McpServer::new(&platform).bearer_token("s3cret")).await;
    let addr = s.server.local_addr();
    let r = initialize_on(addr, "").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.headers.contains("www-authenticate: bearer"), "{r:?}");
    let r = initialize_on(addr, "Authorization: Bearer guess\r\n").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.headers.contains("invalid_token"), "{r:?}");
    // Refused on its headers: a body announced but not sent is not waited for (nor held).
    let partial = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 3000000\r\n\r\n{{\"jsonrpc\""
    );
    let r = status_of(addr, partial.as_bytes()).await;
    assert_eq!(r.status, 401, "{r:?}");

    // An rmcp client sending the token works end to end.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            s.server.url(),
        )
        .auth_header("s3cret");
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    calculate_six_times_seven(&client).await;
    client.cancel().await.unwrap();
    s.shutdown().await;

    // A verifier maps tokens to identities.
    let server = spawn_server(
        McpServer::new(&platform)
            .token_verifier(|t: &str| (t == "t-alice").then(|| "alice".to_owned())),
        "127.0.0.1:0",
    )
    .await;
    let addr = server.local_addr();
    let r = initialize_on(addr, "Authorization: Bearer t-alice\r\n").await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = initialize_on(addr, "Authorization: Bearer t-bob\r\n").await;
    assert_eq!(r.status, 401, "{r:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_idle_ones_expire() {
    let platform = Platform::embedded();
    let server = spawn_server(
        McpServer::new(&platform)
            .max_sessions(2)
            // Long enough that a loaded machine opens the third session before the first ends.
            .session_idle_timeout(Duration::from_secs(3)),
        "127.0.0.1:0",
    )
    .await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let open = || async {
        http.post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize_body())
            .send()
            .await
            .unwrap()
    };
    for _ in 0..2 {
        let r = open().await;
        assert_eq!(r.status().as_u16(), 200);
        assert!(r.headers().contains_key("mcp-session-id"));
    }
    let full = open().await;
    assert_eq!(full.status().as_u16(), 503);
    assert!(full.headers().contains_key("retry-after"));
    // The two sessions go idle and end; a new one is accepted.
    let idle = std::time::Instant::now();
    loop {
        let status = open().await.status().as_u16();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            idle.elapsed() < Duration::from_secs(20),
            "the sessions never ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        idle.elapsed() > Duration::from_secs(1),
        "{:?}",
        idle.elapsed()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_limits_answer_in_json_rpc_and_cut_tricklers() {
    let platform = Platform::embedded();
    let server = spawn_server(
        McpServer::new(&platform).http(
            HttpConfig::default()
                .max_body_bytes(256)
                .header_timeout(Duration::from_millis(300)),
        ),
        "127.0.0.1:0",
    )
    .await;
    let addr = server.local_addr();
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(1024));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{big}",
        big.len()
    );
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut c, request.as_bytes(), WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.headers.contains("connection: close"), "{r:?}");
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(raw_http::closed_within(&mut c, WAIT).await);

    let mut c = raw_http::connect(addr).await;
    let cut = raw_http::trickle(
        &mut c,
        &initialize(&addr.to_string(), "application/json", ""),
        Duration::from_millis(100),
    )
    .await;
    assert!(cut, "the server waited for every byte");
    server.shutdown().await;
}

/// Newline-delimited JSON-RPC by hand against `serve_io`: the reply to each line sent.
struct RawStdio {
    write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    read: tokio::io::Lines<tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
}

impl RawStdio {
    fn start(platform: &Platform) -> Self {
        use tokio::io::AsyncBufReadExt;
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(server);
        tokio::spawn(McpServer::new(platform).serve_io(read, write));
        let (read, write) = tokio::io::split(client);
        Self {
            write,
            read: tokio::io::BufReader::new(read).lines(),
        }
    }

    async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    async fn reply(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.read.next_line())
            .await
            .expect("a reply in time")
            .unwrap()
            .expect("a line");
        serde_json::from_str(&line).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_garbage_is_a_parse_error_and_wrong_arguments_invalid_params() {
    let platform = Platform::embedded();
    let tool = Tool::new("doubler")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("double.requested", double))
        .start(&platform)
        .await
        .unwrap();
    let mut io = RawStdio::start(&platform);
    io.send("this is not json").await;
    let reply = io.reply().await;
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert_eq!(reply["id"], Value::Null, "{reply}");

    io.send(&initialize_body()).await;
    let reply = io.reply().await;
    assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
    io.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    io.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"double.requested","arguments":"21"}}"#)
        .await;
    let reply = io.reply().await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["id"], 2, "{reply}");
    io.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"double.requested","arguments":{"input":21}}}"#)
        .await;
    let reply = io.reply().await;
    assert_eq!(reply["result"]["content"][0]["text"], "42", "{reply}");
    tool.shutdown().await.unwrap();
}

/// `notifications/cancelled` for a running `tools/call` stops the agent's handler (its future is
/// dropped within a second), not only the server's wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_tool_call_stops_the_agents_handler() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let platform = Platform::embedded();
    let slept = Tracked::default();
    let agent = sleeper("sleeper", "sleep.requested", &slept)
        .start(&platform)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = McpServer::new(&platform).spawn(listener).await.unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_uri(server.url());
    let client = Recorder::default().serve(transport).await.unwrap();
    let params = CallToolRequestParams::new("sleep.requested")
        .with_arguments(json!({"nap_ms": 30_000}).as_object().cloned().unwrap());
    let call = client
        .peer()
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    slept.wait_started(1, Duration::from_secs(20)).await;
    call.cancel(Some("the user gave up".into())).await.unwrap();
    slept
        .wait_dropped(1, Duration::from_secs(10), "notifications/cancelled")
        .await;
    assert_eq!(slept.finished(), 0);
    client.cancel().await.unwrap();
    server.shutdown().await;
    tokio::time::timeout(Duration::from_secs(5), agent.shutdown())
        .await
        .expect("the agent waited for the cancelled handler")
        .unwrap();
}

/// A tool call's progress comes from its own tenant only: another tenant's `task.progress`
/// naming the call's request id is not forwarded to its client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_progress_for_a_call_is_not_forwarded() {
    soorma_tests::init_tracing();
    let platform = Platform::embedded();
    let tracked = Tracked::default();
    let tool = sleeper("napper", "nap.requested", &tracked)
        .start(&platform)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = McpServer::new(&platform)
        .tenant("acme")
        .spawn(listener)
        .await
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::from_uri(server.url());
    let client = Recorder::default().serve(transport).await.unwrap();
    let mut requests = platform
        .bus()
        .observe(Some(soorma::Topic::ActionRequests))
        .await
        .unwrap();
    let call = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            let params = CallToolRequestParams::new("nap.requested")
                // Long enough that a loaded machine forwards its own progress meanwhile.
                .with_arguments(json!({"nap_ms": 8000}).as_object().cloned().unwrap());
            peer.call_tool(params).await
        })
    };
    let request = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let d = requests.next().await.expect("the request is seen");
            if d.envelope.event_type == "nap.requested" {
                return d.envelope.clone();
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(request.tenant(), "acme");
    let progress = |tenant: &str, id: &str, value: f64| {
        soorma::EventEnvelope::new(id, "napper", soorma::Topic::SystemEvents, "task.progress")
            .with_tenant_id(tenant)
            .with_data(json!({"task_id": request.id, "agent": "napper", "progress": value}))
    };
    platform
        .bus()
        .publish(progress("acme", "p-own", 0.3))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Higher: it would be forwarded were it taken for the call's.
    platform
        .bus()
        .publish(progress("globex", "p-foreign", 0.9))
        .await
        .unwrap();
    let done = call.await.unwrap().unwrap();
    assert_eq!(done.is_error, Some(false), "{}", text(&done));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let values: Vec<f64> = client
        .service()
        .progress
        .lock()
        .unwrap()
        .iter()
        .map(|p| p.progress)
        .collect();
    assert_eq!(values, [0.3], "only the call's own tenant's progress");
    client.cancel().await.unwrap();
    server.shutdown().await;
    tool.shutdown().await.unwrap();
}
