//! `soorma::llm` against a real local HTTP server speaking the chat-completions format
//! (a small HTTP/1.1 server on 127.0.0.1 so that tests control every byte and every pause).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use soorma::llm::{ChatMessage, ChatModel, ChatModelExt, LlmClient, LlmConfig, LlmError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------------------------
// The test server
// ---------------------------------------------------------------------------------------------

/// A request as the server received it.
#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn messages(&self) -> Vec<(String, String)> {
        self.body["messages"]
            .as_array()
            .expect("messages array")
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// What the server answers.
struct Reply {
    status: u16,
    content_type: &'static str,
    /// Wait before sending anything.
    delay: Duration,
    /// Body pieces, each written and flushed separately, `gap` apart. The body ends when the
    /// connection closes (no content-length).
    parts: Vec<Vec<u8>>,
    gap: Duration,
    /// Keep the connection open this long after the last part.
    hold: Duration,
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }

    fn raw(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            content_type,
            delay: Duration::ZERO,
            parts: vec![body.into()],
            gap: Duration::ZERO,
            hold: Duration::ZERO,
        }
    }

    /// A chat completion whose assistant message is `content`.
    fn completion(content: &str) -> Self {
        Self::json(
            200,
            json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": "test-model",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }),
        )
    }

    /// An SSE body cut at the given byte offsets.
    fn sse_split(body: &[u8], cuts: &[usize]) -> Self {
        let mut parts = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain([body.len()].iter()) {
            parts.push(body[start..cut].to_vec());
            start = cut;
        }
        Self {
            parts,
            gap: Duration::from_millis(15),
            ..Self::raw(200, "text/event-stream", Vec::new())
        }
    }
}

type Handler = dyn Fn(usize, &Recorded) -> Reply + Send + Sync;

struct TestServer {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl TestServer {
    /// Serves `handler(request_index, request)` on 127.0.0.1 until the test's runtime ends.
    async fn start(handler: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, handler.clone(), recorded.clone()));
            }
        });
        Self { base_url, requests }
    }

    /// Answers every request with a clone of the same completion text.
    async fn replying(content: &'static str) -> Self {
        Self::start(move |_, _| Reply::completion(content)).await
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    fn client(&self, config: LlmConfig) -> LlmClient {
        LlmClient::new(config.with_base_url(&self.base_url)).unwrap()
    }
}

async fn serve(mut socket: TcpStream, handler: Arc<Handler>, requests: Arc<Mutex<Vec<Recorded>>>) {
    socket.set_nodelay(true).unwrap();
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let reply = {
        let mut all = requests.lock().unwrap();
        all.push(request.clone());
        handler(all.len() - 1, &request)
    };
    tokio::time::sleep(reply.delay).await;
    let head = format!(
        "HTTP/1.1 {} Test\r\ncontent-type: {}\r\nconnection: close\r\n\r\n",
        reply.status, reply.content_type
    );
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for (i, part) in reply.parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(reply.gap).await;
        }
        if socket.write_all(part).await.is_err() || socket.flush().await.is_err() {
            return;
        }
    }
    tokio::time::sleep(reply.hold).await;
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn ask(question: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user(question),
    ]
}

#[derive(Debug, PartialEq, Deserialize, JsonSchema)]
struct Review {
    title: String,
    /// How good, from 0 to 1.
    #[schemars(range(min = 0.0, max = 1.0))]
    score: f64,
}

// ---------------------------------------------------------------------------------------------
// Plain completions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn complete_posts_a_chat_completion_and_returns_the_message() {
    let server = TestServer::replying("Paris.").await;
    let client = server.client(LlmConfig::new("test-model").with_temperature(0.25));

    let reply = client.complete(&ask("Capital of France?")).await.unwrap();

    assert_eq!(reply, "Paris.");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("authorization"), None, "no key configured");
    assert_eq!(
        request.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Capital of France?"},
            ],
            "temperature": 0.25,
        })
    );
}

#[tokio::test]
async fn api_key_is_sent_as_a_bearer_token() {
    let server = TestServer::replying("ok").await;
    let client = server.client(LlmConfig::new("m").with_api_key("sk-test-123"));

    client.complete(&ask("hi")).await.unwrap();

    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-test-123")
    );
}

#[tokio::test]
async fn the_client_works_as_a_dyn_chat_model() {
    let server = TestServer::replying("{\"title\": \"Dune\", \"score\": 0.8}").await;
    let model: Arc<dyn ChatModel> = Arc::new(server.client(LlmConfig::new("m")));

    let review: Review = model.structured(&ask("Review Dune")).await.unwrap();

    assert_eq!(review.title, "Dune");
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Streaming
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stream_reassembles_deltas_split_across_reads() {
    let body = concat!(
        ": keep-alive comment\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo, \"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"wörld 🦀\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after done\"}}]}\n\n",
    )
    .as_bytes();
    // Cut inside "data:", inside the JSON, between \r and \n, and inside the multi-byte ö and 🦀.
    let o_umlaut = body.windows(2).position(|w| w == "ö".as_bytes()).unwrap();
    let crab = body.windows(4).position(|w| w == "🦀".as_bytes()).unwrap();
    let crlf = body.windows(2).position(|w| w == b"\r\n").unwrap();
    let hel = body.windows(3).position(|w| w == b"Hel").unwrap();
    let mut cuts = vec![3, 25, hel + 1, crlf + 1, o_umlaut + 1, crab + 1, crab + 3];
    cuts.sort_unstable();
    let server = TestServer::start(move |_, _| Reply::sse_split(body, &cuts)).await;
    let client = server.client(LlmConfig::new("m"));

    let stream = client.stream(&ask("Greet")).await.unwrap();
    let deltas: Vec<String> = stream.map(|d| d.unwrap()).collect().await;

    assert_eq!(deltas, ["Hel", "lo, ", "wörld 🦀"]);
    let request = &server.requests()[0];
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn a_stalled_stream_ends_with_a_timeout_error() {
    let server = TestServer::start(|_, _| Reply {
        hold: Duration::from_secs(5),
        ..Reply::raw(
            200,
            "text/event-stream",
            "data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n",
        )
    })
    .await;
    let client = server.client(LlmConfig::new("m").with_timeout(Duration::from_millis(300)));

    let started = Instant::now();
    let mut stream = client.stream(&ask("Slowly")).await.unwrap();
    assert_eq!(stream.next().await.unwrap().unwrap(), "partial");
    let err = stream.next().await.unwrap().unwrap_err();

    assert!(
        matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Timeout { after, .. }) if *after == Duration::from_millis(300)),
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(stream.next().await.is_none());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_stream_request_rejected_with_429_is_a_retryable_http_error() {
    let server =
        TestServer::start(|_, _| Reply::json(429, json!({"error": {"message": "rate limited"}})))
            .await;
    let client = server.client(LlmConfig::new("m"));

    let err = client.stream(&ask("hi")).await.unwrap_err();

    assert!(
        matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Http { status: 429, body, .. }) if body.contains("rate limited")),
        "{err}"
    );
    assert!(err.is_retryable());
}

// ---------------------------------------------------------------------------------------------
// Structured output
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn structured_output_from_a_fenced_reply() {
    let server = TestServer::replying(
        "Sure! Here is the review:\n```json\n{\"title\": \"Dune\", \"score\": 0.9}\n```\nEnjoy.",
    )
    .await;
    let client = server.client(LlmConfig::new("m"));

    let review: Review = client.structured(&ask("Review Dune")).await.unwrap();

    assert_eq!(
        review,
        Review {
            title: "Dune".into(),
            score: 0.9
        }
    );
    let request = &server.requests()[0];
    let messages = request.messages();
    assert_eq!(
        messages.len(),
        2,
        "the schema joins the existing system message"
    );
    assert_eq!(messages[0].0, "system");
    assert!(messages[0].1.starts_with("You are terse.\n\n"));
    assert!(messages[0].1.contains("JSON Schema"));
    assert!(messages[0].1.contains("\"score\""));
    assert!(messages[0].1.contains("\"maximum\": 1.0"));
    assert!(
        request.body.get("response_format").is_none(),
        "off by default"
    );
}

#[tokio::test]
async fn invalid_json_is_retried_with_the_validation_error() {
    let server = TestServer::start(|i, _| match i {
        0 => Reply::completion("{\"title\": \"Dune\", \"score\": }"),
        _ => Reply::completion("{\"title\": \"Dune\", \"score\": 0.7}"),
    })
    .await;
    let client = server.client(LlmConfig::new("m"));

    let review: Review = client.structured(&ask("Review Dune")).await.unwrap();

    assert_eq!(review.score, 0.7);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = requests[0].messages();
    let second = requests[1].messages();
    assert_eq!(second.len(), first.len() + 2);
    assert_eq!(second[..first.len()], first[..]);
    assert_eq!(
        second[first.len()],
        (
            "assistant".to_owned(),
            "{\"title\": \"Dune\", \"score\": }".to_owned()
        )
    );
    let (role, feedback) = &second[first.len() + 1];
    assert_eq!(role, "user");
    assert!(feedback.contains("rejected"), "{feedback}");
    assert!(
        feedback.contains("does not parse") && feedback.contains("expected value"),
        "the serde_json error reaches the model: {feedback}"
    );
}

#[tokio::test]
async fn a_schema_violation_every_time_keeps_every_attempt() {
    let server = TestServer::replying("{\"title\": \"Dune\", \"score\": 7}").await;
    let client = server.client(LlmConfig::new("m").with_max_attempts(3));

    let err = client
        .structured::<Review>(&ask("Review Dune"))
        .await
        .unwrap_err();

    assert!(!err.is_retryable());
    assert!(err.to_string().contains("after 3 attempt(s)"), "{err}");
    let Some(LlmError::StructuredOutput {
        type_name,
        attempts,
    }) = err.downcast_ref::<LlmError>()
    else {
        panic!("unexpected error: {err}");
    };
    assert!(type_name.ends_with("Review"));
    assert_eq!(attempts.len(), 3);
    for attempt in attempts {
        assert_eq!(attempt.reply, "{\"title\": \"Dune\", \"score\": 7}");
        assert!(attempt.error.contains("`/score`"), "{}", attempt.error);
        assert!(attempt.error.contains("maximum"), "{}", attempt.error);
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // The third request carries both earlier rejections.
    let third = requests[2].messages();
    let feedback = third
        .iter()
        .filter(|(role, text)| role == "user" && text.contains("`/score`"))
        .count();
    assert_eq!(feedback, 2);
}

#[tokio::test]
async fn json_schema_response_format_is_sent_when_enabled() {
    let server = TestServer::replying("{\"title\": \"Dune\", \"score\": 0.5}").await;
    let client = server.client(LlmConfig::new("m").with_json_schema_response_format(true));

    let _: Review = client.structured(&ask("Review Dune")).await.unwrap();
    client.complete(&ask("plain")).await.unwrap();

    let requests = server.requests();
    let format = &requests[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "Review");
    assert_eq!(
        format["json_schema"]["schema"]["required"],
        json!(["title", "score"])
    );
    assert!(
        requests[1].body.get("response_format").is_none(),
        "plain completions never carry it"
    );
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn http_errors_are_typed_with_status_and_body() {
    let server = TestServer::start(|i, _| match i {
        0 => Reply::raw(500, "text/plain", "upstream overloaded"),
        1 => Reply::json(400, json!({"error": {"message": "unknown model `nope`"}})),
        _ => Reply::raw(503, "text/plain", "x".repeat(10_000)),
    })
    .await;
    let client = server.client(LlmConfig::new("nope"));

    let err = client.complete(&ask("hi")).await.unwrap_err();
    let Some(LlmError::Http { status, body, url }) = err.downcast_ref::<LlmError>() else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(*status, 500);
    assert_eq!(body, "upstream overloaded");
    assert!(url.ends_with("/v1/chat/completions"));
    assert!(err.is_retryable());
    assert!(err.to_string().contains("HTTP 500"), "{err}");

    let err = client.complete(&ask("hi")).await.unwrap_err();
    assert!(
        matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Http { status: 400, body, .. }) if body.contains("unknown model")),
        "{err}"
    );
    assert!(!err.is_retryable());

    let err = client.complete(&ask("hi")).await.unwrap_err();
    let Some(LlmError::Http {
        status: 503, body, ..
    }) = err.downcast_ref::<LlmError>()
    else {
        panic!("unexpected error: {err}");
    };
    assert!(body.len() < 2_000, "the body is cut to an excerpt");
}

#[tokio::test]
async fn an_http_error_during_structured_output_is_returned_as_is() {
    let server = TestServer::start(|i, _| match i {
        0 => Reply::completion("no json here"),
        _ => Reply::raw(502, "text/plain", "bad gateway"),
    })
    .await;
    let client = server.client(LlmConfig::new("m"));

    let err = client
        .structured::<Review>(&ask("Review Dune"))
        .await
        .unwrap_err();

    assert!(
        matches!(
            err.downcast_ref::<LlmError>(),
            Some(LlmError::Http { status: 502, .. })
        ),
        "{err}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_slow_server_is_a_timeout_error() {
    let server = TestServer::start(|_, _| Reply {
        delay: Duration::from_secs(5),
        ..Reply::completion("too late")
    })
    .await;
    let client = server.client(LlmConfig::new("m").with_timeout(Duration::from_millis(300)));

    let started = Instant::now();
    let err = client.complete(&ask("hi")).await.unwrap_err();

    assert!(
        matches!(err.downcast_ref::<LlmError>(), Some(LlmError::Timeout { after, .. }) if *after == Duration::from_millis(300)),
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_body_that_is_not_a_completion_is_a_malformed_error() {
    let server = TestServer::start(|i, _| match i {
        0 => Reply::raw(200, "text/html", "<html>maintenance</html>"),
        _ => Reply::json(200, json!({"object": "list", "data": []})),
    })
    .await;
    let client = server.client(LlmConfig::new("m"));

    for _ in 0..2 {
        let err = client.complete(&ask("hi")).await.unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<LlmError>(),
                Some(LlmError::Malformed { .. })
            ),
            "{err}"
        );
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn connection_refused_is_a_retryable_transport_error() {
    // Take a free port, then close it.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client =
        LlmClient::new(LlmConfig::new("m").with_base_url(format!("http://127.0.0.1:{port}/v1")))
            .unwrap();

    let err = client.complete(&ask("hi")).await.unwrap_err();

    assert!(
        matches!(
            err.downcast_ref::<LlmError>(),
            Some(LlmError::Transport { .. })
        ),
        "{err}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn scripted_and_http_models_are_interchangeable() {
    let server = TestServer::replying("from http").await;
    let models: Vec<Arc<dyn ChatModel>> = vec![
        Arc::new(soorma::llm::ScriptedLlm::new(["from script"])),
        Arc::new(server.client(LlmConfig::new("m"))),
    ];
    let mut replies = Vec::new();
    for model in &models {
        replies.push(model.complete(&ask("who?")).await.unwrap());
        assert_eq!(model.max_attempts(), 3);
    }
    assert_eq!(replies, ["from script", "from http"]);
    assert_eq!(server.requests()[0].messages()[1].0, "user");
}

// ---------------------------------------------------------------------------------------------
// LLM planning over HTTP
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_plan_over_http_sends_the_problems_back_and_accepts_the_fix() {
    use soorma::planner::llm::{PlanningOptions, create_plan};
    use soorma::{AgentCapability, EventDefinition, Topic};

    let plan = |to: &str| {
        format!(
            "Here is the plan:\n```json\n{}\n```",
            json!({
                "plan_type": "lookup",
                "states": {
                    "start": {"state_name": "start",
                              "action": {"event_type": "lookup.requested", "response_event": "lookup.completed",
                                         "data": {"word": "{{goal.word}}"}},
                              "transitions": [{"on_event": "lookup.completed", "to_state": to}]},
                    "done": {"state_name": "done", "is_terminal": true, "result": "{{results.start}}"}
                }
            })
        )
    };
    let (bad, good) = (plan("finished"), plan("done"));
    let server =
        TestServer::start(move |i, _| Reply::completion(if i == 0 { &bad } else { &good })).await;
    let client = server.client(LlmConfig::new("planner-model"));
    let lookup = AgentCapability::new(
        "lookup",
        EventDefinition::new("lookup.requested", Topic::ActionRequests)
            .with_description("Looks a word up in the dictionary."),
    );
    let plan = create_plan(
        &client,
        &json!({"word": "serendipity"}),
        &[lookup],
        &PlanningOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(plan.definition().plan_type, "lookup");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["model"], "planner-model");
    let first = requests[0].messages();
    assert!(first[0].1.contains("JSON Schema"), "{}", first[0].1);
    assert!(
        first[1].1.contains("request event: `lookup.requested`"),
        "{}",
        first[1].1
    );
    assert!(first[1].1.contains("serendipity"), "{}", first[1].1);
    let second = requests[1].messages();
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].0, "assistant");
    assert_eq!(second[3].0, "user");
    assert!(
        second[3].1.contains("goes to unknown state `finished`"),
        "{}",
        second[3].1
    );
}
