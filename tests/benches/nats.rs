//! The SDK on NATS against hand-written async-nats code doing the same work on the same server,
//! measured in one run. Starts its own `nats-server -js` (as the tests do).
//!
//! ```text
//! cargo bench -p soorma-tests --bench nats
//! ```
//!
//! The two are measured side by side in one process: sequential round trips alternate one by
//! one between them, throughput rounds and fan-outs alternate, so machine noise hits both alike.
//!
//! Prints `RATIO <name> <x>` lines:
//! - `nats_roundtrip_p50` — tool round trip p50, SDK / raw (target ≤ 1.0)
//! - `nats_events_per_sec` — events/s through a tool with 64 requests in flight, SDK / raw,
//!   best of 3 rounds each (target ≥ 0.9)
//! - `nats_fanout_1000` — a 1,000-sub-task fan-out/fan-in with state persisted in KV,
//!   SDK / raw, median of 3 (target ≤ 1.0)
//! - `nats_fanout_1000_fsync` — the SDK's fan-out/fan-in on a server with
//!   `sync_interval: always` (fsync per write) / the same on a default server (target ≤ 2.5)
//! - `nats_roundtrip_p50_fsync` — the same comparison for the round trip
//!
//! and the resident memory of a worker process holding 100,000 in-flight persisted tasks.
//!
//! With the round trip's p50 it prints each side's two legs (`LEGS` lines): the request leg,
//! from the call until the tool's code has the decoded request (the SDK's handler is called;
//! the raw tool has decoded the envelope and its payload), and the reply leg, from there until
//! the caller has the sum.
//!
//! `SOORMA_BENCH_SYNC=always` runs every phase on a server with `sync_interval: always`;
//! `SOORMA_BENCH_WRITES=1` also prints how many messages each stream stored for one fan-out and
//! one round trip of each side (`WRITES` lines), and the process's CPU time per round trip of
//! each (`CPU` lines). `SOORMA_BENCH_ONLY_ROUND_TRIPS=raw|soorma` runs only that side's
//! sequential round trips (to profile one side).

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
use soorma::{ActionReply, AgentHandle, BoxFuture, EventEnvelope};
use soorma_tests::nats_server::NatsServer;
use tokio::sync::oneshot;

const WARMUP: usize = 300;
const SEQUENTIAL: usize = 3_000;
const CALLERS: usize = 64;
const PER_CALLER: usize = 100;
const FAN: usize = 1_000;
const FAN_RUNS: usize = 3;
const ROUNDS: usize = 3;
/// Override with `SOORMA_BENCH_IN_FLIGHT` (0 skips the memory measurement).
const IN_FLIGHT_TASKS: usize = 100_000;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

async fn add(req: Invocation<Add>) -> Result<i64, ToolError> {
    handler_reached();
    Ok(req.data.a + req.data.b)
}

/// When a tool's code last had a decoded request (nanoseconds since [`epoch`]).
static HANDLER_REACHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Marks the moment a tool's code has its decoded request (both sides call it there).
fn handler_reached() {
    let nanos = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX);
    HANDLER_REACHED.store(nanos, std::sync::atomic::Ordering::Relaxed);
}

/// The request and reply legs of one sequential round trip that started at `start` and took
/// `took`, split where the tool's code had the decoded request.
fn legs(start: Instant, took: Duration) -> (Duration, Duration) {
    let reached = Duration::from_nanos(HANDLER_REACHED.load(std::sync::atomic::Ordering::Relaxed));
    let request = (epoch() + reached).saturating_duration_since(start);
    (request, took.saturating_sub(request))
}

/// p50s of sequential round trips: the whole, the request leg, the reply leg.
struct RoundTrip {
    p50: Duration,
    request: Duration,
    reply: Duration,
}

/// One way to call the adder: `n` → `n + 1`.
type Call = Arc<dyn Fn(i64) -> BoxFuture<'static, i64> + Send + Sync>;

fn call_with<F, Fut>(f: F) -> Call
where
    F: Fn(i64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = i64> + Send + 'static,
{
    Arc::new(move |n| Box::pin(f(n)))
}

async fn checked(call: &Call, n: i64) {
    assert_eq!(call(n).await, n + 1);
}

/// Round-trip p50s of each call, sequential round trips alternating between them one by one.
async fn round_trips(calls: [&Call; 2]) -> [RoundTrip; 2] {
    for i in 0..WARMUP as i64 {
        for call in calls {
            checked(call, i).await;
        }
    }
    let mut samples: [[Vec<Duration>; 3]; 2] = Default::default();
    for i in 0..SEQUENTIAL {
        // Alternate which goes first, so neither always follows the other.
        for k in [i % 2, 1 - i % 2] {
            let t = Instant::now();
            checked(calls[k], i as i64).await;
            let took = t.elapsed();
            let (request, reply) = legs(t, took);
            for (v, d) in samples[k].iter_mut().zip([took, request, reply]) {
                v.push(d);
            }
        }
    }
    samples.map(|[whole, request, reply]| RoundTrip {
        p50: median(whole),
        request: median(request),
        reply: median(reply),
    })
}

/// Events per second (a request and its reply are 2 events) with `CALLERS` concurrent callers.
async fn throughput(call: &Call) -> f64 {
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let call = call.clone();
            tokio::spawn(async move {
                for i in 0..PER_CALLER {
                    checked(&call, (c * PER_CALLER + i) as i64).await;
                }
            })
        })
        .collect();
    for c in callers {
        c.await.expect("caller");
    }
    (CALLERS * PER_CALLER * 2) as f64 / started.elapsed().as_secs_f64()
}

/// Best of `ROUNDS` throughput rounds each, the rounds alternating between the calls.
async fn best_throughputs(calls: [&Call; 2]) -> [f64; 2] {
    let mut best = [0.0f64; 2];
    for _ in 0..ROUNDS {
        for (k, call) in calls.iter().enumerate() {
            best[k] = best[k].max(throughput(call).await);
        }
    }
    best
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
                handler_reached();
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
//
// The hand-written design: a KV entry per sub-task and one for the parent; results are taken in
// batches (what the consumer has ready, up to 256), each recorded in its sub-task's entry, and
// the parent counts a whole batch in one revision-checked update (retried on conflict) — not a
// contended counter bumped once per result. When the last is counted, every result is read
// (what a fan-in is for; the SDK's fan-in handler gets them all) and the caller gets a reply.

/// How many KV writes or publishes the raw worker keeps in flight.
const RAW_CONCURRENCY: usize = 256;

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
                .for_each_concurrent(RAW_CONCURRENCY, |id| {
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
                .for_each_concurrent(RAW_CONCURRENCY, |(i, id)| {
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
    // Results, a batch at a time: record each in its sub-task, count the batch in the parent
    // with one revision-checked update, reply once the last is counted, then ack the batch.
    let results = raw_pull(&js, "action-results", "raw-fan-results", "fan.part.done").await;
    let mut batches = results.ready_chunks(MAX_RAW_BATCH);
    tokio::spawn(async move {
        while let Some(batch) = batches.next().await {
            let msgs: Vec<_> = batch.into_iter().filter_map(Result::ok).collect();
            // A batch is at most MAX_RAW_BATCH (= RAW_CONCURRENCY) results: all recorded at once.
            let recorded =
                futures_util::future::join_all(msgs.iter().map(|msg| raw_record(&subs, msg))).await;
            let mut counts: HashMap<String, u64> = HashMap::new();
            for parent in recorded.into_iter().flatten() {
                *counts.entry(parent).or_default() += 1;
            }
            for (parent, count) in counts {
                raw_count(&js, &tasks, &subs, &parent, count).await;
            }
            for msg in msgs {
                msg.ack().await.expect("ack");
            }
        }
    });
}

const MAX_RAW_BATCH: usize = RAW_CONCURRENCY;

/// Records a result in its sub-task's entry; its parent when it was not recorded before.
async fn raw_record(subs: &jetstream::kv::Store, msg: &jetstream::Message) -> Option<String> {
    let env: EventEnvelope = serde_json::from_slice(&msg.payload).expect("result");
    let id = env.correlation_id.clone().expect("corr");
    let sub = subs.entry(&id).await.expect("get").expect("sub exists");
    let mut record: serde_json::Value = serde_json::from_slice(&sub.value).unwrap();
    if record["done"] != false {
        return None;
    }
    record["done"] = json!(true);
    record["result"] = env.data;
    subs.update(
        &id,
        serde_json::to_vec(&record).unwrap().into(),
        sub.revision,
    )
    .await
    .expect("update sub");
    record["parent"].as_str().map(str::to_owned)
}

/// Adds `count` finished sub-tasks to the parent; replies when all are.
async fn raw_count(
    js: &jetstream::Context,
    tasks: &jetstream::kv::Store,
    subs: &jetstream::kv::Store,
    parent: &str,
    count: u64,
) {
    loop {
        let entry = tasks.entry(parent).await.expect("get").expect("task");
        let mut task: serde_json::Value = serde_json::from_slice(&entry.value).unwrap();
        task["finished"] = json!(task["finished"].as_u64().unwrap() + count);
        let complete = task["finished"] == task["size"];
        if tasks
            .update(
                parent,
                serde_json::to_vec(&task).unwrap().into(),
                entry.revision,
            )
            .await
            .is_ok()
        {
            if complete {
                // The fan-in's point: all the results, read once the last is in.
                let size = task["size"].as_u64().unwrap();
                let results: Vec<serde_json::Value> = futures_util::stream::iter(0..size)
                    .map(|i| async move {
                        let entry = subs.entry(format!("{parent}-{i}")).await.expect("get");
                        let record: serde_json::Value =
                            serde_json::from_slice(&entry.expect("sub").value).unwrap();
                        record["result"].clone()
                    })
                    .buffer_unordered(RAW_CONCURRENCY)
                    .collect()
                    .await;
                assert_eq!(results.len() as u64, size);
                let req: EventEnvelope = serde_json::from_value(task["request"].clone()).unwrap();
                let reply = EventEnvelope::new(
                    format!("{parent}-reply"),
                    "raw-fan-worker",
                    Topic::ActionResults,
                    "fan.done",
                )
                .with_data(json!({"request_id": parent, "success": true, "result": task["size"]}))
                .with_time(now())
                .with_correlation_id(req.correlation_id.unwrap_or_default());
                raw_publish(js, "action-results", &reply).await;
            }
            return;
        }
    }
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

/// The last sequence of every stream (KV buckets included): what a run stored, by difference.
async fn stored(js: &jetstream::Context) -> std::collections::BTreeMap<String, u64> {
    let mut streams = js.streams();
    let mut seqs = std::collections::BTreeMap::new();
    while let Some(info) = streams.next().await {
        let info = info.expect("stream info");
        seqs.insert(info.config.name, info.state.last_sequence);
    }
    seqs
}

/// Prints how many messages each stream stored during `run`.
async fn print_writes<F: std::future::Future<Output = Duration>>(
    js: &jetstream::Context,
    what: &str,
    run: F,
) {
    let before = stored(js).await;
    let took = run.await;
    let after = stored(js).await;
    let mut total = 0;
    let mut per_stream = Vec::new();
    for (name, seq) in after {
        let n = seq - before.get(&name).copied().unwrap_or(0);
        if n > 0 {
            total += n;
            per_stream.push(format!("{name} {n}"));
        }
    }
    println!(
        "WRITES {what}: {total} stored messages in {took:?} ({})",
        per_stream.join(", ")
    );
}

/// This process's CPU time (user and system) so far, from /proc (clock ticks).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which ends with the last ')'): utime is the 12th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum())
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A server that fsyncs every write (`sync_interval: always`).
fn start_synced() -> NatsServer {
    let conf = std::env::temp_dir().join(format!("soorma-bench-sync-{}.conf", std::process::id()));
    std::fs::write(&conf, "jetstream {\n  sync_interval: always\n}\n").expect("config");
    NatsServer::start_with(&["-js", "-c", conf.to_str().expect("utf-8 path")])
}

/// The SDK side on `server`: the adder tool, the fan-out worker and a client calling them.
struct Sdk {
    platform: Platform,
    client: Client,
    tool: AgentHandle,
    worker: AgentHandle,
}

impl Sdk {
    async fn start(server: &NatsServer) -> Self {
        let platform = soorma::nats::connect(NatsConfig::new(server.url()))
            .await
            .expect("connect");
        let tool = Tool::new("adder")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("add.requested", add))
            .start(&platform)
            .await
            .expect("tool");
        let worker = Worker::new("fan-worker")
            .use_registered_handlers(false)
            .handler(Handler::on_task("fan.requested", fan))
            .handler(Handler::on_result("fan.part.done", fan_part))
            .start(&platform)
            .await
            .expect("worker");
        let client = platform.client("bench");
        Self {
            platform,
            client,
            tool,
            worker,
        }
    }

    fn call(&self) -> Call {
        let client = self.client.clone();
        call_with(move |n| {
            let client = client.clone();
            async move {
                client
                    .invoke::<i64>("add.requested", Add { a: n, b: 1 }, "add.completed")
                    .await
                    .expect("invoke")
            }
        })
    }

    async fn fan_run(&self) -> Duration {
        let started = Instant::now();
        let n: usize = self
            .client
            .with_timeout(Duration::from_secs(120))
            .invoke("fan.requested", FAN, "fan.done")
            .await
            .expect("fan");
        assert_eq!(n, FAN);
        started.elapsed()
    }

    async fn shutdown(self) {
        self.tool.shutdown().await.expect("shutdown");
        self.worker.shutdown().await.expect("shutdown");
    }
}

fn main() {
    soorma_tests::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let synced_everywhere = std::env::var("SOORMA_BENCH_SYNC").is_ok_and(|v| v == "always");
    let server = if synced_everywhere {
        start_synced()
    } else {
        NatsServer::start()
    };
    let only_memory = std::env::var_os("SOORMA_BENCH_ONLY_MEMORY").is_some();
    rt.block_on(async {
        if only_memory {
            let platform = soorma::nats::connect(NatsConfig::new(server.url())).await.expect("connect");
            return memory(&platform).await;
        }
        let client = async_nats::connect(server.url()).await.expect("raw connect");
        let js = jetstream::new(client.clone());
        raw_stream(&js, "action-requests").await;
        raw_stream(&js, "action-results").await;
        raw_tool(js.clone()).await;
        // Both fan-out workers run from the start, like each side's tool: the SDK's worker
        // (its consumers on the request and result streams) runs during every phase, so the
        // raw one does too. Measured alone (`SOORMA_BENCH_ONLY_ROUND_TRIPS`, two runs each),
        // either side's round trip was 20–30 µs slower with its worker running.
        raw_fan_worker(js.clone()).await;
        let pending = raw_client(client.clone()).await;
        let (j, p) = (js.clone(), pending.clone());
        let raw = call_with(move |n| {
            let (j, p) = (j.clone(), p.clone());
            async move { raw_call(&j, &p, n).await }
        });
        let sdk = Sdk::start(&server).await;
        let sdk_call = sdk.call();

        if let Ok(side) = std::env::var("SOORMA_BENCH_ONLY_ROUND_TRIPS") {
            // One side's round trips alone (to profile or trace it): `raw` or `soorma`.
            let call = if side == "raw" { &raw } else { &sdk_call };
            for i in 0..WARMUP as i64 {
                checked(call, i).await;
            }
            eprintln!("READY");
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (t, cpu) = (Instant::now(), cpu_time());
            let mut samples = Vec::with_capacity(SEQUENTIAL);
            for i in 0..SEQUENTIAL as i64 {
                let one = Instant::now();
                checked(call, i).await;
                samples.push(one.elapsed());
            }
            let (took, cpu) = (t.elapsed(), cpu_time() - cpu);
            println!(
                "{side}: {SEQUENTIAL} round trips in {took:?}, p50 {:?}, {:.1} µs of this process's CPU each",
                median(samples),
                cpu.as_secs_f64() * 1e6 / SEQUENTIAL as f64
            );
            return;
        }
        let [raw_rt, sdk_rt] = round_trips([&raw, &sdk_call]).await;
        let (raw_p50, sdk_p50) = (raw_rt.p50, sdk_rt.p50);
        let [raw_eps, sdk_eps] = best_throughputs([&raw, &sdk_call]).await;
        let (mut raw_fan, mut sdk_fan) = (Vec::new(), Vec::new());
        for _ in 0..FAN_RUNS {
            raw_fan.push(raw_fan_run(&client, &js).await);
            sdk_fan.push(sdk.fan_run().await);
        }
        let (raw_fan, sdk_fan) = (median(raw_fan), median(sdk_fan));
        if std::env::var_os("SOORMA_BENCH_WRITES").is_some() {
            print_writes(&js, "raw fan-out/fan-in", raw_fan_run(&client, &js)).await;
            print_writes(&js, "soorma fan-out/fan-in", sdk.fan_run()).await;
            for (what, call) in [("raw", &raw), ("soorma", &sdk_call)] {
                let n = 2_000;
                let (cpu, t) = (cpu_time(), Instant::now());
                for i in 0..n {
                    checked(call, i).await;
                }
                let (cpu, t) = (cpu_time() - cpu, t.elapsed());
                println!(
                    "CPU {what} round trip: {:.1} µs of this process's CPU and {:.1} µs elapsed each ({n} in a row)",
                    cpu.as_secs_f64() * 1e6 / n as f64,
                    t.as_secs_f64() * 1e6 / n as f64
                );
            }
            print_writes(&js, "raw round trip", async {
                let t = Instant::now();
                checked(&raw, 1).await;
                t.elapsed()
            })
            .await;
            print_writes(&js, "soorma round trip", async {
                let t = Instant::now();
                checked(&sdk_call, 1).await;
                t.elapsed()
            })
            .await;
        }
        let storage = if synced_everywhere { "sync_interval: always" } else { "default sync" };
        println!("NATS, {storage} ({SEQUENTIAL} sequential round trips each, alternating; {} in {CALLERS} concurrent callers, best of {ROUNDS}; fan-out of {FAN}, median of {FAN_RUNS})", CALLERS * PER_CALLER);
        println!("  raw async-nats  p50 {raw_p50:>9.2?}  {raw_eps:>8.0} events/s  fan-out/fan-in {raw_fan:>9.2?}");
        println!("  soorma          p50 {sdk_p50:>9.2?}  {sdk_eps:>8.0} events/s  fan-out/fan-in {sdk_fan:>9.2?}");
        for (side, rt) in [("raw", &raw_rt), ("soorma", &sdk_rt)] {
            println!("LEGS {side:<6} round trip p50 {:>9.2?}  request leg p50 {:>9.2?}  reply leg p50 {:>9.2?}", rt.p50, rt.request, rt.reply);
        }
        println!("RATIO nats_roundtrip_p50 {:.3}", sdk_p50.as_secs_f64() / raw_p50.as_secs_f64());
        println!("RATIO nats_events_per_sec {:.3}", sdk_eps / raw_eps);
        println!("RATIO nats_fanout_1000 {:.3}", sdk_fan.as_secs_f64() / raw_fan.as_secs_f64());

        if !synced_everywhere {
            // The SDK on a server that fsyncs every write, against the SDK on the default one.
            let synced_server = start_synced();
            let synced = Sdk::start(&synced_server).await;
            let [p50, synced_p50] = round_trips([&sdk_call, &synced.call()]).await.map(|rt| rt.p50);
            let (mut fan, mut synced_fan) = (Vec::new(), Vec::new());
            for _ in 0..FAN_RUNS {
                fan.push(sdk.fan_run().await);
                synced_fan.push(synced.fan_run().await);
            }
            let (fan, synced_fan) = (median(fan), median(synced_fan));
            println!("SDK with sync_interval: always against the default server");
            println!("  default          p50 {p50:>9.2?}  fan-out/fan-in {fan:>9.2?}");
            println!("  fsync per write  p50 {synced_p50:>9.2?}  fan-out/fan-in {synced_fan:>9.2?}");
            println!("RATIO nats_roundtrip_p50_fsync {:.3}", synced_p50.as_secs_f64() / p50.as_secs_f64());
            println!("RATIO nats_fanout_1000_fsync {:.3}", synced_fan.as_secs_f64() / fan.as_secs_f64());
            synced.shutdown().await;
        }

        // The same connection as the phases above.
        let platform = sdk.platform.clone();
        sdk.shutdown().await;
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
        let before = soorma_tests::rss_kib();
        let parker = soorma_tests::agents::parker()
            .concurrency(
                std::env::var("SOORMA_BENCH_PARK_CONCURRENCY")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1024),
            )
            .start(platform)
            .await
            .expect("parker");
        let started = Instant::now();
        // Every task delegated: persisted and pending.
        soorma_tests::agents::park_and_wait(
            &platform.client("bench").bus(),
            in_flight as u32,
            Duration::from_secs(60),
            Duration::from_secs(5),
            |parked| {
                eprintln!(
                    "  ... {parked} of {in_flight} tasks persisted after {:?}",
                    started.elapsed()
                )
            },
        )
        .await;
        let after = soorma_tests::rss_kib();
        println!(
            "MEMORY worker_with_{in_flight}_in_flight_tasks rss_kib {after} (before {before}, +{} KiB; {:?} to submit and persist)",
            after.saturating_sub(before),
            started.elapsed()
        );
        parker.shutdown().await.expect("shutdown");
    }
}
