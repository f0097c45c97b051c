//! `soorma::memory::embed::OpenAiEmbedder` against a real local HTTP server speaking the
//! OpenAI embeddings format (a small HTTP/1.1 server on 127.0.0.1, so that tests control every
//! byte and every pause, including hostile ones).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soorma::memory::embed::{OpenAiEmbedder, OpenAiEmbedderConfig};
use soorma::memory::{Embedder, MemoryError};
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

    fn inputs(&self) -> Vec<String> {
        self.body["input"]
            .as_array()
            .expect("input array")
            .iter()
            .map(|t| t.as_str().expect("a string input").to_owned())
            .collect()
    }
}

/// What the server answers.
enum Reply {
    /// A complete response with a content-length.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Read the request, then say nothing (keeping the connection open).
    Hang,
    /// Advertise a content-length of `advertised` bytes, then write up to that many, 64 KiB at a
    /// time, until the client goes away.
    Huge { advertised: usize },
    /// A chunked body of `total` bytes (a never-ending JSON array of numbers), 64 KiB a chunk,
    /// until the client goes away.
    Endless { total: usize },
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Self::raw(status, body.to_string())
    }

    fn raw(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply::Full {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: body.into(),
        }
    }

    /// Embeddings for the request's inputs (see [`vector_of`]), listed in the order `order`
    /// gives (a permutation of the positions).
    fn embeddings(request: &Recorded, order: impl Fn(usize) -> Vec<usize>) -> Self {
        let inputs = request.inputs();
        let data: Vec<Value> = order(inputs.len())
            .into_iter()
            .map(|i| json!({"object": "embedding", "index": i, "embedding": vector_of(&inputs[i])}))
            .collect();
        Self::json(
            200,
            json!({
                "object": "list",
                "data": data,
                "model": request.body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }),
        )
    }
}

/// The raw vector the server returns for input `t{k}`: `[k + 1, 1, 0, 0]`.
fn vector_of(input: &str) -> Vec<f64> {
    let k: f64 = input.trim_start_matches('t').parse().unwrap_or(0.0);
    vec![k + 1.0, 1.0, 0.0, 0.0]
}

/// Recovers `k` from a normalized vector of `t{k}`.
fn k_of(v: &[f32]) -> usize {
    ((v[0] / v[1]) - 1.0).round() as usize
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("t{k}")).collect()
}

type Handler = dyn Fn(usize, &Recorded) -> Reply + Send + Sync;

struct TestServer {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// Body bytes written, over all responses.
    written: Arc<AtomicUsize>,
}

impl TestServer {
    /// Serves `handler(request_index, request)` on 127.0.0.1 until the test's runtime ends.
    async fn start(handler: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let written = Arc::new(AtomicUsize::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (recorded, counted) = (requests.clone(), written.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(
                    socket,
                    handler.clone(),
                    recorded.clone(),
                    counted.clone(),
                ));
            }
        });
        Self {
            base_url,
            requests,
            written,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    fn config(&self, dimensions: usize) -> OpenAiEmbedderConfig {
        OpenAiEmbedderConfig::new("test-embed", dimensions).with_base_url(&self.base_url)
    }

    fn embedder(&self, config: OpenAiEmbedderConfig) -> OpenAiEmbedder {
        OpenAiEmbedder::new(config).unwrap()
    }
}

async fn serve(
    mut socket: TcpStream,
    handler: Arc<Handler>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    written: Arc<AtomicUsize>,
) {
    socket.set_nodelay(true).unwrap();
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let reply = {
        let mut all = requests.lock().unwrap();
        all.push(request.clone());
        handler(all.len() - 1, &request)
    };
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Test\r\nconnection: close\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            if socket.write_all(head.as_bytes()).await.is_ok()
                && socket.write_all(&body).await.is_ok()
            {
                written.fetch_add(body.len(), Ordering::SeqCst);
                let _ = socket.shutdown().await;
            }
        }
        Reply::Hang => {
            // Hold the connection until the client drops it.
            let mut buf = [0u8; 64];
            while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        Reply::Huge { advertised } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {advertised}\r\n\r\n"
            );
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let _ = socket.write_all(b"{\"data\":[").await;
            write_numbers(&mut socket, advertised, false, &written).await;
        }
        Reply::Endless { total } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            write_numbers(&mut socket, total, true, &written).await;
        }
    }
}

/// Writes `0.1234567,` repeated, 64 KiB at a time (as HTTP chunks when `chunked`), until
/// `total` bytes or a write fails (the client went away).
async fn write_numbers(socket: &mut TcpStream, total: usize, chunked: bool, written: &AtomicUsize) {
    let piece = "0.1234567,".repeat(64 * 1024 / 10);
    let mut sent = 0;
    while sent < total {
        let result = if chunked {
            let mut frame = format!("{:x}\r\n", piece.len()).into_bytes();
            frame.extend_from_slice(piece.as_bytes());
            frame.extend_from_slice(b"\r\n");
            socket.write_all(&frame).await
        } else {
            socket.write_all(piece.as_bytes()).await
        };
        if result.is_err() {
            return;
        }
        sent += piece.len();
        written.fetch_add(piece.len(), Ordering::SeqCst);
    }
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

/// The [`MemoryError`] inside `err`.
fn memory_error(err: &soorma::Error) -> &MemoryError {
    err.downcast_ref::<MemoryError>()
        .unwrap_or_else(|| panic!("not a MemoryError: {err:?}"))
}

fn assert_unit(v: &[f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
}

// ---------------------------------------------------------------------------------------------
// Requests and responses
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn inputs_are_batched_and_vectors_come_back_in_input_order() {
    // Every response lists its vectors backwards.
    let server =
        TestServer::start(|_, request| Reply::embeddings(request, |n| (0..n).rev().collect()))
            .await;
    let embedder = server.embedder(server.config(4).with_api_key("sk-test"));
    let vectors = embedder.embed(&texts(150)).await.unwrap();

    assert_eq!(vectors.len(), 150);
    for (k, v) in vectors.iter().enumerate() {
        assert_eq!(v.len(), 4);
        assert_unit(v);
        assert_eq!(k_of(v), k, "vector {k} is out of place");
    }
    let requests = server.requests();
    let sizes: Vec<usize> = requests.iter().map(|r| r.inputs().len()).collect();
    assert_eq!(sizes, [64, 64, 22]);
    assert_eq!(requests[1].inputs()[0], "t64");
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/embeddings");
        assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
        assert!(
            request
                .header("content-type")
                .is_some_and(|c| c.starts_with("application/json"))
        );
        assert_eq!(request.body["model"], "test-embed");
        assert_eq!(request.body["encoding_format"], "float");
        assert!(request.body.get("dimensions").is_none());
    }
}

#[tokio::test]
async fn shuffled_data_is_put_back_in_order() {
    // A rotation and an interleaving, in one request of 7.
    let server = TestServer::start(|i, request| {
        Reply::embeddings(request, move |n| {
            if i == 0 {
                (0..n).map(|j| (j + 3) % n).collect()
            } else {
                (0..n).step_by(2).chain((1..n).step_by(2)).collect()
            }
        })
    })
    .await;
    let embedder = server.embedder(server.config(4));
    for _ in 0..2 {
        let vectors = embedder.embed(&texts(7)).await.unwrap();
        let ks: Vec<usize> = vectors.iter().map(|v| k_of(v)).collect();
        assert_eq!(ks, (0..7).collect::<Vec<_>>());
    }
    // No key configured: no authorization header.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("authorization").is_none())
    );
}

#[tokio::test]
async fn dimensions_are_sent_only_when_asked() {
    let server =
        TestServer::start(|_, request| Reply::embeddings(request, |n| (0..n).collect())).await;
    let embedder = server.embedder(server.config(4).with_send_dimensions(true));
    embedder.embed(&texts(2)).await.unwrap();
    assert_eq!(server.requests()[0].body["dimensions"], 4);
}

#[tokio::test]
async fn empty_input_sends_nothing() {
    let server =
        TestServer::start(|_, request| Reply::embeddings(request, |n| (0..n).collect())).await;
    let embedder = server.embedder(server.config(4));
    assert!(embedder.embed(&[]).await.unwrap().is_empty());
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_shared_embedder_serves_concurrent_callers() {
    let server =
        TestServer::start(|_, request| Reply::embeddings(request, |n| (0..n).collect())).await;
    let embedder = Arc::new(server.embedder(server.config(4).with_batch_size(3)));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let embedder = embedder.clone();
            tokio::spawn(async move { embedder.embed(&texts(10)).await.unwrap() })
        })
        .collect();
    for task in tasks {
        let vectors = task.await.unwrap();
        let ks: Vec<usize> = vectors.iter().map(|v| k_of(v)).collect();
        assert_eq!(ks, (0..10).collect::<Vec<_>>());
    }
    assert_eq!(server.requests().len(), 4 * 4);
}

// ---------------------------------------------------------------------------------------------
// Broken responses
// ---------------------------------------------------------------------------------------------

/// Serves `body` for every request; embeds 2 texts with 4 dimensions; returns the error and
/// how many requests were made.
async fn embed_against(body: Value) -> (soorma::Error, usize) {
    let server = TestServer::start(move |_, _| Reply::json(200, body.clone())).await;
    let err = server
        .embedder(server.config(4))
        .embed(&texts(2))
        .await
        .unwrap_err();
    (err, server.requests().len())
}

fn item(index: usize, embedding: Value) -> Value {
    json!({"object": "embedding", "index": index, "embedding": embedding})
}

#[tokio::test]
async fn a_vector_of_the_wrong_length_is_refused() {
    let (err, requests) = embed_against(json!({"data": [
        item(0, json!([1, 0, 0, 0])),
        item(1, json!([1, 0, 0])),
    ]}))
    .await;
    assert!(
        matches!(memory_error(&err), MemoryError::Shape { model, expected, got }
            if model == "test-embed"
                && expected == "2 vectors of 4 dimensions"
                && got.contains("3 dimensions at index 1")),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(requests, 1, "shape errors are not retried");
}

#[tokio::test]
async fn missing_duplicate_and_out_of_range_indexes_are_refused() {
    let v = json!([1, 0, 0, 0]);
    for (data, what) in [
        (json!([item(0, v.clone())]), "1 vectors"),
        (
            json!([item(0, v.clone()), item(1, v.clone()), item(2, v.clone())]),
            "3 vectors",
        ),
        (
            json!([item(1, v.clone()), item(1, v.clone())]),
            "two vectors for index 1",
        ),
        (json!([item(0, v.clone()), item(5, v.clone())]), "index 5"),
    ] {
        let (err, requests) = embed_against(json!({ "data": data })).await;
        assert!(
            matches!(memory_error(&err), MemoryError::Shape { got, .. } if got.contains(what)),
            "{what}: {err}"
        );
        assert!(!err.is_retryable());
        assert_eq!(requests, 1);
    }
    // No index at all.
    let (err, _) = embed_against(json!({"data": [{"embedding": v}, {"embedding": v}]})).await;
    assert!(
        matches!(
            memory_error(&err),
            MemoryError::Embedding {
                retryable: false,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn numbers_beyond_f32_are_refused() {
    let (err, _) = embed_against(json!({"data": [
        item(0, json!([1, 0, 0, 0])),
        item(1, json!([1e39, 0, 0, 0])),
    ]}))
    .await;
    // serde_json refuses to read 1e39 as an f32.
    assert!(
        matches!(memory_error(&err), MemoryError::Embedding { message, retryable: false, .. }
            if message.contains("out of range")),
        "{err}"
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused_with_an_excerpt() {
    let server = TestServer::start(|_, _| {
        Reply::raw(200, format!("<html>{}</html>", "busy ".repeat(10_000)))
    })
    .await;
    let err = server
        .embedder(server.config(4))
        .embed(&texts(2))
        .await
        .unwrap_err();
    let MemoryError::Embedding {
        model,
        message,
        retryable,
    } = memory_error(&err)
    else {
        panic!("{err}")
    };
    assert_eq!(model, "test-embed");
    assert!(message.contains("<html>busy"), "{message}");
    assert!(
        message.len() < 1024,
        "the excerpt is short: {}",
        message.len()
    );
    assert!(!retryable);
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn base64_vectors_are_refused() {
    let (err, _) = embed_against(json!({"data": [
        {"index": 0, "embedding": "AACAPwAAAAA="},
        {"index": 1, "embedding": "AACAPwAAAAA="},
    ]}))
    .await;
    assert!(
        matches!(
            memory_error(&err),
            MemoryError::Embedding {
                retryable: false,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn an_error_object_in_a_2xx_body_is_reported() {
    let (err, _) =
        embed_against(json!({"error": {"message": "model not loaded", "type": "invalid"}})).await;
    assert!(err.to_string().contains("model not loaded"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// HTTP errors and retries
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn http_500_is_retried_then_succeeds() {
    let server = TestServer::start(|i, request| {
        if i == 0 {
            Reply::json(500, json!({"error": {"message": "overloaded"}}))
        } else {
            Reply::embeddings(request, |n| (0..n).collect())
        }
    })
    .await;
    let started = Instant::now();
    let vectors = server
        .embedder(server.config(4))
        .embed(&texts(3))
        .await
        .unwrap();
    assert_eq!(vectors.len(), 3);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].body, requests[1].body,
        "the same batch is resent"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "a backoff before the retry"
    );
}

#[tokio::test]
async fn http_429_honours_a_short_retry_after() {
    let server = TestServer::start(|i, request| {
        if i == 0 {
            Reply::Full {
                status: 429,
                headers: vec![("retry-after", "1".to_owned())],
                body: b"slow down".to_vec(),
            }
        } else {
            Reply::embeddings(request, |n| (0..n).collect())
        }
    })
    .await;
    let started = Instant::now();
    server
        .embedder(server.config(4))
        .embed(&texts(1))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn persistent_5xx_gives_up_after_max_attempts_retryable() {
    let server = TestServer::start(|_, _| Reply::raw(503, "down for maintenance")).await;
    let err = server
        .embedder(server.config(4).with_max_attempts(2))
        .embed(&texts(1))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 2);
    assert!(err.is_retryable(), "{err}");
    let MemoryError::Embedding {
        message, retryable, ..
    } = memory_error(&err)
    else {
        panic!("{err}")
    };
    assert!(*retryable);
    assert!(message.contains("HTTP 503"), "{message}");
    assert!(message.contains("down for maintenance"), "{message}");
}

#[tokio::test]
async fn http_400_is_not_retried() {
    let server = TestServer::start(|_, _| {
        Reply::json(
            400,
            json!({"error": {"message": "input too long", "type": "invalid_request_error"}}),
        )
    })
    .await;
    let err = server
        .embedder(server.config(4))
        .embed(&texts(70))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 1, "no retry, no second batch");
    assert!(!err.is_retryable());
    let MemoryError::Embedding { message, .. } = memory_error(&err) else {
        panic!("{err}")
    };
    assert!(
        message.contains("HTTP 400") && message.contains("input too long"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_transport_error() {
    // Bind then drop a listener: nothing listens on that port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let embedder = OpenAiEmbedder::new(
        OpenAiEmbedderConfig::new("m", 4)
            .with_base_url(format!("http://127.0.0.1:{port}/v1"))
            .with_max_attempts(1),
    )
    .unwrap();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("cannot reach"), "{err}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let server = TestServer::start(|_, _| Reply::Hang).await;
    let embedder = server.embedder(
        server
            .config(4)
            .with_timeout(Duration::from_millis(300))
            .with_max_attempts(2),
    );
    let started = Instant::now();
    let err = embedder.embed(&texts(1)).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("did not answer within"), "{err}");
    assert_eq!(server.requests().len(), 2, "a timeout is retried");
    assert!(
        elapsed >= Duration::from_millis(600) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Oversized responses
// ---------------------------------------------------------------------------------------------

const FIFTY_MB: usize = 50 * 1024 * 1024;

#[tokio::test]
async fn an_advertised_huge_body_is_refused_unread() {
    let server = TestServer::start(|_, _| Reply::Huge {
        advertised: FIFTY_MB,
    })
    .await;
    let started = Instant::now();
    let err = server
        .embedder(server.config(4))
        .embed(&texts(2))
        .await
        .unwrap_err();
    assert!(
        matches!(memory_error(&err), MemoryError::TooLarge { len, max, .. }
            if *len == FIFTY_MB && *max < 100 * 1024),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Give the server a moment to notice the client left; it must not have sent it all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(server.written() < FIFTY_MB, "{} bytes", server.written());
}

#[tokio::test]
async fn an_endless_chunked_body_is_cut_off() {
    let server = TestServer::start(|_, _| Reply::Endless { total: FIFTY_MB }).await;
    let embedder = server.embedder(server.config(4).with_timeout(Duration::from_secs(20)));
    let started = Instant::now();
    let err = embedder.embed(&texts(2)).await.unwrap_err();
    let MemoryError::TooLarge { len, max, .. } = memory_error(&err) else {
        panic!("{err}")
    };
    assert!(*len > *max && *max < 100 * 1024, "{len} > {max}");
    assert!(
        *len < *max + 1024 * 1024,
        "reading stopped right after the limit: {len}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(server.written() < FIFTY_MB, "{} bytes", server.written());
}

#[tokio::test]
async fn the_body_limit_scales_with_the_batch() {
    // 1536 dimensions, 64 texts: a real-sized response (about 1.3 MB) fits.
    let server = TestServer::start(|_, request| {
        let n = request.inputs().len();
        let data: Vec<Value> = (0..n)
            .map(|i| {
                let v: Vec<f64> = (0..1536)
                    .map(|j| -0.012_345_678_9 * ((i * 1536 + j) % 97 + 1) as f64)
                    .collect();
                item(i, json!(v))
            })
            .collect();
        Reply::json(200, json!({"data": data}))
    })
    .await;
    let vectors = server
        .embedder(server.config(1536))
        .embed(&texts(64))
        .await
        .unwrap();
    assert_eq!(vectors.len(), 64);
    vectors.iter().for_each(|v| assert_unit(v));
}
