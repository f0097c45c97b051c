//! The A2A gateway end to end over real HTTP: cards, JSON-RPC methods and errors, streaming,
//! skill routing, auth; on the embedded platform and on a real nats-server.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::gateway::{Caller, Gateway, GatewayAuth, GatewayHandle};
use soorma::http::HttpConfig;
use soorma::prelude::*;
use soorma::{AgentHandle, Platform};
use soorma_examples::calculator::{batch_calculator, calculator};
use soorma_tests::agents::{Tracked, sleeper};
use soorma_tests::nats_server::{NatsServer, consumer_count};
use soorma_tests::raw_http;

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

    /// A gateway with `limits` for the `multi` tool serving only `slow.requested`.
    async fn slow_only(limits: soorma::gateway::TaskLimits) -> Self {
        Self::slow_behind(limits, HttpConfig::default()).await
    }

    /// [`slow_only`](Self::slow_only) behind `http`.
    async fn slow_behind(limits: soorma::gateway::TaskLimits, http: HttpConfig) -> Self {
        let platform = Platform::embedded();
        let agent = Tool::new("multi")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("slow.requested", slow))
            .start(&platform)
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = Gateway::new(&platform)
            .agent("multi")
            .limits(limits)
            .http(http)
            .spawn(listener)
            .await
            .unwrap();
        Self {
            agents: vec![agent],
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

    /// `SendStreamingMessage` (JSON-RPC id `id`, message `m-<id>`) to `agent` with `parts`:
    /// the stream's events, read to its end.
    async fn stream(&self, agent: &str, id: &str, parts: Value) -> Vec<Value> {
        let response = self
            .http
            .post(self.url(&format!("/agents/{agent}")))
            .json(
                &json!({"jsonrpc": "2.0", "id": id, "method": "SendStreamingMessage", "params": {
                "message": {"messageId": format!("m-{id}"), "role": "ROLE_USER", "parts": parts}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        read_sse(response).await
    }

    /// A JSON-RPC call with extra headers (credentials); the whole response body.
    async fn rpc_as(&self, headers: &[(&str, &str)], method: &str, params: Value) -> Value {
        let mut request = self
            .http
            .post(self.url("/agents/multi"))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json().await.unwrap()
    }

    /// Starts a slow task on `multi` (returns at once) as the caller `headers` name, for
    /// `tenant`; returns its id.
    async fn start_slow(
        &self,
        headers: &[(&str, &str)],
        tenant: Option<&str>,
        nap_ms: u64,
    ) -> String {
        let mut params = json!({
            "message": {"messageId": "m-slow", "role": "ROLE_USER",
                        "parts": [{"data": {"nap_ms": nap_ms}}],
                        "metadata": {"skillId": "slow.requested"}},
            "configuration": {"returnImmediately": true}});
        if let Some(t) = tenant {
            params["tenant"] = json!(t);
        }
        let r = self.rpc_as(headers, "SendMessage", params).await;
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
            "{r}"
        );
        r["result"]["task"]["id"].as_str().unwrap().to_owned()
    }

    /// Waits until the task is finished; returns it.
    async fn finished(&self, headers: &[(&str, &str)], tenant: Option<&str>, id: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut params = json!({"id": id});
            if let Some(t) = tenant {
                params["tenant"] = json!(t);
            }
            let got = self.rpc_as(headers, "GetTask", params).await;
            let state = got["result"]["status"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !state.is_empty() && state != "TASK_STATE_WORKING" {
                return got["result"].clone();
            }
            assert!(tokio::time::Instant::now() < deadline, "{got}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
    let events = s
        .stream(
            "batch-calculator",
            "s-1",
            json!([{"data": {"expressions": ["1 + 1", "2 * 3"]}}]),
        )
        .await;
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

/// A stream begins with its task working even when the agent answers before the publish of
/// its request returns (the reply reaches the gateway first): the answer comes as an update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_begins_with_its_task_working_when_the_answer_beats_the_publish() {
    use soorma_tests::slow_bus::{SlowPublish, Wait};
    let late = SlowPublish::platform(
        &Platform::embedded(),
        "calculate.requested",
        Wait::After,
        Duration::from_millis(500),
    );
    let s = Setup::start(&late, None).await;
    let events = s
        .stream(
            "calculator",
            "s-2",
            json!([{"data": {"expression": "6 * 7"}}]),
        )
        .await;
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    let artifact = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .expect("an artifact update");
    assert_eq!(artifact["artifact"]["parts"][0]["data"]["result"], 42.0);
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
    let unknown = s.rpc("calculator", "tasks/frobnicate", json!({})).await;
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

// The HTTP layer (`soorma::http`): raw HTTP over TCP, for what a client library will not send.

fn card_request(host: &str) -> Vec<u8> {
    format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

fn post_request(host: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /agents/calculator HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to one JSON `POST` of `body` to `calculator` on a new connection to `addr`.
async fn posted(addr: std::net::SocketAddr, body: &str) -> raw_http::RawResponse {
    let mut c = raw_http::connect(addr).await;
    raw_http::exchange(
        &mut c,
        &post_request("127.0.0.1", "application/json", body),
        WAIT,
    )
    .await
    .expect("an answer")
}

/// A gateway for `calculator` (not started: these probes never reach an agent) behind `http`.
async fn bare_gateway(http: HttpConfig) -> GatewayHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Gateway::new(&Platform::embedded())
        .agent("calculator")
        .http(http)
        .spawn(listener)
        .await
        .unwrap()
}

const WAIT: Duration = Duration::from_secs(5);

/// A new client of `addr` is served within `within` (once a connection's slot is free).
async fn served_within(addr: std::net::SocketAddr, within: Duration) {
    let started = std::time::Instant::now();
    let mut client = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut client, &card_request("127.0.0.1"), within + WAIT)
        .await
        .expect("the new client is served once a connection is closed");
    assert!(r.status > 0, "{r:?}");
    assert!(started.elapsed() < within, "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_hosts_and_non_json_posts_are_refused() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let addr = s.gateway.local_addr();
    let port = addr.port();

    // DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host.
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut c, &card_request(&format!("evil.example:{port}")), WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{r:?}");
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let mut c = raw_http::connect(addr).await;
        let r = raw_http::exchange(&mut c, &card_request(&host), WAIT)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }

    // A cross-site form or "simple" request cannot be JSON: anything else is 415.
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"expression": "2+2"}}]}}})
    .to_string();
    let host = format!("127.0.0.1:{port}");
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let mut c = raw_http::connect(addr).await;
        let r = raw_http::exchange(&mut c, &post_request(&host, content_type, &send), WAIT)
            .await
            .unwrap();
        assert_eq!(r.status, 415, "{content_type}: {r:?}");
        assert!(r.body.contains("application/json"), "{r:?}");
    }
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(
        &mut c,
        &post_request(&host, "application/json; charset=utf-8", &send),
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("TASK_STATE_COMPLETED"), "{r:?}");
    s.shutdown().await;
}

/// Another caller's tasks, as seen by one who did not start them.
async fn cannot_see(s: &Setup, headers: &[(&str, &str)], tenant: Option<&str>, id: &str) {
    let with_tenant = |mut params: Value| {
        if let Some(t) = tenant {
            params["tenant"] = json!(t);
        }
        params
    };
    for method in ["GetTask", "CancelTask", "SubscribeToTask"] {
        let r = s
            .rpc_as(headers, method, with_tenant(json!({"id": id})))
            .await;
        assert_eq!(error_code(&r), -32001, "{method}: {r}");
        assert!(!r.to_string().contains("m-slow"), "{r}");
    }
    let listed = s
        .rpc_as(headers, "ListTasks", with_tenant(json!({"pageSize": 100})))
        .await;
    let ids: Vec<&Value> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert!(!ids.contains(&&json!(id)), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_scoped_to_the_tenant_without_auth() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let acme = s.start_slow(&[], Some("acme"), 1500).await;
    cannot_see(&s, &[], Some("globex"), &acme).await;
    cannot_see(&s, &[], None, &acme).await;
    // acme's task was not canceled by globex: it completes, and acme sees it.
    let done = s.finished(&[], Some("acme"), &acme).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let listed = s.rpc_as(&[], "ListTasks", json!({"tenant": "acme"})).await;
    assert_eq!(listed["result"]["tasks"][0]["id"], json!(acme), "{listed}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowlist_replaces_the_loopback_hosts() {
    let gateway = bare_gateway(HttpConfig::default().allowed_host("agents.example.com")).await;
    let addr = gateway.local_addr();
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut c, &card_request("127.0.0.1"), WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 403, "{r:?}");
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut c, &card_request("Agents.Example.com:443"), WAIT)
        .await
        .unwrap();
    assert_ne!(r.status, 403, "{r:?}");
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_client_is_cut_by_the_header_timeout() {
    let gateway =
        bare_gateway(HttpConfig::default().header_timeout(Duration::from_millis(300))).await;
    let mut c = raw_http::connect(gateway.local_addr()).await;
    let started = std::time::Instant::now();
    let cut = raw_http::trickle(
        &mut c,
        &card_request("127.0.0.1"),
        Duration::from_millis(100),
    )
    .await;
    assert!(cut, "the server waited for every byte");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_make_room_for_new_clients() {
    let gateway = bare_gateway(
        HttpConfig::default()
            .header_timeout(Duration::from_millis(400))
            .max_connections(2),
    )
    .await;
    let addr = gateway.local_addr();
    // One socket that never sends, one kept alive after a request: both fill the limit.
    let mut silent = raw_http::connect(addr).await;
    let mut kept = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut kept, &card_request("127.0.0.1"), WAIT)
        .await
        .unwrap();
    assert!(!r.headers.contains("connection: close"), "{r:?}");
    // A third client waits in the backlog until an idle one is closed, then is served.
    served_within(addr, Duration::from_secs(3)).await;
    assert!(raw_http::closed_within(&mut silent, WAIT).await);
    assert!(raw_http::closed_within(&mut kept, WAIT).await);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_write_timeout() {
    let gateway = bare_gateway(
        HttpConfig::default()
            .write_timeout(Duration::from_millis(500))
            .max_connections(1),
    )
    .await;
    let addr = gateway.local_addr();
    // Pipelined requests whose responses it never reads (a small receive buffer): the
    // server's writes stall, and the connection holds the only slot.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let hog = socket.connect(addr).await.unwrap();
    let (mut unread, mut requests) = hog.into_split();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = requests
            .write_all(&card_request("127.0.0.1").repeat(40_000))
            .await;
        requests
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    served_within(addr, Duration::from_secs(5)).await;
    // The stalled connection was closed: reading it ends (after what was buffered).
    let drained = tokio::time::timeout(WAIT, async {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0; 64 * 1024];
        while matches!(unread.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    assert!(drained.is_ok(), "the stalled connection is still open");
    writer.abort();
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_at_once() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let response = s
        .http
        .post(s.url("/agents/multi"))
        .json(
            &json!({"jsonrpc": "2.0", "id": "s-1", "method": "SendStreamingMessage", "params": {
            "message": {"messageId": "m-3", "role": "ROLE_USER",
                        "parts": [{"data": {"nap_ms": 3000}}],
                        "metadata": {"skillId": "slow.requested"}}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let events = tokio::spawn(read_sse(response));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let Setup {
        agents, gateway, ..
    } = s;
    gateway.shutdown().await;
    // Not the stop timeout (10 s): the stream ends when the gateway stops.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let events = events.await.unwrap();
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{events:?}"
    );
    for a in agents {
        a.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_slow_bodies_are_refused_and_the_connection_closed() {
    // Up to the limit (over axum's own 2 MB default), a body is read.
    let gateway = bare_gateway(HttpConfig::default().max_body_bytes(3 * 1024 * 1024)).await;
    let padded = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                        "params": {"id": "x".repeat(2_500_000)}})
    .to_string();
    let mut c = raw_http::connect(gateway.local_addr()).await;
    let r = raw_http::exchange(
        &mut c,
        &post_request("127.0.0.1", "application/json", &padded),
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("-32001"), "task not found: {r:?}");
    gateway.shutdown().await;

    let gateway = bare_gateway(
        HttpConfig::default()
            .max_body_bytes(1024)
            .body_timeout(Duration::from_millis(300)),
    )
    .await;
    let addr = gateway.local_addr();
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(4096));

    // Declared too large: 413 at once, and the connection is closed (the body is not read).
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(
        &mut c,
        &post_request("127.0.0.1", "application/json", &big),
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.headers.contains("connection: close"), "{r:?}");
    assert!(r.body.contains("too large"), "{r:?}");
    assert!(raw_http::closed_within(&mut c, WAIT).await);

    // Chunked, no length declared: 413 once the limit is passed.
    let chunked = format!(
        "POST /agents/calculator HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let mut c = raw_http::connect(addr).await;
    let r = raw_http::exchange(&mut c, chunked.as_bytes(), WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 413, "{r:?}");
    assert!(raw_http::closed_within(&mut c, WAIT).await);

    // A body that stops arriving: 408 after the body timeout, then closed.
    let mut c = raw_http::connect(addr).await;
    let head = "POST /agents/calculator HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"";
    let r = raw_http::exchange(&mut c, head.as_bytes(), WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 408, "{r:?}");
    assert!(raw_http::closed_within(&mut c, WAIT).await);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_credentials_is_refused_before_its_body_is_read() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::new(&Platform::embedded())
        .agent("calculator")
        .auth(GatewayAuth::api_key("X-API-Key", "s3cret"))
        .http(HttpConfig::default().body_timeout(Duration::from_secs(60)))
        .spawn(listener)
        .await
        .unwrap();
    // Announces 3 MB and sends 10 bytes: the server would wait for the rest (up to the body
    // timeout) before refusing, holding what came, if it read bodies before credentials.
    let head = "POST /agents/calculator HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 3000000\r\n\r\n{\"jsonrpc\"";
    for key in [None, Some("guess")] {
        let head = match key {
            Some(k) => head.replacen("\r\n\r\n", &format!("\r\nX-API-Key: {k}\r\n\r\n"), 1),
            None => head.to_owned(),
        };
        let mut c = raw_http::connect(gateway.local_addr()).await;
        let r = raw_http::exchange(&mut c, head.as_bytes(), WAIT)
            .await
            .expect("refused without waiting for the body");
        assert_eq!(r.status, 401, "{key:?}: {r:?}");
        assert!(r.headers.contains("www-authenticate: apikey"), "{r:?}");
    }
    // Cards are public: a body on another method than POST is refused, not read.
    let get = "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\
               Content-Length: 3000000\r\n\r\n{\"pad\"";
    let mut c = raw_http::connect(gateway.local_addr()).await;
    let r = raw_http::exchange(&mut c, get.as_bytes(), WAIT)
        .await
        .expect("refused without waiting for the body");
    assert_eq!(r.status, 400, "{r:?}");
    assert!(raw_http::closed_within(&mut c, WAIT).await);
    // With the key, the body is waited for.
    let with_key = head.replacen("\r\n\r\n", "\r\nX-API-Key: s3cret\r\n\r\n", 1);
    let mut c = raw_http::connect(gateway.local_addr()).await;
    assert!(
        raw_http::exchange(&mut c, with_key.as_bytes(), Duration::from_millis(500))
            .await
            .is_none(),
        "an admitted call's body is read"
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_being_read_share_a_byte_budget() {
    // Long enough that a loaded machine still reads A's bytes, and refuses B, before A is cut
    // off; the test waits for it once, at the end.
    let body_timeout = Duration::from_secs(10);
    let gateway = bare_gateway(
        HttpConfig::default()
            .max_body_bytes(64 * 1024)
            .max_buffered_body_bytes(64 * 1024)
            .body_timeout(body_timeout),
    )
    .await;
    let addr = gateway.local_addr();
    // A holds 50,000 bytes of a 60,000-byte body and sends no more.
    let mut a = raw_http::connect(addr).await;
    let head = "POST /agents/calculator HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n";
    let mut held = head.as_bytes().to_vec();
    held.extend(std::iter::repeat_n(b' ', 50_000));
    tokio::io::AsyncWriteExt::write_all(&mut a, &held)
        .await
        .unwrap();
    // B's whole 20,000-byte body would go over the budget: refused, not kept waiting.
    let b = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                   "params": {"id": "x".repeat(19_900)}})
    .to_string();
    let started = std::time::Instant::now();
    let refused = loop {
        let r = posted(addr, &b).await;
        if r.status == 503 || started.elapsed() > body_timeout {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        refused.status,
        503,
        "B was not refused in {:?}: {refused:?}",
        started.elapsed()
    );
    assert!(refused.headers.contains("retry-after"), "{refused:?}");
    assert!(refused.body.contains("retry later"), "{refused:?}");
    // Once A is cut off by the body timeout, its bytes are released and B is served.
    let r = raw_http::read_response(&mut a, body_timeout + WAIT)
        .await
        .unwrap();
    assert_eq!(r.status, 408, "{r:?}");
    let r = posted(addr, &b).await;
    assert_eq!(r.status, 200, "{r:?}");
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_agent_holds_none_of_the_body_budget() {
    let budget = 64 * 1024;
    let s = Setup::slow_behind(
        soorma::gateway::TaskLimits::default(),
        HttpConfig::default()
            .max_body_bytes(budget)
            .max_buffered_body_bytes(budget),
    )
    .await;
    let (http, url) = (http_client(), s.url("/agents/multi"));
    let rpc = |method: &str, params: Value| {
        let request = http
            .post(&url)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        async move {
            let r = request.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or_default(),
            )
        }
    };
    // A 40 KB blocking SendMessage to a tool that takes 10 s.
    let pad = "x".repeat(40_000);
    let waiting = tokio::spawn(rpc(
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "metadata": {"pad": pad},
               "parts": [{"data": {"nap_ms": 10_000}}]}}),
    ));
    let started = std::time::Instant::now();
    loop {
        let (_, listed) = rpc("ListTasks", json!({})).await;
        if listed["result"]["tasks"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
        {
            break;
        }
        assert!(started.elapsed() < WAIT, "the call was not taken: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While it waits, another 40 KB request fits in the 64 KiB budget: the first one's body
    // went back once parsed.
    let (status, body) = rpc("GetTask", json!({"id": pad})).await;
    assert_eq!(status, 200, "{body}");
    assert!(!waiting.is_finished(), "answered while the first waits");
    let (status, done) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_and_bearer_callers_are_isolated() {
    let auth = GatewayAuth::api_key("X-API-Key", "shared")
        .with_key("k-acme", Caller::new("acme-ci").tenant("acme"))
        .with_key("k-globex", Caller::new("globex-ci").tenant("globex"))
        .with_key("k-other", Caller::new("other"));
    let s = Setup::start(&Platform::embedded(), Some(auth)).await;
    let acme_key = [("X-API-Key", "k-acme")];
    let acme = s.start_slow(&acme_key, None, 1500).await;
    // Another tenant's key, a key of no tenant naming acme, the one-key holder: none sees it.
    cannot_see(&s, &[("X-API-Key", "k-globex")], None, &acme).await;
    cannot_see(&s, &[("X-API-Key", "k-other")], Some("acme"), &acme).await;
    cannot_see(&s, &[("X-API-Key", "shared")], Some("acme"), &acme).await;
    // A key bound to acme cannot act for globex.
    let r = s
        .rpc_as(&acme_key, "ListTasks", json!({"tenant": "globex"}))
        .await;
    assert_eq!(error_code(&r), -32602, "{r}");
    let done = s.finished(&acme_key, None, &acme).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    s.shutdown().await;

    let verifier = |token: &str| {
        token
            .strip_prefix("jwt-")
            .map(|tenant| Caller::new(format!("{tenant}-user")).tenant(tenant))
    };
    let s = Setup::start(
        &Platform::embedded(),
        Some(GatewayAuth::bearer_verifier(verifier)),
    )
    .await;
    let (_, card) = s.get("/.well-known/agent-card.json").await;
    assert!(
        card["securitySchemes"].to_string().contains("earer"),
        "{card}"
    );
    let acme = s
        .start_slow(&[("Authorization", "Bearer jwt-acme")], None, 200)
        .await;
    cannot_see(&s, &[("Authorization", "Bearer jwt-globex")], None, &acme).await;
    let denied = s
        .http
        .post(s.url("/agents/multi"))
        .header("Authorization", "Bearer forged")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status().as_u16(), 401);
    s.shutdown().await;
}

/// A reply published by another tenant, or by another agent of the same tenant, with the
/// task's id as correlation, does not complete the task; the real reply does. For a task of
/// tenant acme and for one that names no tenant (before, the gateway's tenant-less client took
/// replies of every tenant).
async fn forged_replies_are_ignored(platform: Platform) {
    let s = Setup::start(&platform, None).await;
    let mut requests = platform
        .bus()
        .observe(Some(Topic::ActionRequests))
        .await
        .unwrap();
    for tenant in [Some("acme"), None] {
        // Long enough that a loaded machine forges both replies while the task still runs.
        let task = s.start_slow(&[], tenant, 6000).await;
        let request = loop {
            let d = tokio::time::timeout(Duration::from_secs(10), requests.next())
                .await
                .unwrap()
                .unwrap();
            if d.envelope.correlation_id.as_deref() == Some(task.as_str()) {
                break d.envelope.clone();
            }
        };
        let reply_event = request.response_event.clone().unwrap();
        let forged =
            json!({"request_id": task, "success": true, "result": "FORGED by tenant evil"});
        let evil = platform.client("multi").with_tenant("evil").bus();
        evil.respond(&reply_event, &forged, &task)
            .tenant_id("evil")
            .await
            .unwrap();
        let impostor = platform.client("impostor").bus();
        let forged =
            json!({"request_id": task, "success": true, "result": "FORGED by another agent"});
        impostor
            .respond(&reply_event, &forged, &task)
            .tenant_id(tenant.unwrap_or("default"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut params = json!({"id": task});
        if let Some(t) = tenant {
            params["tenant"] = json!(t);
        }
        let got = s.rpc_as(&[], "GetTask", params).await;
        assert_eq!(
            got["result"]["status"]["state"], "TASK_STATE_WORKING",
            "{got}"
        );
        let done = s.finished(&[], tenant, &task).await;
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
        assert_eq!(done["artifacts"][0]["parts"][0]["text"], "late", "{done}");
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_forged_replies_are_ignored() {
    forged_replies_are_ignored(Platform::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_forged_replies_are_ignored() {
    let server = NatsServer::start();
    forged_replies_are_ignored(nats(&server).await).await;
}

/// The process's resident memory and its peak since the last reset, in MiB (Linux).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn reset_peak_rss() {
    // Resets VmHWM to the current RSS (Linux); without it the figure is the process's peak.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct ManyCalcs {
    expressions: Vec<String>,
}

impl Request for ManyCalcs {
    const EVENT: &'static str = "many.requested";
    type Reply = usize;
}

async fn many(mut task: TaskContext<ManyCalcs>) -> soorma::Result<Delegated> {
    let requests: Vec<soorma_examples::calculator::Calculate> = task
        .data
        .expressions
        .iter()
        .map(|e| soorma_examples::calculator::Calculate {
            expression: e.clone(),
        })
        .collect();
    task.fan_out(requests).await
}

async fn many_done(
    _task: TaskContext<ManyCalcs>,
    replies: Vec<Result<soorma_examples::calculator::Calculated, SubTaskFailed>>,
) -> soorma::Result<usize> {
    Ok(replies.iter().filter(|r| r.is_ok()).count())
}

/// A fan-out of `n` calculations on a fresh embedded platform: the peak RSS growth (MiB) and
/// the time it took.
async fn fan_out_peak(n: usize) -> (f64, Duration) {
    let platform = Platform::embedded();
    let calc = calculator().start(&platform).await.unwrap();
    let worker = Worker::new("many")
        .use_registered_handlers(false)
        .handler(Handler::task(many))
        .handler(Handler::fan_in::<Vec<soorma_examples::calculator::Calculate>>().handle(many_done))
        .start(&platform)
        .await
        .unwrap();
    let expressions: Vec<String> = (0..n).map(|i| format!("({i} + 1) * 2")).collect();
    reset_peak_rss();
    let (before, _) = rss_mib();
    let started = std::time::Instant::now();
    let done = platform
        .client("load")
        .with_timeout(Duration::from_secs(600))
        .call(ManyCalcs { expressions })
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done, n);
    let (_, peak) = rss_mib();
    worker.shutdown().await.unwrap();
    calc.shutdown().await.unwrap();
    (peak - before, took)
}

/// Prints how the peak memory of a fan-out grows with its size (linear, not quadratic). Run
/// alone or with `--test-threads=1`: it reads the process's memory.
/// `cargo test -p soorma-tests --test gateway -- --ignored --nocapture fan_out_memory`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures, takes a minute"]
async fn fan_out_memory_grows_linearly() {
    let mut figures = Vec::new();
    for n in [2_500, 5_000, 10_000] {
        let (growth, took) = fan_out_peak(n).await;
        println!(
            "FANOUT n={n} peak_rss_growth_mib={growth:.1} took_ms={}",
            took.as_millis()
        );
        figures.push(growth);
    }
}

/// The examples' calculator behind the gateway: 200,000 nested parentheses fail the task with
/// a clear error (before: a stack overflow aborted the process), and a batch over the cap
/// fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_calculator_input_fails_the_task_not_the_process() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let deep = format!("{}1{}", "(".repeat(200_000), ")".repeat(200_000));
    let r = s
        .send(
            "calculator",
            json!([{"data": {"expression": deep}}]),
            json!({}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_FAILED",
        "{}",
        &r.to_string()[..300]
    );
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("nested deeper than"), "{text}");
    // The 400 kB message is not kept whole (over the per-task budget), the task is.
    assert!(
        task["history"][0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("not kept")
    );
    let too_many: Vec<String> = (0..=soorma_examples::calculator::MAX_BATCH)
        .map(|i| format!("{i} + 1"))
        .collect();
    let r = s
        .send(
            "batch-calculator",
            json!([{"data": {"expressions": too_many}}]),
            json!({}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("at most 1000"), "{text}");
    // Still serving.
    let r = s
        .send(
            "calculator",
            json!([{"data": {"expression": "6 * 7"}}]),
            json!({}),
        )
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    s.shutdown().await;
}

/// 10,000 tasks through the gateway, one in ten carrying 1 MB: the gateway keeps what its
/// limits allow and the resident memory levels off once eviction starts. Prints the figures.
/// `cargo test -p soorma-tests --test gateway -- --ignored --nocapture load`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures, takes about 3 minutes in a debug build"]
async fn load_10000_tasks_memory_levels_off() {
    use soorma::gateway::TaskLimits;
    let platform = Platform::embedded();
    let agent = Tool::new("multi")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("echo.requested", echo))
        .start(&platform)
        .await
        .unwrap();
    let limits = TaskLimits::default()
        .per_task_bytes(3 << 20)
        .total_bytes(64 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::new(&platform)
        .agent("multi")
        .limits(limits)
        .spawn(listener)
        .await
        .unwrap();
    let url = format!("{}/agents/multi", gateway.url());
    let http = http_client();
    let big = "x".repeat(1 << 20);
    let (start_rss, _) = rss_mib();
    println!("LOAD tasks=0 rss_mib={start_rss:.0}");
    let mut figures = Vec::new();
    const TOTAL: usize = 10_000;
    const CONCURRENT: usize = 16;
    for round in 0..TOTAL / 1_000 {
        let mut calls = tokio::task::JoinSet::new();
        for lane in 0..CONCURRENT {
            let (http, url, big) = (http.clone(), url.clone(), big.clone());
            calls.spawn(async move {
                for i in (lane..1_000).step_by(CONCURRENT) {
                    let text = if i % 10 == 0 { big.clone() } else { format!("task {i}") };
                    let body = json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                        "message": {"messageId": format!("m-{i}"), "role": "ROLE_USER",
                                    "parts": [{"text": text}]}}});
                    let r: Value = http.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
                    assert_eq!(
                        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                        "{}",
                        &r.to_string()[..200.min(r.to_string().len())]
                    );
                }
            });
        }
        while let Some(done) = calls.join_next().await {
            done.unwrap();
        }
        let (rss, _) = rss_mib();
        let tasks = (round + 1) * 1_000;
        println!("LOAD tasks={tasks} rss_mib={rss:.0}");
        figures.push(rss);
    }
    // Without bounds, 1,000 tasks of 1 MB request and 1 MB result: 2 GB and more kept.
    let listed: Value = http
        .post(&url)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100, "includeArtifacts": true}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let page = listed.to_string().len();
    println!(
        "LOAD kept_tasks={} list_page_bytes={page}",
        listed["result"]["totalSize"]
    );
    // A page carries at most `page_bytes` (1 MiB) of tasks, or one task when the first alone is
    // larger (a task is at most `per_task_bytes`, 3 MiB here); unbounded, it was 160 MB.
    assert!(
        page < (1 << 20) + (3 << 20) + (64 << 10),
        "a page is bounded in bytes: {page}"
    );
    let (half, end) = (figures[4], figures[9]);
    assert!(
        end - half < 150.0,
        "resident memory keeps growing: {figures:?}"
    );
    gateway.shutdown().await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_are_capped_per_tenant() {
    use soorma::gateway::TaskLimits;
    let s = Setup::slow_only(TaskLimits::default().max_streams_per_tenant(2)).await;
    let task = s.start_slow(&[], Some("acme"), 4_000).await;
    let subscribe = |tenant: &str| {
        s.http
            .post(s.url("/agents/multi"))
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                          "params": {"id": task, "tenant": tenant}}),
            )
            .send()
    };
    let is_stream = |r: &reqwest::Response| {
        r.headers().get("content-type").is_some_and(|c| {
            c.to_str()
                .unwrap_or_default()
                .starts_with("text/event-stream")
        })
    };
    let first = subscribe("acme").await.unwrap();
    let second = subscribe("acme").await.unwrap();
    assert!(is_stream(&first) && is_stream(&second));
    let third: Value = subscribe("acme").await.unwrap().json().await.unwrap();
    assert_eq!(error_code(&third), -32000, "{third}");
    assert!(
        third["error"]["message"]
            .as_str()
            .unwrap()
            .contains("streams open"),
        "{third}"
    );
    // Another tenant is not held back (the task is acme's: not found, but not refused).
    let globex: Value = subscribe("globex").await.unwrap().json().await.unwrap();
    assert_eq!(error_code(&globex), -32001, "{globex}");
    // A stream that ends gives its place back.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let again = subscribe("acme").await.unwrap();
        if is_stream(&again) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place was not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_in_flight_are_capped_and_cancel_frees_a_slot() {
    use soorma::gateway::TaskLimits;
    let s = Setup::slow_only(TaskLimits::default().max_in_flight(1)).await;
    let first = s.start_slow(&[], None, 5_000).await;
    let refused = s
        .rpc_as(
            &[],
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"nap_ms": 1}}]}}),
        )
        .await;
    assert_eq!(error_code(&refused), -32000, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight"),
        "{refused}"
    );
    let canceled = s.rpc_as(&[], "CancelTask", json!({"id": first})).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    // The canceled task no longer holds its slot; historyLength 0 leaves the history out.
    let r = s
        .rpc_as(
            &[],
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"nap_ms": 1}}]},
                   "configuration": {"historyLength": 0}}),
        )
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    assert!(
        r["result"]["task"]["history"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{r}"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_batches_are_answered_per_request() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let post = |body: Value| {
        let request = s.http.post(s.url("/agents/calculator")).json(&body);
        async move { request.send().await.unwrap() }
    };
    let send = |id: Value, expression: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {"message": {
            "messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"expression": expression}}]}}})
    };
    let r: Value = post(json!([
        send(json!(1), "1 + 1"),
        {"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "notification"}},
        {"jsonrpc": "2.0", "id": "b", "method": "GetTask", "params": {"id": "nope"}},
        42,
        send(json!(3), "2 * 3"),
        {"jsonrpc": "2.0", "id": "s", "method": "message/stream", "params": {"message": {
            "kind": "message", "messageId": "m", "role": "user",
            "parts": [{"kind": "data", "data": {"expression": "1"}}]}}},
    ]))
    .await
    .json()
    .await
    .unwrap();
    let answers = r.as_array().unwrap_or_else(|| panic!("an array: {r}"));
    assert_eq!(answers.len(), 5, "the notification gets no answer: {r}");
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(
        answers[0]["result"]["task"]["artifacts"][0]["parts"][0]["data"]["result"],
        2.0
    );
    assert_eq!(
        (answers[1]["id"].clone(), error_code(&answers[1])),
        (json!("b"), -32001)
    );
    assert_eq!(error_code(&answers[2]), -32600);
    assert_eq!(
        answers[3]["result"]["task"]["artifacts"][0]["parts"][0]["data"]["result"],
        6.0
    );
    assert_eq!(
        (answers[4]["id"].clone(), error_code(&answers[4])),
        (json!("s"), -32600)
    );
    // The streaming request was refused before it started a task: two tasks, not three.
    let listed = s.rpc("calculator", "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
    let empty: Value = post(json!([])).await.json().await.unwrap();
    assert_eq!(error_code(&empty), -32600, "{empty}");
    let too_long: Vec<Value> = (0..101)
        .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "GetTask", "params": {"id": "x"}}))
        .collect();
    let too_long: Value = post(Value::Array(too_long)).await.json().await.unwrap();
    assert_eq!(error_code(&too_long), -32600, "{too_long}");
    let only_notifications =
        post(json!([{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}])).await;
    assert_eq!(only_notifications.status().as_u16(), 204);
    s.shutdown().await;
}

/// A v0.3 client, which the v0.3 card at `/.well-known/agent.json` invites, is served on the
/// same interface: v0.3 method names, messages, tasks and stream events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v0_3_clients_are_served() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let (_, card) = s.get("/.well-known/agent.json").await;
    let url = card["url"].as_str().unwrap().to_owned();
    let call = |method: &str, params: Value| {
        let request = s
            .http
            .post(&url)
            .json(&json!({"jsonrpc": "2.0", "id": "v03", "method": method, "params": params}));
        async move { request.send().await.unwrap() }
    };
    let message = |expression: &str| {
        json!({"kind": "message", "messageId": "m-03", "role": "user",
               "parts": [{"kind": "data", "data": {"expression": expression}}]})
    };
    let sent: Value = call("message/send", json!({"message": message("6 * 7")}))
        .await
        .json()
        .await
        .unwrap();
    let task = &sent["result"];
    assert_eq!(task["kind"], "task", "{sent}");
    assert_eq!(task["status"]["state"], "completed", "{sent}");
    assert_eq!(task["artifacts"][0]["parts"][0]["kind"], "data");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"]["result"], 42.0);
    assert_eq!(task["history"][0]["role"], "user");
    let id = task["id"].as_str().unwrap();
    let got: Value = call("tasks/get", json!({"id": id, "historyLength": 0}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["result"]["status"]["state"], "completed", "{got}");
    let missing: Value = call("tasks/cancel", json!({"id": "nope"}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(error_code(&missing), -32001);
    let events = read_sse(call("message/stream", json!({"message": message("1 + 1")})).await).await;
    assert_eq!(events[0]["result"]["kind"], "task", "{events:?}");
    let last = &events.last().unwrap()["result"];
    assert_eq!(
        (
            last["kind"].as_str(),
            last["final"].as_bool(),
            last["status"]["state"].as_str()
        ),
        (Some("status-update"), Some(true), Some("completed")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["result"]["kind"] == "artifact-update"),
        "{events:?}"
    );
    s.shutdown().await;
}

/// A `contextId` the bus would refuse (it becomes the request's session id) is the client's
/// mistake: -32602 naming it, and no task is stored; one at the limit starts a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_context_id_is_invalid_params() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let message = |context: &str| {
        json!({"message": {"messageId": "m-1", "role": "ROLE_USER", "contextId": context,
            "parts": [{"data": {"expression": "1+1"}}]}})
    };
    for context in ["x".repeat(soorma::MAX_ID_LEN + 1), "line\nbreak".to_owned()] {
        let r = s.rpc("calculator", "SendMessage", message(&context)).await;
        assert_eq!(error_code(&r), -32602, "{r}");
        assert!(r.to_string().contains("contextId"), "{r}");
    }
    let listed = s.rpc("calculator", "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let at_limit = "x".repeat(soorma::MAX_ID_LEN);
    let ok = s.rpc("calculator", "SendMessage", message(&at_limit)).await;
    assert!(ok.get("error").is_none(), "{ok}");
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

/// CancelTask stops the agent's handler (its future is dropped within a second), for the
/// task's own tenant only.
async fn cancel_task_stops_the_agents_handler(platform: Platform) {
    let slept = Tracked::default();
    let agent = sleeper("multi", "slow.requested", &slept)
        .start(&platform)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway = Gateway::new(&platform)
        .agent("multi")
        .spawn(listener)
        .await
        .unwrap();
    let s = Setup {
        agents: vec![agent],
        gateway,
        http: http_client(),
    };
    let id = s.start_slow(&[], Some("acme"), 30_000).await;
    slept.wait_started(1, Duration::from_secs(20)).await;
    // Another tenant cannot cancel it.
    let other = s
        .rpc_as(&[], "CancelTask", json!({"id": id, "tenant": "globex"}))
        .await;
    assert_eq!(error_code(&other), -32001, "{other}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slept.dropped(), 0);

    let canceled = s
        .rpc_as(&[], "CancelTask", json!({"id": id, "tenant": "acme"}))
        .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    slept
        .wait_dropped(1, Duration::from_secs(10), "CancelTask")
        .await;
    assert_eq!(slept.finished(), 0);
    tokio::time::timeout(Duration::from_secs(5), s.shutdown())
        .await
        .expect("the agent waited for the canceled handler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_cancel_task_stops_the_agents_handler() {
    cancel_task_stops_the_agents_handler(Platform::embedded()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_cancel_task_stops_the_agents_handler() {
    let server = NatsServer::start();
    cancel_task_stops_the_agents_handler(nats(&server).await).await;
}

/// The probe "task ids are guessable (process seed + counter): another tenant's task turned up
/// on the 4th guess": task and context ids are random UUIDs (v4), with nothing in common
/// between two tasks started one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_and_context_ids_are_random() {
    let s = Setup::start(&Platform::embedded(), None).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = s
            .send(
                "calculator",
                json!([{"data": {"expression": "1 + 1"}}]),
                json!({"configuration": {"returnImmediately": true}}),
            )
            .await;
        let task = &r["result"]["task"];
        for id in [&task["id"], &task["contextId"]] {
            let id = id.as_str().unwrap().to_owned();
            let uuid_v4 = id.len() == 32
                && id.bytes().all(|b| b.is_ascii_hexdigit())
                && id.as_bytes()[12] == b'4';
            assert!(uuid_v4, "not a random (v4) UUID: {id}");
            ids.push(id);
        }
    }
    // Consecutive tasks share no prefix a counter would leave (2^-32 odds of a false alarm).
    assert_ne!(ids[0][..8], ids[2][..8], "{ids:?}");
    assert_ne!(ids[1][..8], ids[3][..8], "{ids:?}");
    s.shutdown().await;
}

/// A `nats-server -js` with its monitoring endpoint on a free port, and that port.
fn monitored_server() -> (NatsServer, String) {
    let monitor = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    (NatsServer::start_with(&["-js", "-m", &monitor]), monitor)
}

/// A page (`/subsz`, `/jsz`) of the monitoring endpoint on `port`.
async fn monitoring(port: &str, page: &str) -> Value {
    http_client()
        .get(format!("http://127.0.0.1:{port}/{page}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The probe "the gateway builds a new `Client` (new subscriptions) for every request that
/// names a tenant": requests for 40 different tenants leave the server's subscription count
/// where one tenant's requests left it (read from nats-server's monitoring endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_many_tenants_add_no_subscriptions() {
    let (server, monitor) = monitored_server();
    let s = Setup::start(&nats(&server).await, None).await;
    let subscriptions = || async {
        monitoring(&monitor, "subsz").await["num_subscriptions"]
            .as_u64()
            .unwrap()
    };
    let add = |tenant: String| {
        let message = json!({"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": {"expression": "1 + 1"}}]});
        s.rpc(
            "calculator",
            "SendMessage",
            json!({"tenant": tenant, "message": message}),
        )
    };
    let done = add("tenant-0".into()).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let before = subscriptions().await;
    for i in 1..=40 {
        let done = add(format!("tenant-{i}")).await;
        assert_eq!(
            done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{done}"
        );
    }
    let after = subscriptions().await;
    assert!(
        after <= before + 2,
        "40 tenants' requests added subscriptions: {before} before, {after} after"
    );
    s.shutdown().await;
}

/// Cards are public: 400 of them (20 clients at once) share registry reads instead of each
/// reading the registry bucket (a JetStream API request for its keys, then one read per
/// agent); counted by nats-server's JetStream API total (`/jsz`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_card_requests_share_registry_reads() {
    let (server, monitor) = monitored_server();
    let s = Setup::start(&nats(&server).await, None).await;
    let api_requests = || async {
        monitoring(&monitor, "jsz").await["api"]["total"]
            .as_u64()
            .unwrap()
    };
    let (status, _) = s
        .get("/agents/calculator/.well-known/agent-card.json")
        .await;
    assert_eq!(status, 200);
    let before = api_requests().await;
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let (http, url) = (
                s.http.clone(),
                s.url("/agents/calculator/.well-known/agent-card.json"),
            );
            tokio::spawn(async move {
                for _ in 0..20 {
                    let r = http.get(&url).send().await.unwrap();
                    assert_eq!(r.status().as_u16(), 200);
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let after = api_requests().await;
    // A read (2 API requests with one agent registered) at most every second, plus one per
    // card whose read is over a second old when it arrives: a few, not 800.
    let bound = 4 * (started.elapsed().as_secs() + 2);
    assert!(
        after - before <= bound.min(100),
        "400 cards made {} JetStream API requests in {:?}",
        after - before,
        started.elapsed()
    );
    s.shutdown().await;
}

/// Gateways started on a platform and gone again (stopped, or their handle dropped) leave no
/// consumer on the server, and a dropped gateway stops serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_that_come_and_go_leave_no_consumer_behind() {
    let (server, monitor) = monitored_server();
    let platform = nats(&server).await;
    let subscriptions = || async {
        monitoring(&monitor, "subsz").await["num_subscriptions"]
            .as_u64()
            .unwrap()
    };
    let s = Setup::start(&platform, None).await;
    // The first message creates the streams; the agents' consumers exist already.
    let first = s.send("multi", json!([{"text": "first"}]), json!({})).await;
    assert_eq!(
        first["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{first}"
    );
    let before = consumer_count(&platform).await;
    let subscribed = subscriptions().await;
    for round in 0..4 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = Gateway::new(&platform)
            .agent("multi")
            .spawn(listener)
            .await
            .unwrap();
        let message = json!({"messageId": format!("m-{round}"), "role": "ROLE_USER",
            "parts": [{"text": format!("round {round}")}]});
        let done: Value = s
            .http
            .post(format!("{}/agents/multi", gateway.url()))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            done["result"]["task"]["artifacts"][0]["parts"][0]["text"],
            json!(format!("round {round}")),
            "{done}"
        );
        if round % 2 == 0 {
            gateway.shutdown().await;
        } else {
            let url = gateway.url().to_owned();
            drop(gateway);
            // Dropping the handle stops the server (as a stop would, without waiting).
            let refused = tokio::time::timeout(Duration::from_secs(10), async {
                while s
                    .http
                    .get(format!("{url}/.well-known/agent-card.json"))
                    .send()
                    .await
                    .is_ok()
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await;
            assert!(refused.is_ok(), "a dropped gateway still answers at {url}");
        }
    }
    assert_eq!(
        consumer_count(&platform).await,
        before,
        "four gateways came and went"
    );
    // Nor a subscription: each gateway's background tasks (its replies, its progress) end
    // with it, stopped or dropped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = subscriptions().await;
        if now <= subscribed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "four gateways came and went and left {} subscriptions ({subscribed} before)",
            now
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.shutdown().await;
}

/// 10,000 gateway calls over HTTP on NATS (messages for 7 tenants, task reads and listings,
/// agent cards: each reads the registry) leave the server's consumer count where it was. Before
/// registry reads stopped creating consumers, about 1,000 gateway calls left every registry
/// reader on the server failing with "maximum consumers limit reached".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_gateway_calls_leave_no_consumer_behind() {
    let started = std::time::Instant::now();
    let server = NatsServer::start();
    let platform = nats(&server).await;
    let consumers = || consumer_count(&platform);
    let s = Setup::start(&platform, None).await;
    // The first message creates the streams; the agents' consumers exist already.
    let first = s.send("multi", json!([{"text": "first"}]), json!({})).await;
    let first = first["result"]["task"]["id"].as_str().unwrap().to_owned();
    let before = consumers().await;
    let mut highest = before;

    for batch in 0..100_usize {
        let calls = (0..100_usize).map(|i| {
            let (s, first) = (&s, &first);
            async move {
                let n = batch * 100 + i;
                match i % 10 {
                    0 => {
                        let path = if n % 20 == 0 {
                            "/.well-known/agent-card.json"
                        } else {
                            "/agents/multi/.well-known/agent-card.json"
                        };
                        let (status, card) = s.get(path).await;
                        assert_eq!(status, 200, "{card}");
                    }
                    1 => {
                        let got = s.rpc("multi", "GetTask", json!({"id": first})).await;
                        assert_eq!(got["result"]["id"], json!(first), "{got}");
                    }
                    2 => {
                        let listed = s.rpc("multi", "ListTasks", json!({"pageSize": 10})).await;
                        assert!(listed["result"]["tasks"].is_array(), "{listed}");
                    }
                    _ => {
                        let message = json!({"messageId": format!("m-{n}"), "role": "ROLE_USER",
                            "parts": [{"text": n.to_string()}]});
                        let tenant = format!("t{}", n % 7);
                        let done = s
                            .rpc(
                                "multi",
                                "SendMessage",
                                json!({"tenant": tenant, "message": message}),
                            )
                            .await;
                        assert_eq!(
                            done["result"]["task"]["artifacts"][0]["parts"][0]["text"],
                            json!(n.to_string()),
                            "{done}"
                        );
                    }
                }
            }
        });
        futures_util::future::join_all(calls).await;
        if batch % 10 == 9 {
            highest = highest.max(consumers().await);
        }
    }
    let after = consumers().await;
    assert_eq!(
        (after, highest),
        (before, before),
        "the consumer count stays flat: (after, highest seen) against {before} before"
    );
    s.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(180),
        "took {:?}",
        started.elapsed()
    );
}
