//! The SDK on NATS against hand-written async-nats code doing the same work on the same server,
//! measured in one run. Starts its own `nats-server -js` (as the tests do).
//!
//! ```text
//! cargo bench -p soorma-tests --bench nats
//! ```
//!
//! Prints `RATIO <name> <x>` lines:
//! - `nats_roundtrip_p50` — tool round trip p50, SDK / raw (target ≤ 1.3)
//! - `nats_events_per_sec` — events/s through a tool with 64 requests in flight, SDK / raw
//!   (target ≥ 0.7)
//! - `nats_fanout_1000` — a 1,000-sub-task fan-out/fan-in with state persisted in KV,
//!   SDK / raw (target ≤ 1.5)
//!
//! and the resident memory of a worker process holding 100,000 in-flight persisted tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use soorma::nats::NatsConfig;
use soorma::nats::async_nats::{self, jetstream};
use soorma::prelude::*;
use soorma::{ActionReply, EventEnvelope};
use soorma_tests::nats_server::NatsServer;
use tokio::sync::oneshot;

const WARMUP: usize = 300;
const SEQUENTIAL: usize = 3_000;
const CALLERS: usize = 64;
const PER_CALLER: usize = 100;
const FAN: usize = 1_000;
const FAN_RUNS: usize = 3;
/// Override with `SOORMA_BENCH_IN_FLIGHT` (0 skips the memory measurement).
const IN_FLIGHT_TASKS: usize = 100_000;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

async fn add(req: Invocation<Add>) -> Result<i64, ToolError> {
    Ok(req.data.a + req.data.b)
}

struct Figures {
    p50: Duration,
    events_per_sec: f64,
}

async fn measure<F, Fut>(call: F) -> Figures
where
    F: Fn(i64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = i64> + Send,
{
    for i in 0..WARMUP {
        assert_eq!(call(i as i64).await, i as i64 + 1);
    }
    let mut samples = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        assert_eq!(call(i as i64).await, i as i64 + 1);
        samples.push(t.elapsed());
    }
    samples.sort();
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
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
    Figures {
        p50: samples[samples.len() / 2],
        events_per_sec: (CALLERS * PER_CALLER * 2) as f64 / started.elapsed().as_secs_f64(),
    }
}

// ---------------------------------------------------------------------------------------------
// Raw async-nats: the same envelopes, a stream per topic, a durable pull consumer for the tool,
// JetStream publishes with acks and Nats-Msg-Id, a core subscription for the caller's replies.

const RAW: &str = "raw";

async fn raw_stream(js: &jetstream::Context, topic: &str) {
    js.get_or_create_stream(jetstream::stream::Config {
        name: format!("RAW_{}", topic.replace('-', "_").to_uppercase()),
        subjects: vec![format!("{RAW}.*.{topic}.>")],
        storage: jetstream::stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("raw stream");
}

async fn raw_publish(js: &jetstream::Context, topic: &str, env: &EventEnvelope) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", env.id.as_str());
    js.publish_with_headers(
        format!("{RAW}.default.{topic}.{}", env.event_type),
        headers,
        serde_json::to_vec(env).expect("json").into(),
    )
    .await
    .expect("publish")
    .await
    .expect("puback");
}

async fn raw_pull(
    js: &jetstream::Context,
    topic: &str,
    name: &str,
    filter: &str,
) -> jetstream::consumer::pull::Stream {
    let stream = js
        .get_stream(format!("RAW_{}", topic.replace('-', "_").to_uppercase()))
        .await
        .expect("stream");
    let consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(name.into()),
            filter_subject: format!("{RAW}.*.{topic}.{filter}"),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("consumer");
    consumer
        .stream()
        .max_messages_per_batch(256)
        .messages()
        .await
        .expect("messages")
}

static RAW_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn raw_id() -> String {
    format!(
        "{:032x}",
        RAW_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    )
}

fn now() -> String {
    "2026-01-01T00:00:00.000Z".into()
}

/// The raw tool: decode, add, reply, ack — each message on its own task.
async fn raw_tool(js: jetstream::Context) {
    let mut messages = raw_pull(&js, "action-requests", "raw-adder", "add.requested").await;
    tokio::spawn(async move {
        while let Some(Ok(msg)) = messages.next().await {
            let js = js.clone();
            tokio::spawn(async move {
                let req: EventEnvelope = serde_json::from_slice(&msg.payload).expect("request");
                let add: Add = serde_json::from_value(req.data.clone()).expect("payload");
                let data =
                    serde_json::to_value(ActionReply::success(&req.id, json!(add.a + add.b)))
                        .expect("reply");
                let reply = EventEnvelope::new(
                    format!("{}-reply", req.id),
                    "adder",
                    Topic::ActionResults,
                    req.response_event.clone().unwrap_or_default(),
                )
                .with_data(data)
                .with_time(now())
                .with_correlation_id(req.correlation_id.clone().unwrap_or_default());
                raw_publish(&js, "action-results", &reply).await;
                msg.ack().await.expect("ack");
            });
        }
    });
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<EventEnvelope>>>>;

/// The raw caller: a core subscription routes replies by correlation id.
async fn raw_client(client: async_nats::Client) -> Pending {
    let pending: Pending = Arc::default();
    let mut sub = client
        .subscribe(format!("{RAW}.default.action-results.add.completed"))
        .await
        .expect("sub");
    client.flush().await.expect("flush");
    let p = pending.clone();
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let env: EventEnvelope = serde_json::from_slice(&msg.payload).expect("reply env");
            if let Some(tx) = env
                .correlation_id
                .as_ref()
                .and_then(|c| p.lock().unwrap().remove(c))
            {
                let _ = tx.send(env);
            }
        }
    });
    pending
}

async fn raw_call(js: &jetstream::Context, pending: &Pending, n: i64) -> i64 {
    let id = raw_id();
    let req = EventEnvelope::new(&id, "client", Topic::ActionRequests, "add.requested")
        .with_data(json!({"a": n, "b": 1}))
        .with_time(now())
        .with_correlation_id(&id)
        .with_response_event("add.completed");
    let (tx, rx) = oneshot::channel();
    pending.lock().unwrap().insert(id, tx);
    raw_publish(js, "action-requests", &req).await;
    let reply = rx.await.expect("reply");
    let reply: ActionReply = serde_json::from_value(reply.data).expect("reply data");
    reply.result.and_then(|v| v.as_i64()).expect("sum")
}

// ---- fan-out / fan-in of FAN sub-tasks with state in KV ----

async fn raw_fan_worker(js: jetstream::Context) {
    let subs = js
        .create_key_value(jetstream::kv::Config {
            bucket: "raw_subtasks".into(),
            history: 1,
            ..Default::default()
        })
        .await
        .expect("kv");
    let tasks = js
        .create_key_value(jetstream::kv::Config {
            bucket: "raw_tasks".into(),
            history: 1,
            ..Default::default()
        })
        .await
        .expect("kv");
    // Jobs: persist the task and every sub-task, then publish the requests.
    let mut jobs = raw_pull(&js, "action-requests", "raw-fan-worker", "fan.requested").await;
    let (j, s, t) = (js.clone(), subs.clone(), tasks.clone());
    tokio::spawn(async move {
        while let Some(Ok(msg)) = jobs.next().await {
            let req: EventEnvelope = serde_json::from_slice(&msg.payload).expect("job");
            let n = req.data.as_u64().expect("n") as usize;
            t.create(
                &req.id,
                serde_json::to_vec(&json!({"request": req, "finished": 0, "size": n}))
                    .unwrap()
                    .into(),
            )
            .await
            .expect("task");
            let ids: Vec<String> = (0..n).map(|i| format!("{}-{i}", req.id)).collect();
            futures_util::stream::iter(ids.iter().cloned())
                .for_each_concurrent(64, |id| {
                    let s = s.clone();
                    let parent = req.id.clone();
                    async move {
                        s.create(
                            &id,
                            serde_json::to_vec(&json!({"parent": parent, "done": false}))
                                .unwrap()
                                .into(),
                        )
                        .await
                        .expect("sub");
                    }
                })
                .await;
            futures_util::stream::iter(ids.into_iter().enumerate())
                .for_each_concurrent(64, |(i, id)| {
                    let j = j.clone();
                    async move {
                        let env = EventEnvelope::new(
                            &id,
                            "raw-fan-worker",
                            Topic::ActionRequests,
                            "add.requested",
                        )
                        .with_data(json!({"a": i, "b": 1}))
                        .with_time(now())
                        .with_correlation_id(&id)
                        .with_response_event("fan.part.done");
                        raw_publish(&j, "action-requests", &env).await;
                    }
                })
                .await;
            msg.ack().await.expect("ack");
        }
    });
    // Results: record each, count it in the parent with a revision-checked update, reply once.
    let mut results = raw_pull(&js, "action-results", "raw-fan-results", "fan.part.done").await;
    tokio::spawn(async move {
        while let Some(Ok(msg)) = results.next().await {
            let (js, subs, tasks) = (js.clone(), subs.clone(), tasks.clone());
            tokio::spawn(async move {
                let env: EventEnvelope = serde_json::from_slice(&msg.payload).expect("result");
                let id = env.correlation_id.clone().expect("corr");
                let sub = subs.entry(&id).await.expect("get").expect("sub exists");
                let mut record: serde_json::Value = serde_json::from_slice(&sub.value).unwrap();
                if record["done"] == false {
                    record["done"] = json!(true);
                    record["result"] = env.data.clone();
                    subs.update(
                        &id,
                        serde_json::to_vec(&record).unwrap().into(),
                        sub.revision,
                    )
                    .await
                    .expect("update sub");
                    let parent = record["parent"].as_str().unwrap().to_owned();
                    loop {
                        let entry = tasks.entry(&parent).await.expect("get").expect("task");
                        let mut task: serde_json::Value =
                            serde_json::from_slice(&entry.value).unwrap();
                        task["finished"] = json!(task["finished"].as_u64().unwrap() + 1);
                        let complete = task["finished"] == task["size"];
                        if tasks
                            .update(
                                &parent,
                                serde_json::to_vec(&task).unwrap().into(),
                                entry.revision,
                            )
                            .await
                            .is_ok()
                        {
                            if complete {
                                let req: EventEnvelope =
                                    serde_json::from_value(task["request"].clone()).unwrap();
                                let reply = EventEnvelope::new(format!("{parent}-reply"), "raw-fan-worker", Topic::ActionResults, "fan.done")
                                    .with_data(json!({"request_id": parent, "success": true, "result": task["size"]}))
                                    .with_time(now())
                                    .with_correlation_id(req.correlation_id.unwrap_or_default());
                                raw_publish(&js, "action-results", &reply).await;
                            }
                            break;
                        }
                    }
                }
                msg.ack().await.expect("ack");
            });
        }
    });
}

async fn raw_fan_run(client: &async_nats::Client, js: &jetstream::Context) -> Duration {
    let mut done = client
        .subscribe(format!("{RAW}.default.action-results.fan.done"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let id = raw_id();
    let started = Instant::now();
    let req = EventEnvelope::new(&id, "client", Topic::ActionRequests, "fan.requested")
        .with_data(json!(FAN))
        .with_time(now())
        .with_correlation_id(&id)
        .with_response_event("fan.done");
    raw_publish(js, "action-requests", &req).await;
    done.next().await.expect("fan done");
    started.elapsed()
}

// SDK worker for the same fan-out / fan-in.
async fn fan(mut task: TaskContext<usize>) -> soorma::Result<()> {
    let d: Vec<Delegation> = (0..task.data)
        .map(|i| Delegation::new("add.requested", &json!({"a": i, "b": 1}), "fan.part.done"))
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

async fn fan_part(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        task.complete(all.len()).await?;
    }
    Ok(())
}

// In-flight tasks: delegated to an event nobody serves, so they stay persisted and pending.
static PARKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn park(mut task: TaskContext<u32>) -> soorma::Result<()> {
    // Nobody serves it: the task stays pending (the point of this phase).
    task.delegate_with(
        Delegation::new("never.served", &task.data, "never.done").skip_consumer_check(),
    )
    .await?;
    PARKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The result handler the parked tasks' delegations need (no result ever comes).
async fn never_done(_result: ResultContext<u32>) {}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    soorma_tests::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = NatsServer::start();
    let only_memory = std::env::var_os("SOORMA_BENCH_ONLY_MEMORY").is_some();
    rt.block_on(async {
        if only_memory {
            let platform = soorma::nats::connect(NatsConfig::new(server.url())).await.expect("connect");
            return memory(&platform).await;
        }
        // ---- raw ----
        let client = async_nats::connect(server.url()).await.expect("raw connect");
        let js = jetstream::new(client.clone());
        raw_stream(&js, "action-requests").await;
        raw_stream(&js, "action-results").await;
        raw_tool(js.clone()).await;
        let pending = raw_client(client.clone()).await;
        let (j, p) = (js.clone(), pending.clone());
        let raw = measure(move |n| {
            let (j, p) = (j.clone(), p.clone());
            async move { raw_call(&j, &p, n).await }
        })
        .await;
        raw_fan_worker(js.clone()).await;
        let mut raw_fan = Vec::new();
        for _ in 0..FAN_RUNS {
            raw_fan.push(raw_fan_run(&client, &js).await);
        }

        // ---- SDK ----
        let platform = soorma::nats::connect(NatsConfig::new(server.url())).await.expect("connect");
        let tool = Tool::new("adder")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("add.requested", add))
            .start(&platform)
            .await
            .expect("tool");
        let sdk_client = platform.client("bench");
        let c = sdk_client.clone();
        let sdk = measure(move |n| {
            let c = c.clone();
            async move { c.invoke::<i64>("add.requested", Add { a: n, b: 1 }, "add.completed").await.expect("invoke") }
        })
        .await;
        let worker = Worker::new("fan-worker")
            .use_registered_handlers(false)
            .handler(Handler::on_task("fan.requested", fan))
            .handler(Handler::on_result("fan.part.done", fan_part))
            .start(&platform)
            .await
            .expect("worker");
        let mut sdk_fan = Vec::new();
        for _ in 0..FAN_RUNS {
            let started = Instant::now();
            let n: usize = sdk_client
                .with_timeout(Duration::from_secs(120))
                .invoke("fan.requested", FAN, "fan.done")
                .await
                .expect("fan");
            assert_eq!(n, FAN);
            sdk_fan.push(started.elapsed());
        }
        tool.shutdown().await.expect("shutdown");
        worker.shutdown().await.expect("shutdown");

        let (raw_fan, sdk_fan) = (median(raw_fan), median(sdk_fan));
        println!("NATS ({} sequential round trips, {} in {CALLERS} concurrent callers, fan-out of {FAN} x {FAN_RUNS})", SEQUENTIAL, CALLERS * PER_CALLER);
        println!("  raw async-nats  p50 {:>9.2?}  {:>8.0} events/s  fan-out/fan-in {:>9.2?}", raw.p50, raw.events_per_sec, raw_fan);
        println!("  soorma          p50 {:>9.2?}  {:>8.0} events/s  fan-out/fan-in {:>9.2?}", sdk.p50, sdk.events_per_sec, sdk_fan);
        println!("RATIO nats_roundtrip_p50 {:.3}", sdk.p50.as_secs_f64() / raw.p50.as_secs_f64());
        println!("RATIO nats_events_per_sec {:.3}", sdk.events_per_sec / raw.events_per_sec);
        println!("RATIO nats_fanout_1000 {:.3}", sdk_fan.as_secs_f64() / raw_fan.as_secs_f64());

        // The same connection as the phases above.
        memory(&platform).await;
    });
}

/// Resident memory of a worker holding many persisted, pending tasks.
async fn memory(platform: &Platform) {
    {
        let in_flight: usize = std::env::var("SOORMA_BENCH_IN_FLIGHT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(IN_FLIGHT_TASKS);
        if in_flight == 0 {
            return;
        }
        let before = rss_kib();
        let parker = Worker::new("parker")
            .use_registered_handlers(false)
            .concurrency(
                std::env::var("SOORMA_BENCH_PARK_CONCURRENCY")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1024),
            )
            .handler(Handler::on_task("park.requested", park))
            .handler(Handler::on_result("never.done", never_done))
            .start(platform)
            .await
            .expect("parker");
        let bus = platform.client("bench").bus();
        let started = Instant::now();
        futures_util::stream::iter(0..in_flight as u32)
            .for_each_concurrent(256, |i| {
                let bus = bus.clone();
                async move {
                    bus.request("park.requested", i, "park.done")
                        .await
                        .expect("park");
                }
            })
            .await;
        // Wait until every task has delegated (is persisted and pending).
        let mut last = (0, Instant::now());
        loop {
            let parked = PARKED.load(std::sync::atomic::Ordering::Relaxed);
            if parked >= in_flight {
                break;
            }
            if parked > last.0 {
                last = (parked, Instant::now());
            }
            assert!(
                last.1.elapsed() < Duration::from_secs(60),
                "the worker stalled: {parked} of {in_flight} tasks persisted, no progress for 60 s"
            );
            eprintln!(
                "  ... {parked} of {in_flight} tasks persisted after {:?}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let after = rss_kib();
        println!(
            "MEMORY worker_with_{in_flight}_in_flight_tasks rss_kib {after} (before {before}, +{} KiB; {:?} to submit and persist)",
            after.saturating_sub(before),
            started.elapsed()
        );
        parker.shutdown().await.expect("shutdown");
    }
}
