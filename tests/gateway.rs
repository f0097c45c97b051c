//! The A2A gateway end to end over real HTTP: cards, JSON-RPC methods and errors, streaming,
//! skill routing, auth; on the embedded platform and on a real nats-server.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::gateway::{Gateway, GatewayAuth, GatewayHandle};
use soorma::prelude::*;
use soorma::{AgentHandle, Platform};
use soorma_examples::calculator::{batch_calculator, calculator};
use soorma_tests::nats_server::NatsServer;

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Echo {
    text: String,
}

async fn add(req: Invocation<Add>) -> Result<f64, ToolError> {
    Ok(req.data.a + req.data.b)
}

async fn echo(req: Invocation<Echo>) -> Result<String, ToolError> {
    Ok(req.data.text)
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Nap {
    nap_ms: u64,
}

async fn slow(req: Invocation<Nap>) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(req.data.nap_ms)).await;
    Ok("late".into())
}

struct Setup {
    agents: Vec<AgentHandle>,
    gateway: GatewayHandle,
    http: reqwest::Client,
}

impl Setup {
    async fn start(platform: &Platform, auth: Option<GatewayAuth>) -> Self {
        let agents = vec![
            calculator().start(platform).await.unwrap(),
            Tool::new("multi")
                .use_registered_handlers(false)
                .handler(Handler::on_invoke("add.requested", add))
                .handler(Handler::on_invoke("echo.requested", echo))
                .handler(Handler::on_invoke("slow.requested", slow))
                .start(platform)
                .await
                .unwrap(),
            batch_calculator().start(platform).await.unwrap(),
        ];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut gateway = Gateway::new(platform)
            .agent("calculator")
            .agent("multi")
            .agent("batch-calculator")
            .wait(Duration::from_secs(20));
        if let Some(auth) = auth {
            gateway = gateway.auth(auth);
        }
        let gateway = gateway.spawn(listener).await.unwrap();
        Self {
            agents,
            gateway,
            http: http_client(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.gateway.url())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap())
    }

    async fn rpc(&self, agent: &str, method: &str, params: Value) -> Value {
        let r = self
            .http
            .post(self.url(&format!("/agents/{agent}")))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json().await.unwrap()
    }

    async fn send(&self, agent: &str, parts: Value, extra: Value) -> Value {
        let mut message = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": parts});
        if let Some(meta) = extra.get("metadata") {
            message["metadata"] = meta.clone();
        }
        let mut params = json!({"message": message});
        if let Some(config) = extra.get("configuration") {
            params["configuration"] = config.clone();
        }
        self.rpc(agent, "SendMessage", params).await
    }

    async fn shutdown(self) {
        self.gateway.shutdown().await;
        for a in self.agents {
            a.shutdown().await.unwrap();
        }
    }
}

/// A plain HTTP client (reqwest is built without a default TLS provider; plain HTTP needs none,
/// but the builder wants one installed).
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {response}"))
}

async fn cards_and_send_message(platform: Platform) {
    let s = Setup::start(&platform, None).await;
    // Cards: the default agent at the root, every agent under /agents/<name>.
    let (status, card) = s.get("/.well-known/agent-card.json").await;
    assert_eq!(status, 200, "{card}");
    assert_eq!(card["name"], "calculator");
    let interface = &card["supportedInterfaces"][0];
    assert_eq!(interface["url"], s.url("/agents/calculator"));
    assert_eq!(interface["protocolBinding"], "JSONRPC");
    assert_eq!(interface["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["id"], "calculate.requested");
    assert_eq!(
        card["skills"][0]["description"],
        "Evaluates an arithmetic expression."
    );
    let (_, multi) = s.get("/agents/multi/.well-known/agent-card.json").await;
    assert_eq!(multi["skills"].as_array().unwrap().len(), 3);
    let (_, legacy) = s.get("/.well-known/agent.json").await;
    assert_eq!(legacy["protocolVersion"], "0.3.0");
    assert_eq!(legacy["url"], s.url("/agents/calculator"));
    let (status, _) = s.get("/agents/nobody/.well-known/agent-card.json").await;
    assert_eq!(status, 404);

    // SendMessage, blocking: the reply becomes the task's status and artifact.
    let r = s
        .send(
            "calculator",
            json!([{"data": {"expression": "6 * 7"}}]),
            json!({}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"]["result"], 42.0);
    assert_eq!(task["metadata"]["skillId"], "calculate.requested");
    assert_eq!(task["history"][0]["messageId"], "m-1");
    let id = task["id"].as_str().unwrap().to_owned();
    let got = s.rpc("calculator", "GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    // Tasks are per agent interface.
    let elsewhere = s.rpc("multi", "GetTask", json!({"id": id})).await;
    assert_eq!(error_code(&elsewhere), -32001);

    // A tool error fails the task with the error as the status message.
    let r = s
        .send(
            "calculator",
            json!([{"data": {"expression": "1 / 0"}}]),
            json!({}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("division by zero"), "{text}");
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");

    // A payload the skill's schema rejects never reaches the agent.
    let r = s
        .send("calculator", json!([{"text": "6 * 7"}]), json!({}))
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{r}");
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("\"expression\" is a required property"),
        "{text}"
    );

    // Skills: by metadata.skillId, else by which input schema the data matches.
    let r = s
        .send("multi", json!([{"data": {"a": 1, "b": 2}}]), json!({}))
        .await;
    assert_eq!(
        r["result"]["task"]["artifacts"][0]["parts"][0]["data"], 3.0,
        "{r}"
    );
    let r = s.send("multi", json!([{"text": "hello"}]), json!({})).await;
    assert_eq!(
        r["result"]["task"]["artifacts"][0]["parts"][0]["text"], "hello",
        "{r}"
    );
    let r = s
        .send(
            "multi",
            json!([{"text": "hello"}]),
            json!({"metadata": {"skillId": "nope.requested"}}),
        )
        .await;
    assert_eq!(error_code(&r), -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("echo.requested"),
        "{r}"
    );
    let r = s
        .send("multi", json!([{"data": {"x": 1}}]), json!({}))
        .await;
    assert_eq!(error_code(&r), -32602);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("skillId"),
        "{r}"
    );

    // Non-blocking, then GetTask until done; cancel a running task.
    let r = s
        .send(
            "multi",
            json!([{"data": {"nap_ms": 3000}}]),
            json!({"metadata": {"skillId": "slow.requested"}, "configuration": {"returnImmediately": true}}),
        )
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{r}"
    );
    let slow_id = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    let canceled = s.rpc("multi", "CancelTask", json!({"id": slow_id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let again = s.rpc("multi", "CancelTask", json!({"id": slow_id})).await;
    assert_eq!(error_code(&again), -32002);
    let r = s
        .send(
            "calculator",
            json!([{"data": {"expression": "1 + 1"}}]),
            json!({"configuration": {"returnImmediately": true}}),
        )
        .await;
    let quick = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = s.rpc("calculator", "GetTask", json!({"id": quick})).await;
        if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED" {
            assert_eq!(
                got["result"]["artifacts"][0]["parts"][0]["data"]["result"],
                2.0
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = s
        .rpc(
            "calculator",
            "ListTasks",
            json!({"status": "TASK_STATE_COMPLETED"}),
        )
        .await;
    assert!(
        listed["result"]["tasks"].as_array().unwrap().len() >= 2,
        "{listed}"
    );
    s.shutdown().await;
}

/// Reads server-sent events until the stream ends; returns each event's JSON.
async fn read_sse(response: reqwest::Response) -> Vec<Value> {
    let mut response = response;
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), response.chunk())
        .await
        .expect("stream stalled")
        .unwrap()
    {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    events.push(serde_json::from_str(data.trim()).unwrap());
                }
            }
        }
    }
    events
}

async fn streaming_a_worker(platform: Platform) {
    let s = Setup::start(&platform, None).await;
    let response = s
        .http
        .post(s.url("/agents/batch-calculator"))
        .json(
            &json!({"jsonrpc": "2.0", "id": "s-1", "method": "SendStreamingMessage", "params": {
            "message": {"messageId": "m-2", "role": "ROLE_USER",
                        "parts": [{"data": {"expressions": ["1 + 1", "2 * 3"]}}]}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let events = read_sse(response).await;
    assert!(
        events
            .iter()
            .all(|e| e["jsonrpc"] == "2.0" && e["id"] == "s-1")
    );
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING")
        .collect();
    assert!(!progress.is_empty(), "progress is streamed: {events:?}");
    assert!(
        progress[0]["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains('%')
    );
    let artifact = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .expect("an artifact update");
    assert_eq!(
        artifact["artifact"]["parts"][0]["data"],
        json!([
            {"expression": "1 + 1", "result": 2.0},
            {"expression": "2 * 3", "result": 6.0}
        ])
    );
    let last = events.last().unwrap();
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_cards_and_send_message() {
    cards_and_send_message(Platform::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_streaming_a_worker() {
    streaming_a_worker(Platform::embedded()).await;
}

async fn nats(server: &NatsServer) -> Platform {
    soorma::nats::connect(soorma::nats::NatsConfig::new(server.url()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_cards_and_send_message() {
    let server = NatsServer::start();
    cards_and_send_message(nats(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_streaming_a_worker() {
    let server = NatsServer::start();
    streaming_a_worker(nats(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_errors_follow_the_spec() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let post = |body: &'static str| {
        s.http
            .post(s.url("/agents/calculator"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let parse: Value = post("{not json").await.unwrap().json().await.unwrap();
    assert_eq!(error_code(&parse), -32700);
    assert_eq!(parse["id"], Value::Null);
    let invalid: Value = post(r#"{"id": 1, "method": "GetTask"}"#)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(error_code(&invalid), -32600);
    let unknown = s.rpc("calculator", "tasks/get", json!({})).await;
    assert_eq!(error_code(&unknown), -32601);
    let missing = s
        .rpc(
            "calculator",
            "SendMessage",
            json!({"message": {"role": "ROLE_USER"}}),
        )
        .await;
    assert_eq!(error_code(&missing), -32602);
    assert_eq!(
        missing["error"]["data"][0]["@type"],
        "type.googleapis.com/google.rpc.BadRequest"
    );
    let no_task = s.rpc("calculator", "GetTask", json!({"id": "nope"})).await;
    assert_eq!(error_code(&no_task), -32001);
    let push = s
        .rpc("calculator", "CreateTaskPushNotificationConfig", json!({}))
        .await;
    assert_eq!(error_code(&push), -32003);
    let file = s
        .send(
            "calculator",
            json!([{"url": "https://example.com/a.pdf"}]),
            json!({}),
        )
        .await;
    assert_eq!(error_code(&file), -32005);
    let old: Value = s
        .http
        .post(s.url("/agents/calculator"))
        .header("A2A-Version", "0.3")
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "GetTask", "params": {"id": "x"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(error_code(&old), -32009);
    assert_eq!(old["id"], 9);
    let (status, _) = s.get("/agents/unknown/.well-known/agent-card.json").await;
    assert_eq!(status, 404);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_auth_is_declared_and_enforced() {
    let s = Setup::start(
        &Platform::embedded(),
        Some(GatewayAuth::api_key("X-API-Key", "s3cret")),
    )
    .await;
    let (status, card) = s.get("/.well-known/agent-card.json").await;
    assert_eq!(status, 200, "cards stay public");
    assert_eq!(
        card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"], "X-API-Key",
        "{card}"
    );
    assert!(
        card["securityRequirements"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{card}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"expression": "2+2"}}]}}});
    let denied = s
        .http
        .post(s.url("/agents/calculator"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status().as_u16(), 401);
    assert_eq!(denied.headers()["www-authenticate"], "ApiKey");
    let wrong = s
        .http
        .post(s.url("/agents/calculator"))
        .header("X-API-Key", "guess")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let ok: Value = s
        .http
        .post(s.url("/agents/calculator"))
        .header("X-API-Key", "s3cret")
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        ok["result"]["task"]["artifacts"][0]["parts"][0]["data"]["result"], 4.0,
        "{ok}"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_tenant_is_invalid_params() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let message = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": {"expression": "1+1"}}]});
    for tenant in ["acme corp", "a.b", "soorma.>"] {
        let r = s
            .rpc(
                "calculator",
                "SendMessage",
                json!({"tenant": tenant, "message": message}),
            )
            .await;
        assert_eq!(error_code(&r), -32602, "{tenant}: {r}");
        assert!(r.to_string().contains("tenant"), "{r}");
    }
    let ok = s
        .rpc(
            "calculator",
            "SendMessage",
            json!({"tenant": "acme", "message": message}),
        )
        .await;
    assert!(ok.get("error").is_none(), "{ok}");
    s.shutdown().await;
}
