//! Embedded tool round trip (request → tool → reply) against a hand-written baseline doing the
//! same work with tokio channels + serde_json on the same envelope, measured in one run.
//!
//! ```text
//! cargo bench -p soorma --bench embedded_roundtrip
//! ```
//!
//! Prints `RATIO embedded_roundtrip_p50 <sdk/baseline>` (target ≤ 1.5) and events/s for both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;
use soorma::{ActionReply, EventEnvelope};
use tokio::sync::{mpsc, oneshot};

const WARMUP: usize = 2_000;
const SEQUENTIAL: usize = 20_000;
const CONCURRENT_CALLERS: usize = 64;
const PER_CALLER: usize = 500;

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Sum {
    sum: i64,
}

async fn add(req: Invocation<Add>) -> Result<Sum, ToolError> {
    Ok(Sum {
        sum: req.data.a + req.data.b,
    })
}

// ---- baseline: what a hand-written service on tokio channels + serde_json does ----

type Wire = (String, oneshot::Sender<String>);

fn baseline_server() -> mpsc::UnboundedSender<Wire> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Wire>();
    tokio::spawn(async move {
        while let Some((bytes, reply_to)) = rx.recv().await {
            tokio::spawn(async move {
                let req: EventEnvelope = serde_json::from_str(&bytes).expect("request");
                let add: Add = serde_json::from_value(req.data.clone()).expect("payload");
                let result = serde_json::to_value(Sum { sum: add.a + add.b }).expect("sum");
                let data =
                    serde_json::to_value(ActionReply::success(&req.id, result)).expect("reply");
                let reply = EventEnvelope::new(
                    format!("{}-r", req.id),
                    "calculator",
                    Topic::ActionResults,
                    req.response_event.clone().unwrap_or_default(),
                )
                .with_data(data)
                .with_correlation_id(req.correlation_id.clone().unwrap_or_default())
                .with_time("2026-01-01T00:00:00.000Z");
                let _ = reply_to.send(serde_json::to_string(&reply).expect("reply json"));
            });
        }
    });
    tx
}

async fn baseline_call(server: &mpsc::UnboundedSender<Wire>, n: i64) -> i64 {
    let id = format!("{n:032x}");
    let req = EventEnvelope::new(&id, "client", Topic::ActionRequests, "add.requested")
        .with_data(serde_json::to_value(Add { a: n, b: 1 }).expect("add"))
        .with_response_event("add.completed")
        .with_correlation_id(&id)
        .with_time("2026-01-01T00:00:00.000Z");
    let (tx, rx) = oneshot::channel();
    server
        .send((serde_json::to_string(&req).expect("json"), tx))
        .expect("server alive");
    let reply: EventEnvelope = serde_json::from_str(&rx.await.expect("reply")).expect("reply env");
    let reply: ActionReply = serde_json::from_value(reply.data).expect("reply data");
    let sum: Sum = serde_json::from_value(reply.result.expect("result")).expect("sum");
    sum.sum
}

// ---- measurement ----

struct Figures {
    p50: Duration,
    p99: Duration,
    events_per_sec: f64,
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Sequential round trips of `a` and `b` interleaved one by one, so machine noise hits both
/// alike; returns their sorted latencies.
async fn interleaved<A, AF, B, BF>(a: A, b: B) -> (Vec<Duration>, Vec<Duration>)
where
    A: Fn(i64) -> AF,
    AF: std::future::Future<Output = i64>,
    B: Fn(i64) -> BF,
    BF: std::future::Future<Output = i64>,
{
    for i in 0..WARMUP as i64 {
        assert_eq!(a(i).await, i + 1);
        assert_eq!(b(i).await, i + 1);
    }
    let (mut sa, mut sb) = (
        Vec::with_capacity(SEQUENTIAL),
        Vec::with_capacity(SEQUENTIAL),
    );
    for i in 0..SEQUENTIAL as i64 {
        let t = Instant::now();
        assert_eq!(a(i).await, i + 1);
        sa.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(b(i).await, i + 1);
        sb.push(t.elapsed());
    }
    sa.sort();
    sb.sort();
    (sa, sb)
}

/// Events/s with CONCURRENT_CALLERS callers in flight.
async fn throughput<F, Fut>(call: F) -> f64
where
    F: Fn(i64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = i64> + Send,
{
    let started = Instant::now();
    let callers: Vec<_> = (0..CONCURRENT_CALLERS)
        .map(|c| {
            let call = call.clone();
            tokio::spawn(async move {
                for i in 0..PER_CALLER {
                    let n = (c * PER_CALLER + i) as i64;
                    assert_eq!(call(n).await, n + 1);
                }
            })
        })
        .collect();
    for c in callers {
        c.await.expect("caller");
    }
    // Each round trip moves two events: the request and the reply.
    (CONCURRENT_CALLERS * PER_CALLER * 2) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = Arc::new(baseline_server());
        let platform = Platform::embedded();
        let tool = Tool::new("calculator")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("add.requested", add))
            .start(&platform)
            .await
            .expect("tool starts");
        let client = platform.client("bench");
        let raw_call = {
            let server = server.clone();
            move |n| {
                let server = server.clone();
                async move { baseline_call(&server, n).await }
            }
        };
        let sdk_call = {
            let client = client.clone();
            move |n| {
                let client = client.clone();
                async move {
                    let s: Sum = client.invoke("add.requested", Add { a: n, b: 1 }, "add.completed").await.expect("invoke");
                    s.sum
                }
            }
        };
        let (raw_lat, sdk_lat) = interleaved(raw_call.clone(), sdk_call.clone()).await;
        // Throughput: alternate three rounds each, keep each side's best.
        let (mut raw_eps, mut sdk_eps) = (0f64, 0f64);
        for _ in 0..3 {
            raw_eps = raw_eps.max(throughput(raw_call.clone()).await);
            sdk_eps = sdk_eps.max(throughput(sdk_call.clone()).await);
        }
        tool.shutdown().await.expect("shutdown");
        let baseline = Figures { p50: percentile(&raw_lat, 50), p99: percentile(&raw_lat, 99), events_per_sec: raw_eps };
        let sdk = Figures { p50: percentile(&sdk_lat, 50), p99: percentile(&sdk_lat, 99), events_per_sec: sdk_eps };

        println!("embedded tool round trip ({SEQUENTIAL} sequential each, interleaved; {} concurrent in {CONCURRENT_CALLERS} callers, best of 3)", CONCURRENT_CALLERS * PER_CALLER);
        for (name, f) in [("baseline (tokio mpsc + serde_json)", &baseline), ("soorma embedded", &sdk)] {
            println!(
                "  {name:<36} p50 {:>8.2?}  p99 {:>8.2?}  {:>10.0} events/s",
                f.p50, f.p99, f.events_per_sec
            );
        }
        println!("RATIO embedded_roundtrip_p50 {:.3}", sdk.p50.as_secs_f64() / baseline.p50.as_secs_f64());
        println!("RATIO embedded_events_per_sec_sdk_over_raw {:.3}", sdk.events_per_sec / baseline.events_per_sec);
        println!("EVENTS_PER_SEC embedded_sdk {:.0}", sdk.events_per_sec);
        println!("EVENTS_PER_SEC embedded_baseline {:.0}", baseline.events_per_sec);
    });
}
