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
use soorma::mcp::{McpServer, McpServerHandle};
use soorma::prelude::*;
use soorma::{AgentCapability, AgentDefinition, AgentHandle, AgentKind, EventDefinition, Platform};
use soorma_examples::calculator::{batch_calculator, calculator};
use soorma_tests::example_binary;
use soorma_tests::nats_server::NatsServer;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_and_timeouts() {
    soorma_tests::init_tracing();
    let platform = Platform::embedded();
    // A tool in the registry that nobody runs: calls to it time out.
    let ghost = AgentCapability::new(
        "haunt",
        EventDefinition::new("haunt.requested", soorma::Topic::ActionRequests),
    );
    platform
        .registry()
        .register(AgentDefinition::new("ghost-1", "ghost", AgentKind::Tool).with_capability(ghost))
        .await
        .unwrap();
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
