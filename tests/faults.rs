//! Fault tests against a real `nats-server`: worker processes killed (SIGKILL) mid fan-out and
//! mid fan-in, competing worker processes, a cluster node killed mid-run, and the checks that
//! nothing is lost or doubled.
//!
//! Worker processes are this test binary re-executed with `SOORMA_FAULT_ROLE` set (see
//! [`fault_child_process`]); the tools and the observer run in the test process.

use std::collections::{HashMap, HashSet};

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::ActionReply;
use soorma::BoxFuture;
use soorma::bus::{EventBus, Subscription, SubscriptionSpec};
use soorma::nats::NatsConfig;
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::child::ChildProcess;
use soorma_tests::nats_server::{NatsCluster, NatsServer};

const ACK_WAIT: Duration = Duration::from_secs(2);
/// Held by each test that runs a 3-node cluster: two at once (six servers) on a small machine
/// slow JetStream's recovery from a lost server past the callers' timeouts.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const FINISH: Duration = Duration::from_secs(90);

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Job {
    base: i64,
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct JobDone {
    sum: i64,
    parts: usize,
    instance: String,
}

#[derive(Clone)]
struct Instance(String);

async fn job(mut task: TaskContext<Job>) -> soorma::Result<()> {
    let delegations: Vec<Delegation> = (0..i64::from(task.data.n))
        .map(|i| Delegation::new("inc.requested", &(task.data.base + i), "inc.done"))
        .collect();
    task.delegate_parallel(delegations).await?;
    Ok(())
}

async fn inc_done(
    result: ResultContext<i64>,
    State(instance): State<Instance>,
) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let sum = all.iter().filter_map(|s| s.result.as_ref()?.as_i64()).sum();
        task.complete(JobDone {
            sum,
            parts: all.len(),
            instance: instance.0,
        })
        .await?;
    }
    Ok(())
}

fn worker(instance: &str) -> AgentBuilder {
    Worker::new("fault-worker")
        .use_registered_handlers(false)
        .with_state(Instance(instance.to_owned()))
        .handler(Handler::on_task("job.requested", job))
        .handler(Handler::on_result("inc.done", inc_done))
}

#[derive(Clone)]
struct Delay(Duration);

async fn inc(req: Invocation<i64>, State(delay): State<Delay>) -> Result<i64, ToolError> {
    tokio::time::sleep(delay.0).await;
    Ok(req.data + 1)
}

fn inc_tool(delay: Duration, concurrency: usize) -> AgentBuilder {
    Tool::new("inc")
        .use_registered_handlers(false)
        .with_state(Delay(delay))
        .concurrency(concurrency)
        .handler(Handler::on_invoke("inc.requested", inc))
}

fn config(server: &NatsServer) -> NatsConfig {
    NatsConfig::new(server.url()).with_ack_wait(ACK_WAIT)
}

/// Not a test of its own: the entry point of the worker processes the fault tests start.
/// Without `SOORMA_FAULT_ROLE` it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_child_process() {
    let Ok(instance) = std::env::var("SOORMA_FAULT_ROLE") else {
        return;
    };
    soorma_tests::init_tracing();
    let url = std::env::var("SOORMA_FAULT_NATS_URL").expect("SOORMA_FAULT_NATS_URL");
    // The crash-recovery test runs with the defaults: it is their relation being tested.
    let config = match instance.as_str() {
        "hanging-tool" => NatsConfig::new(url),
        _ => NatsConfig::new(url).with_ack_wait(ACK_WAIT),
    };
    let platform = soorma::nats::connect(config).await.expect("child connects");
    let mut running = Vec::new();
    if instance == "dies-before-replying" {
        // Dies the moment it would publish a completion: after the write that ended the task,
        // before the reply.
        let parts = soorma::EngineParts::new(
            "nats",
            Arc::new(DiesBeforeReplying(platform.bus().clone())),
            platform.state().clone(),
            platform.registry().clone(),
        );
        let dying = Platform::from_parts(parts);
        running.push(
            worker(&instance)
                .start(&dying)
                .await
                .expect("worker starts"),
        );
    } else if instance == "hanging-tool" {
        running.push(echo_tool(true).start(&platform).await.expect("tool starts"));
    } else if instance == "approval-planner" {
        for agent in soorma_tests::agents::approval_agents() {
            running.push(agent.start(&platform).await.expect("planner starts"));
        }
    } else {
        running.push(
            worker(&instance)
                .start(&platform)
                .await
                .expect("worker starts"),
        );
    }
    println!("READY {instance}");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// A bus that kills its process (abort: no shutdown, no acks) when asked to publish a
/// `job.done` reply.
struct DiesBeforeReplying(Arc<dyn EventBus>);

impl EventBus for DiesBeforeReplying {
    fn publish(&self, envelope: soorma::EventEnvelope) -> BoxFuture<'_, soorma::Result<()>> {
        if envelope.event_type == "job.done" {
            std::process::abort();
        }
        self.0.publish(envelope)
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, soorma::Result<Box<dyn Subscription>>> {
        self.0.subscribe(spec)
    }

    fn observe(
        &self,
        topic: Option<Topic>,
    ) -> BoxFuture<'_, soorma::Result<Box<dyn Subscription>>> {
        self.0.observe(topic)
    }
}

/// Answers `echo.requested` with its input; the hanging instance announces each request
/// (`GOT <n>` on stdout) and never answers.
fn echo_tool(hang: bool) -> AgentBuilder {
    async fn echo(req: Invocation<i64>, State(hang): State<bool>) -> Result<i64, ToolError> {
        if hang {
            println!("GOT {}", req.data);
            std::future::pending::<()>().await;
        }
        Ok(req.data)
    }
    Tool::new("echo")
        .use_registered_handlers(false)
        .with_state(hang)
        .handler(Handler::on_invoke("echo.requested", echo))
}

/// A worker process, SIGKILLed on drop.
struct WorkerProcess(ChildProcess);

impl WorkerProcess {
    /// Starts the child process `instance` and waits until it is ready.
    fn spawn(server: &NatsServer, instance: &str) -> Self {
        Self(ChildProcess::spawn(
            "fault_child_process",
            &[
                ("SOORMA_FAULT_ROLE", instance),
                ("SOORMA_FAULT_NATS_URL", &server.url()),
            ],
        ))
    }

    /// Waits (up to a minute) for a line of the process's stdout containing `text`.
    fn wait_for_line(&self, text: &str) -> String {
        self.0
            .line_with(text, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no line with `{text}` from the worker process"))
    }

    /// Waits (up to [`FINISH`]) for the process to exit by itself.
    async fn exits(&mut self) {
        let deadline = tokio::time::Instant::now() + FINISH;
        while !self.0.has_exited() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for the worker process to exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no shutdown, no acks, no deregistration.
    fn kill(self) {
        self.0.kill();
    }
}

async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + FINISH;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submits `count` jobs of `n` sub-tasks; returns their correlation ids and expected sums.
async fn submit(t: &TestPlatform, count: i64, n: u32) -> HashMap<String, i64> {
    let bus = t.client().bus();
    let mut expected = HashMap::new();
    for j in 0..count {
        let base = j * 1000;
        let id = bus
            .request("job.requested", Job { base, n }, "job.done")
            .await
            .unwrap();
        // Sum of (base + i + 1) for i in 0..n.
        let n = i64::from(n);
        expected.insert(id, base * n + n * (n + 1) / 2);
    }
    expected
}

/// How many `job.done` messages the action-results stream holds (after `Nats-Msg-Id`
/// de-duplication): a doubled completion would show here.
async fn stored_completions(platform: &Platform) -> usize {
    let js = soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
    let stream = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
    let mut subjects = stream
        .info_with_subjects("soorma.*.action-results.job.done")
        .await
        .unwrap();
    let mut total = 0;
    while let Some(entry) = subjects.next().await {
        total += entry.unwrap().1;
    }
    total
}

/// Every job completed exactly once, successfully, with the right sum; returns completions per
/// worker instance.
async fn assert_each_completed_once(
    t: &TestPlatform,
    expected: &HashMap<String, i64>,
    n: u32,
) -> HashMap<String, usize> {
    let done = t.events_of_type("job.done");
    let mut seen = HashSet::new();
    let mut per_instance: HashMap<String, usize> = HashMap::new();
    for env in &done {
        let corr = env.correlation_id.clone().expect("correlated");
        assert!(seen.insert(corr.clone()), "job {corr} completed twice");
        let reply: ActionReply = serde_json::from_value(env.data.clone()).unwrap();
        assert!(reply.success, "job {corr} failed: {:?}", reply.error);
        let result: JobDone = serde_json::from_value(reply.result.unwrap()).unwrap();
        assert_eq!(
            Some(&result.sum),
            expected.get(&corr),
            "job {corr} has the wrong sum"
        );
        assert_eq!(result.parts, n as usize, "job {corr} lost a part");
        *per_instance.entry(result.instance).or_default() += 1;
    }
    assert_eq!(seen.len(), expected.len(), "every job completed");
    assert_eq!(
        stored_completions(t.platform()).await,
        expected.len(),
        "no doubled completion stored"
    );
    per_instance
}

/// With the defaults (`ack_wait` 30 s, `Client::DEFAULT_TIMEOUT` 30 s), six callers waiting on
/// a tool process that is SIGKILLed while handling their requests all get their replies from
/// the instance that replaces it, once the requests are redelivered after `ack_wait`: the
/// client's default timeout is the handling time plus the platform's redelivery delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_clients_get_their_replies_after_the_handling_process_is_killed() {
    let server = NatsServer::start();
    let hanging = WorkerProcess::spawn(&server, "hanging-tool");
    let platform = soorma::nats::connect(NatsConfig::new(server.url()))
        .await
        .unwrap();
    let client = platform.client("callers");
    assert_eq!(
        client.timeout(),
        Client::DEFAULT_TIMEOUT + NatsConfig::new(server.url()).ack_wait
    );
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..6_i64)
        .map(|n| {
            let client = platform.client(format!("caller-{n}"));
            tokio::spawn(async move {
                client
                    .invoke::<i64>("echo.requested", n, "echo.completed")
                    .await
            })
        })
        .collect();
    for _ in 0..6 {
        hanging.wait_for_line("GOT ");
    }
    hanging.kill();
    let replacement = echo_tool(false).start(&platform).await.unwrap();
    for (n, call) in calls.into_iter().enumerate() {
        let reply = call.await.unwrap();
        assert_eq!(reply.unwrap(), n as i64, "caller {n}");
    }
    // The replies came by redelivery, not before it.
    assert!(
        started.elapsed() >= Duration::from_secs(25),
        "{:?}",
        started.elapsed()
    );
    replacement.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_workers_mid_fan_out_and_mid_fan_in_lose_and_double_nothing() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = soorma::nats::connect(config(&server)).await.unwrap();
    let mut t = TestPlatform::with_platform(platform).await.unwrap();
    // A slow tool, so results trickle in while workers die.
    t.start(inc_tool(Duration::from_millis(15), 8))
        .await
        .unwrap();
    let (jobs, n) = (40, 10);

    // Kill the first worker mid fan-out: as soon as its first sub-task request appears.
    let a = WorkerProcess::spawn(&server, "a");
    let expected = submit(&t, jobs, n).await;
    wait_for("a first delegation", || {
        !t.events_of_type("inc.requested").is_empty()
    })
    .await;
    a.kill();

    // Kill the second mid fan-in: once a third of the results are in.
    let b = WorkerProcess::spawn(&server, "b");
    let total = (jobs as usize) * n as usize;
    wait_for("a third of the results", || {
        t.events_of_type("inc.done").len() >= total / 3
    })
    .await;
    b.kill();

    // A third instance finishes everything.
    let _c = WorkerProcess::spawn(&server, "c");
    wait_for("every completion", || {
        t.events_of_type("job.done").len() >= expected.len()
    })
    .await;
    tokio::time::sleep(ACK_WAIT * 2).await; // let any redelivery that could double a completion happen
    assert_each_completed_once(&t, &expected, n).await;
    t.shutdown().await.unwrap();
}

async fn competing_workers(instances: usize) {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = soorma::nats::connect(config(&server)).await.unwrap();
    let mut t = TestPlatform::with_platform(platform).await.unwrap();
    t.start(inc_tool(Duration::ZERO, 256)).await.unwrap();
    let names: Vec<String> = (0..instances).map(|i| format!("w{i}")).collect();
    let _workers: Vec<WorkerProcess> = names
        .iter()
        .map(|n| WorkerProcess::spawn(&server, n))
        .collect();
    let expected = submit(&t, 1_000, 1).await;
    wait_for("every completion", || {
        t.events_of_type("job.done").len() >= expected.len()
    })
    .await;
    let per_instance = assert_each_completed_once(&t, &expected, 1).await;
    assert_eq!(per_instance.values().sum::<usize>(), 1_000);
    assert!(
        per_instance.len() > 1,
        "instances shared the work: {per_instance:?}"
    );
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_competing_worker_processes_complete_1000_tasks_exactly_once() {
    competing_workers(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_competing_worker_processes_complete_1000_tasks_exactly_once() {
    competing_workers(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_input_timeout_fires_after_the_planner_that_asked_was_killed() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = soorma::nats::connect(config(&server)).await.unwrap();
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    let asker = WorkerProcess::spawn(&server, "approval-planner");
    let client = t.client().with_timeout(FINISH);
    let goal = tokio::spawn(async move {
        client
            .invoke::<serde_json::Value>(
                "post.goal",
                // Long enough that a loaded machine kills the asker before its timer is due.
                serde_json::json!({"topic": "timers", "timeout_ms": 8000}),
                "post.done",
            )
            .await
    });
    wait_for("the question", || {
        !t.events_of_type("notification.human_input").is_empty()
    })
    .await;
    // The planner that asked dies (with its in-process timer); its timer is in the store...
    asker.kill();
    let stored = platform
        .state()
        .keys(soorma::planner::TIMERS_BUCKET, "default")
        .await
        .unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    // ...and the next planner instance fires it: the plan expires, the caller learns why.
    for agent in soorma_tests::agents::approval_agents() {
        t.start(agent).await.unwrap();
    }
    let err = goal.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("in time"), "{err}");
    assert_eq!(t.events_of_type("plan.timeout").len(), 1);
    t.shutdown().await.unwrap();
}

/// Connects once the cluster has elected its JetStream leaders (creating the registry bucket
/// fails until then).
async fn connect_when_ready(config: NatsConfig) -> Platform {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match soorma::nats::connect(config.clone()).await {
            Ok(p) => return p,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the cluster did not become ready: {e}"),
        }
    }
}

/// How many replies on `subject` the action-results stream keeps (after `Nats-Msg-Id`
/// de-duplication), and how many of them each correlation id has.
async fn stored_replies(platform: &Platform, subject: &str) -> (usize, HashMap<String, usize>) {
    use soorma::nats::async_nats::jetstream::{self, consumer};
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let stream = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut replies = HashMap::new();
    let mut total = 0;
    // Every message the stream holds on `subject`: until none is pending.
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("the stored replies are read")
            .unwrap()
            .unwrap();
        for envelope in soorma::nats::envelopes_of(message.headers.as_ref(), &message.payload)
            .expect("soorma envelopes")
        {
            *replies
                .entry(envelope.correlation_id.expect("correlated"))
                .or_default() += 1;
            total += 1;
        }
        if message.info().unwrap().pending == 0 {
            break;
        }
    }
    let mut counted = 0;
    let mut subjects = stream.info_with_subjects(subject).await.unwrap();
    while let Some(entry) = subjects.next().await {
        counted += entry.unwrap().1;
    }
    eprintln!("{subject}: {total} replies read, {counted} counted by subject");
    (total, replies)
}

/// A 3-node cluster with replicas 3: the node leading the action-results stream is killed
/// (SIGKILL) while 200 tasks (150 tool calls, 50 worker jobs fanning out to the tool) are in
/// flight. Every call gets its right reply; the stream holds exactly one reply per task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_node_killed_mid_run_loses_and_doubles_no_task() {
    use soorma::nats::async_nats::jetstream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    soorma_tests::init_tracing();
    let _one_cluster = CLUSTER.lock().await;
    let started = std::time::Instant::now();
    let mut cluster = NatsCluster::start(3);
    let config = NatsConfig::new(cluster.urls())
        .with_replicas(3)
        .with_ack_wait(ACK_WAIT);
    let agents = connect_when_ready(config.clone()).await;
    // The caller connects to any node: when its own server is the one killed, its replies
    // published while it reconnects are replayed from the stream.
    let caller = connect_when_ready(config).await;
    let _tool = inc_tool(Duration::from_millis(40), 8)
        .start(&agents)
        .await
        .unwrap();
    let _worker = worker("w").start(&agents).await.unwrap();

    // Streams, buckets and the consumers have 3 replicas (a leader and 2 followers).
    let js = jetstream::new(caller.nats_client().unwrap().clone());
    for name in [
        "SOORMA_ACTION_REQUESTS",
        "SOORMA_ACTION_RESULTS",
        "KV_soorma_registry",
    ] {
        let stream = js.get_stream(name).await.unwrap();
        let replicas = stream
            .cached_info()
            .cluster
            .as_ref()
            .map(|c| c.replicas.len());
        assert_eq!(replicas, Some(2), "{name} has 3 replicas");
    }
    let requests = js.get_stream("SOORMA_ACTION_REQUESTS").await.unwrap();
    let mut consumers = requests.consumers();
    let mut seen = 0;
    while let Some(info) = consumers.next().await {
        let info = info.unwrap();
        let replicas = info.cluster.as_ref().map(|c| c.replicas.len());
        assert_eq!(replicas, Some(2), "consumer {} has 3 replicas", info.name);
        seen += 1;
    }
    assert!(seen >= 2, "the tool's and the worker's consumers");

    // A stream the operator created at R3 is adopted by a deployment configured with 1 replica,
    // and the consumers on it follow the stream (3 replicas).
    js.create_stream(jetstream::stream::Config {
        name: "PRE_ACTION_REQUESTS".into(),
        subjects: vec!["pre.*.action-requests.>".into()],
        num_replicas: 3,
        storage: jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let pre = connect_when_ready(NatsConfig::new(cluster.urls()).with_prefix("pre")).await;
    let pre_tool = inc_tool(Duration::ZERO, 1).start(&pre).await.unwrap();
    let adopted = js.get_stream("PRE_ACTION_REQUESTS").await.unwrap();
    assert_eq!(adopted.cached_info().config.num_replicas, 3);
    assert_eq!(
        adopted.cached_info().config.storage,
        jetstream::stream::StorageType::Memory
    );
    let mut consumers = adopted.consumers();
    let info = consumers
        .next()
        .await
        .expect("the tool's consumer")
        .unwrap();
    assert_eq!(info.cluster.as_ref().map(|c| c.replicas.len()), Some(2));
    pre_tool.shutdown().await.unwrap();

    let client = caller
        .client("cluster-caller")
        .with_timeout(Duration::from_secs(40));
    let done = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for i in 0..150_i64 {
        let (client, done) = (client.clone(), done.clone());
        calls.push(tokio::spawn(async move {
            let reply = client.request("inc.requested", i, "inc.replied").await;
            done.fetch_add(1, Ordering::Relaxed);
            let value = reply.and_then(|r| r.into_result::<i64>());
            (format!("inc {i}"), value.map(|v| v == i + 1))
        }));
    }
    for j in 0..50_i64 {
        let (client, done) = (client.clone(), done.clone());
        let job = Job {
            base: j * 1000,
            n: 2,
        };
        calls.push(tokio::spawn(async move {
            let reply = client.request("job.requested", job, "job.done").await;
            done.fetch_add(1, Ordering::Relaxed);
            let value = reply.and_then(|r| r.into_result::<JobDone>());
            // (base + 1) + (base + 2)
            (
                format!("job {j}"),
                value.map(|v| v.sum == 2 * j * 1000 + 3 && v.parts == 2),
            )
        }));
    }

    // Mid-run: a quarter of the calls answered.
    wait_for("a quarter of the replies", || {
        done.load(Ordering::Relaxed) >= calls.len() / 4
    })
    .await;
    let results = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
    let leader = results
        .cached_info()
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("the action-results stream has a leader");
    let answered = done.load(Ordering::Relaxed);
    let caller_on = caller.nats_client().unwrap().server_info().server_name;
    let agents_on = agents.nats_client().unwrap().server_info().server_name;
    eprintln!(
        "killing {leader}, the action-results stream leader, after {answered} replies (the caller is on {caller_on}, the agents on {agents_on})"
    );
    cluster.kill(&leader);

    let killed_at = started.elapsed();
    let mut failures = Vec::new();
    for call in calls {
        let (what, outcome) = call.await.unwrap();
        match outcome {
            Ok(true) => {}
            Ok(false) => failures.push(format!("{what}: wrong result")),
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "killed {leader} after {answered} replies; {} calls failed: {failures:?}",
        failures.len()
    );
    eprintln!(
        "killed after {killed_at:?}; every call answered after {:?}",
        started.elapsed()
    );
    // Redeliveries that could double a reply have had their time.
    tokio::time::sleep(ACK_WAIT * 2).await;
    for (subject, expected) in [
        ("soorma.*.action-results.inc.replied", 150),
        ("soorma.*.action-results.job.done", 50),
    ] {
        let (stored, replies) = stored_replies(&caller, subject).await;
        let doubled: Vec<_> = replies.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            doubled.is_empty() && replies.len() == expected,
            "{subject}: {stored} replies stored for {} of {expected} tasks; doubled: {doubled:?}",
            replies.len()
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

async fn heard(_: Event<i64>) -> soorma::Result<()> {
    Ok(())
}

/// Starts an agent hearing `reading.taken` (numbers: anything else is dead-lettered).
async fn hearing(name: &str, platform: &Platform) -> soorma::Result<soorma::AgentHandle> {
    Agent::new(name)
        .use_registered_handlers(false)
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "reading.taken",
            heard,
        ))
        .start(platform)
        .await
}

/// Publishes keep going through the loss of the node leading their stream: those that find no
/// leader for a moment (or lose their acknowledgement with the node) are sent again with the
/// same de-duplication id, so every event is stored exactly once and no publisher sees an
/// error. An agent starting meanwhile registers and creates its consumer (before that was
/// retried too, its consumer's creation timed out in 3 of 8 runs). With `failover_retry` zero, most of these
/// publishes fail ("no stream found", "didn't receive ack in time": 295 and 296 of 400 in two
/// runs when the test was written).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publishes_ride_through_the_loss_of_their_streams_leader() {
    use soorma::nats::async_nats::jetstream;
    use std::sync::atomic::{AtomicUsize, Ordering};
    soorma_tests::init_tracing();
    let _one_cluster = CLUSTER.lock().await;
    let mut cluster = NatsCluster::start(3);
    let config = NatsConfig::new(cluster.urls()).with_replicas(3);
    let platform = connect_when_ready(config.clone()).await;
    let client = platform.client("publisher");
    client
        .publish(Topic::BusinessFacts, "reading.taken", 0)
        .await
        .unwrap();
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let leader = stream_leader(&js, "SOORMA_BUSINESS_FACTS").await;

    const PUBLISHERS: usize = 8;
    const EACH: usize = 50;
    let published = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let (client, published) = (client.clone(), published.clone());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                for i in 0..EACH {
                    let n = p * EACH + i + 1;
                    match client
                        .publish(Topic::BusinessFacts, "reading.taken", n)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) => failures.push(format!("reading {n}: {e}")),
                    }
                    published.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                failures
            })
        })
        .collect();
    wait_for("a quarter of the publishes", || {
        published.load(Ordering::Relaxed) >= PUBLISHERS * EACH / 4
    })
    .await;
    eprintln!(
        "killing {leader}, the business-facts stream leader, after {} publishes",
        published.load(Ordering::Relaxed)
    );
    cluster.kill(&leader);
    // An agent registering while the cluster recovers.
    let registered = hearing("listener", &platform).await;
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} publishes failed: {failures:?}",
        failures.len()
    );
    registered.expect("an agent registers while the cluster recovers");
    assert_eq!(
        stream_messages(&js, "SOORMA_BUSINESS_FACTS").await,
        (PUBLISHERS * EACH + 1) as u64,
        "every event stored once"
    );
}

/// Dead letters are stored through the loss of the node leading the dead-letter stream: a
/// dead letter whose publish finds no leader (or loses its acknowledgement) is sent again under
/// one de-duplication id, so each event that cannot be handled is stored in `SOORMA_DLQ` once,
/// and none is redelivered to be dead-lettered again. Every other stream and consumer is led
/// elsewhere, and the agent is connected to the other nodes. Without the retry, one of two runs
/// had only 153 of the 301 dead letters stored after 90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_ride_through_the_loss_of_their_streams_leader() {
    use soorma::nats::async_nats::jetstream;
    soorma_tests::init_tracing();
    let _one_cluster = CLUSTER.lock().await;
    let mut cluster = NatsCluster::start(3);
    let admin = connect_when_ready(NatsConfig::new(cluster.urls()).with_replicas(3)).await;
    let nats = admin.nats_client().unwrap().clone();
    let js = jetstream::new(nats.clone());
    // The first dead letter creates the stream; its leader is the node to kill.
    let first = hearing("strict", &admin).await.unwrap();
    admin
        .client("publisher")
        .publish(Topic::BusinessFacts, "reading.taken", "not a number")
        .await
        .unwrap();
    wait_for_messages(&js, "SOORMA_DLQ", 1).await;
    first.shutdown().await.unwrap();
    let leader = stream_leader(&js, "SOORMA_DLQ").await;
    lead_elsewhere(&nats, &leader, &["SOORMA_DLQ"]).await;
    let platform =
        connect_when_ready(NatsConfig::new(cluster.urls_except(&leader)).with_replicas(3)).await;
    let agent = hearing("strict", &platform).await.unwrap();

    const EVENTS: u64 = 300;
    let client = platform.client("publisher");
    let publishing = tokio::spawn(async move {
        for n in 0..EVENTS {
            client
                .publish(
                    Topic::BusinessFacts,
                    "reading.taken",
                    format!("not a number {n}"),
                )
                .await
                .expect("the facts stream keeps its leader");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    wait_for_messages(&js, "SOORMA_DLQ", EVENTS / 4).await;
    eprintln!("killing {leader}, the dead-letter stream's leader");
    drop(admin);
    cluster.kill(&leader);
    publishing.await.unwrap();
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    wait_for_messages(&js, "SOORMA_DLQ", EVENTS + 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        stream_messages(&js, "SOORMA_DLQ").await,
        EVENTS + 1,
        "each dead letter stored once"
    );
    let consumer = js
        .get_stream("SOORMA_BUSINESS_FACTS")
        .await
        .unwrap()
        .consumer_info("strict__business-facts")
        .await
        .unwrap()
        .clone();
    assert_eq!(
        consumer.num_redelivered, 0,
        "no event was redelivered to be dead-lettered again"
    );
    assert_eq!((consumer.num_pending, consumer.num_ack_pending), (0, 0));
    agent.shutdown().await.unwrap();
}

/// The node leading `stream`.
async fn stream_leader(js: &soorma::nats::async_nats::jetstream::Context, stream: &str) -> String {
    js.get_stream(stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .cluster
        .clone()
        .and_then(|c| c.leader)
        .unwrap_or_else(|| panic!("{stream} has no leader"))
}

/// How many messages `stream` keeps (0 while it cannot be read).
async fn stream_messages(js: &soorma::nats::async_nats::jetstream::Context, stream: &str) -> u64 {
    match js.get_stream(stream).await {
        Ok(mut s) => s.info().await.map_or(0, |i| i.state.messages),
        Err(_) => 0,
    }
}

/// Waits until `stream` keeps at least `n` messages.
async fn wait_for_messages(
    js: &soorma::nats::async_nats::jetstream::Context,
    stream: &str,
    n: u64,
) {
    let deadline = tokio::time::Instant::now() + FINISH;
    loop {
        let stored = stream_messages(js, stream).await;
        if stored >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{stored} of {n} messages in {stream}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Moves the leaders of every stream (but `except`) and consumer off the node `node` (a
/// stream's or consumer's leader steps down until another node leads it).
async fn lead_elsewhere(nats: &soorma::nats::async_nats::Client, node: &str, except: &[&str]) {
    use soorma::nats::async_nats::jetstream;
    let js = jetstream::new(nats.clone());
    let names: Vec<String> = js.stream_names().map(|n| n.unwrap()).collect().await;
    let leader = |cluster: Option<jetstream::stream::ClusterInfo>| cluster.and_then(|c| c.leader);
    for stream in names.into_iter().filter(|n| !except.contains(&n.as_str())) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut s = js.get_stream(&stream).await.unwrap();
            let led_by = leader(s.info().await.unwrap().cluster.clone());
            let mut on_node: Vec<String> = Vec::new();
            if led_by.as_deref() != Some(node) {
                let mut consumers = s.consumers();
                while let Some(info) = consumers.next().await {
                    let info = info.unwrap();
                    if leader(info.cluster.clone()).as_deref() != Some(node) {
                        continue;
                    }
                    on_node.push(info.name);
                }
                if on_node.is_empty() && led_by.is_some() {
                    break;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{stream} or its consumers {on_node:?} still led by {node}"
            );
            let subject = if led_by.as_deref() == Some(node) {
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
            } else if let Some(consumer) = on_node.first() {
                format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}")
            } else {
                String::new()
            };
            if !subject.is_empty() {
                let _ = nats.request(subject, "".into()).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// A caller whose own server hangs and then dies while replies are being published still gets
/// every reply (with the default timeout): after reconnecting to another node, its reply
/// subscription replays from the action-results stream what was published meanwhile. The tool
/// is connected to the other nodes, which lead every stream and consumer, so replies keep being
/// published and stored while the caller reconnects. No consumer is left behind by the replay.
/// An observer on the caller's connection sees each reply once (the replay drops what it saw).
/// Without the replay, about 290 of the 400 calls time out; without the observer's
/// de-duplication, it sees dozens of replies twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_whose_server_dies_gets_the_replies_published_while_it_reconnects() {
    use soorma::nats::async_nats::jetstream;
    use std::sync::atomic::{AtomicUsize, Ordering};
    soorma_tests::init_tracing();
    let _one_cluster = CLUSTER.lock().await;
    let mut cluster = NatsCluster::start(3);
    let caller = connect_when_ready(
        NatsConfig::new(cluster.urls())
            .with_replicas(3)
            .with_ack_wait(ACK_WAIT),
    )
    .await;
    let caller_nats = caller.nats_client().unwrap().clone();
    let x = caller_nats.server_info().server_name;
    let agents = connect_when_ready(
        NatsConfig::new(cluster.urls_except(&x))
            .with_replicas(3)
            .with_ack_wait(ACK_WAIT),
    )
    .await;
    assert_ne!(agents.nats_client().unwrap().server_info().server_name, x);
    let _tool = inc_tool(Duration::from_millis(100), 32)
        .start(&agents)
        .await
        .unwrap();
    let client = caller.client("failover-caller");
    assert_eq!(client.timeout(), soorma::Client::DEFAULT_TIMEOUT + ACK_WAIT);
    // A first call creates the action-results stream.
    let warm_up = client.request("inc.requested", 0_i64, "inc.replied").await;
    assert_eq!(warm_up.unwrap().into_result::<i64>().unwrap(), 1);
    // Only the caller's connection is lost: no stream or consumer is led by X (an agent
    // whose consumer loses its leader stalls for a while, which is not tested here).
    lead_elsewhere(&caller_nats, &x, &[]).await;
    let js = jetstream::new(caller_nats.clone());
    // An observer of action-results on the caller's connection: its replay after the
    // reconnect must neither miss a reply nor show one twice (it drops what it already saw).
    let mut observer = caller
        .bus()
        .observe(Some(Topic::ActionResults))
        .await
        .unwrap();
    // By the reply's value (call i is answered i + 1); the warm-up's reply (1), published
    // shortly before, may be replayed too and is not counted.
    let observed = Arc::new(std::sync::Mutex::new(HashMap::<i64, usize>::new()));
    let seen = observed.clone();
    let observing = tokio::spawn(async move {
        while let Some(delivery) = observer.next().await {
            let env = &delivery.envelope;
            let value = env.data["result"].as_i64().unwrap_or_default();
            if env.event_type == "inc.replied" && (2..=401).contains(&value) {
                *seen.lock().unwrap().entry(value).or_default() += 1;
            }
        }
    });

    // 400 calls, answered at about 300 a second by the tool.
    let done = Arc::new(AtomicUsize::new(0));
    let mut calls = Vec::new();
    for i in 1..=400_i64 {
        let (client, done) = (client.clone(), done.clone());
        calls.push(tokio::spawn(async move {
            let reply = client.request("inc.requested", i, "inc.replied").await;
            done.fetch_add(1, Ordering::Relaxed);
            (i, reply.and_then(|r| r.into_result::<i64>()))
        }));
    }
    wait_for("the first replies", || done.load(Ordering::Relaxed) >= 40).await;
    // The JetStream API requests that create and delete consumers of the action-results
    // stream, seen from a connection that survives: the replay's consumers must be deleted by
    // the replay itself (the server would also drop them, 10 s after they go idle).
    let agents_nats = agents.nats_client().unwrap().clone();
    let mut api = futures_util::stream::select(
        agents_nats
            .subscribe("$JS.API.CONSUMER.CREATE.SOORMA_ACTION_RESULTS.>")
            .await
            .unwrap(),
        agents_nats
            .subscribe("$JS.API.CONSUMER.DELETE.SOORMA_ACTION_RESULTS.>")
            .await
            .unwrap(),
    );
    agents_nats.flush().await.unwrap();
    let api_requests = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let spied = api_requests.clone();
    let spying = tokio::spawn(async move {
        while let Some(msg) = api.next().await {
            spied.lock().unwrap().push(msg.subject.to_string());
        }
    });
    // X hangs for a second, then dies: what is published meanwhile never reaches the caller,
    // which notices only when its connection breaks.
    let answered = done.load(Ordering::Relaxed);
    cluster.freeze(&x);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(&x);
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    for call in calls {
        let (i, outcome) = call.await.unwrap();
        match outcome {
            Ok(v) if v == i + 1 => {}
            Ok(v) => failures.push(format!("inc {i}: {v}")),
            Err(e) => failures.push(format!("inc {i}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "killed {x} (the caller's server) after {answered} replies; {} calls failed: {failures:?}",
        failures.len()
    );
    let now_on = caller_nats.server_info().server_name;
    assert_ne!(now_on, x, "the caller reconnected to another node");
    eprintln!(
        "killed {x} after {answered} replies; the caller reconnected to {now_on}; every call answered {:?} later",
        started.elapsed()
    );
    // The observer sees every reply once: what it missed is replayed, what it saw is not
    // shown again (the replay starts 5 s before the disconnect was noticed).
    wait_for("the observer to see every reply", || {
        observed.lock().unwrap().len() >= 400
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    observing.abort();
    let observed = observed.lock().unwrap().clone();
    let twice: Vec<_> = observed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        observed.len() == 400 && twice.is_empty(),
        "the observer saw {} replies; more than once: {twice:?}",
        observed.len()
    );
    // The replay's consumer is deleted: the stream has no consumer (nothing else reads it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut stream = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
        let consumers = stream.info().await.unwrap().state.consumer_count;
        if consumers == 0 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let left: Vec<String> = stream
                .consumers()
                .map(|c| c.map(|c| format!("{} {:?}", c.name, c.config.description)))
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .map(|c| c.unwrap_or_else(|e| e.to_string()))
                .collect();
            panic!("{consumers} consumers left on the action-results stream: {left:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    spying.abort();
    let requests = api_requests.lock().unwrap().clone();
    let named = |prefix: &str| -> std::collections::BTreeSet<String> {
        requests
            .iter()
            .filter_map(|s| s.strip_prefix(prefix))
            .filter_map(|rest| rest.split('.').next())
            .map(str::to_owned)
            .collect()
    };
    let created = named("$JS.API.CONSUMER.CREATE.SOORMA_ACTION_RESULTS.");
    let deleted = named("$JS.API.CONSUMER.DELETE.SOORMA_ACTION_RESULTS.");
    assert!(
        !created.is_empty(),
        "no replay consumer was created: {requests:?}"
    );
    let undeleted: Vec<_> = created.difference(&deleted).collect();
    assert!(
        undeleted.is_empty(),
        "replay consumers the replay did not delete: {undeleted:?} ({requests:?})"
    );
}

/// A worker process killed between the write that ends a task and the reply: the completion
/// is published after a restart, once, by the redelivery of the result whose write ended the
/// task (no other result replies for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_ending_a_task_and_replying_replies_after_a_restart() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = soorma::nats::connect(config(&server)).await.unwrap();
    let mut t = TestPlatform::with_platform(platform).await.unwrap();
    t.start(inc_tool(Duration::ZERO, 8)).await.unwrap();
    let (jobs, n) = (5, 3);
    let mut dying = WorkerProcess::spawn(&server, "dies-before-replying");
    let expected = submit(&t, jobs, n).await;
    dying.exits().await; // at its first reply
    let ended = stored_task_statuses(t.platform(), &expected)
        .await
        .into_iter()
        .filter(|(status, reply_sent)| *status != soorma::TaskStatus::Running && !reply_sent)
        .count();
    assert!(ended >= 1, "a task ended without its reply");
    assert!(t.events_of_type("job.done").is_empty(), "no reply went out");

    let _restarted = WorkerProcess::spawn(&server, "after-restart");
    wait_for("every completion", || {
        t.events_of_type("job.done").len() >= expected.len()
    })
    .await;
    tokio::time::sleep(ACK_WAIT * 2).await; // any redelivery that could double a completion
    assert_each_completed_once(&t, &expected, n).await;
    t.shutdown().await.unwrap();
}

/// The status and `reply_sent` of the stored tasks.
async fn stored_task_statuses(
    platform: &Platform,
    tasks: &HashMap<String, i64>,
) -> Vec<(soorma::TaskStatus, bool)> {
    let mut out = Vec::new();
    for id in tasks.keys() {
        let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", id.clone());
        if let Some(stored) = platform.state().get(&key).await.unwrap() {
            let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
            out.push((record.status, record.reply_sent));
        }
    }
    out
}
