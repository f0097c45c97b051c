//! The workflow executor's durability on NATS: a worker process SIGKILLed mid-DAG and
//! restarted re-runs no completed step and loses none.
//!
//! The worker processes are this test binary re-executed with `SOORMA_WF_ROLE` set (see
//! [`workflow_child_process`], as in `faults.rs`); the tool the steps call, the caller and the
//! observer run in the test process, which is never killed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use soorma::BoxFuture;
use soorma::bus::{EventBus, Subscription, SubscriptionSpec};
use soorma::common::{StepStatus, WorkflowOutput};
use soorma::nats::NatsConfig;
use soorma::prelude::*;
use soorma::workflow::Workflow;
use soorma_tests::child::ChildProcess;
use soorma_tests::nats_server::NatsServer;

/// Short, so that what a killed process held is redelivered soon (the default is 30 s).
const ACK_WAIT: Duration = Duration::from_secs(2);
/// The operator of every step.
const STEP: &str = "dag.step";
/// The worker's name: the same in every process, so a restarted one takes over the durable
/// consumers of the killed one.
const RUNNER: &str = "dag-runner";
const RUNS: usize = 5;
/// The most one run may take.
const RUN_LIMIT: Duration = Duration::from_secs(45);

/// The DAG: each step's dependencies, by position (step `i` is `s<i>`). One root fanning out to
/// six, joins of two and three, an independent chain (`s19`..`s22`) beside the joins, and two
/// sinks.
const DEPS: &[&[usize]] = &[
    &[],
    &[0],
    &[0],
    &[0],
    &[0],
    &[0],
    &[0],
    &[1, 2],
    &[3, 4],
    &[5, 6],
    &[1],
    &[6],
    &[7, 8],
    &[8, 9],
    &[10],
    &[9, 11],
    &[12, 13, 14],
    &[13, 15],
    &[14],
    &[2],
    &[19],
    &[20],
    &[21],
    &[16, 17],
    &[18, 17],
    &[23, 24, 22],
    &[25],
    &[25, 16],
];

fn step_id(i: usize) -> String {
    format!("s{i}")
}

/// The workflow: every step calls [`STEP`] with its own id and its dependencies' `x` (the
/// root: the input's `seed`).
fn dag() -> Workflow {
    let steps: Vec<Value> = DEPS
        .iter()
        .enumerate()
        .map(|(i, deps)| {
            let mut input = serde_json::Map::new();
            input.insert("step".into(), json!(step_id(i)));
            if deps.is_empty() {
                input.insert("d0".into(), json!("{{seed}}"));
            }
            for (n, d) in deps.iter().enumerate() {
                input.insert(format!("d{n}"), json!(format!("{{{{s{d}.x}}}}")));
            }
            json!({
                "id": step_id(i),
                "operator": STEP,
                "depends_on": deps.iter().map(|d| step_id(*d)).collect::<Vec<_>>(),
                "input_mapping": input,
            })
        })
        .collect();
    let definition = json!({"goal": "A DAG", "steps": steps});
    Workflow::from_json(&definition.to_string()).expect("a valid workflow")
}

/// What each step's `x` must be: 1 + the sum of its inputs.
fn expected_x(seed: i64) -> Vec<i64> {
    let mut x: Vec<i64> = Vec::with_capacity(DEPS.len());
    for deps in DEPS {
        let inputs: i64 = if deps.is_empty() {
            seed
        } else {
            deps.iter().map(|d| x[*d]).sum()
        };
        x.push(1 + inputs);
    }
    x
}

fn runner() -> AgentBuilder {
    Worker::new(RUNNER)
        .use_registered_handlers(false)
        .handler(Handler::workflow("dag.requested", dag()))
}

/// What the test process saw, in the order it saw it: the step requests published, the tool's
/// calls and the steps' `workflow.step.completed` progress.
#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<Seen>>>);

#[derive(Debug, Clone)]
enum Seen {
    /// A request of `step` was published (copies that JetStream drops as duplicates included).
    Published { step: String },
    /// The tool was called for `step` (request id `request`).
    Call { step: String, request: String },
    /// `workflow.step.completed` of `step`.
    Completed { step: String },
}

impl Journal {
    fn push(&self, seen: Seen) {
        self.0.lock().expect("journal lock").push(seen);
    }

    fn entries(&self) -> Vec<Seen> {
        self.0.lock().expect("journal lock").clone()
    }

    fn completed(&self) -> usize {
        self.entries()
            .iter()
            .filter(|s| matches!(s, Seen::Completed { .. }))
            .count()
    }

    /// How many times a request of `step` was published.
    fn published(&self, step: &str) -> usize {
        self.entries()
            .iter()
            .filter(|s| matches!(s, Seen::Published { step: p } if p == step))
            .count()
    }

    /// The tool's calls, by step.
    fn calls(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for s in self.entries() {
            if let Seen::Call { step, request } = s {
                out.entry(step).or_default().push(request);
            }
        }
        out
    }
}

/// Closed by the test: the tool's calls wait until it is open (their replies with them).
#[derive(Clone)]
struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(true)))
    }
}

impl Gate {
    fn set(&self, open: bool) {
        self.0.send_replace(open);
    }

    async fn passed(&self) {
        let _ = self.0.subscribe().wait_for(|open| *open).await;
    }
}

/// The step operator: records the call, waits for the gate, works 30 to 100 ms (depending on
/// the step), answers `x` = 1 + the sum of its `d*` inputs.
async fn step(
    req: Invocation<Value>,
    State(journal): State<Journal>,
    State(gate): State<Gate>,
) -> Result<Value, ToolError> {
    let id = req.data["step"].as_str().unwrap_or_default().to_owned();
    journal.push(Seen::Call {
        step: id.clone(),
        request: req.request_id().to_owned(),
    });
    gate.passed().await;
    let n: u64 = id.trim_start_matches('s').parse().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(30 + (n * 37) % 71)).await;
    let mut x = 1;
    for (key, value) in req.data.as_object().into_iter().flatten() {
        if !key.starts_with('d') {
            continue;
        }
        let v = value
            .as_i64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| ToolError::new(format!("{id}: `{key}` is not a number: {value}")))?;
        x += v;
    }
    Ok(json!({"step": id, "x": x}))
}

fn tool(journal: &Journal, gate: &Gate) -> AgentBuilder {
    Tool::new("dag-tools")
        .use_registered_handlers(false)
        .with_state(journal.clone())
        .with_state(gate.clone())
        .concurrency(32)
        .handler(Handler::on_invoke(STEP, step))
}

/// The run as stored in its task (the only task of the run's server).
struct StoredRun(Option<soorma::common::WorkflowRun>);

impl StoredRun {
    fn status(&self, step: &str) -> StepStatus {
        let position = step.trim_start_matches('s').parse().expect("a step id");
        self.0
            .as_ref()
            .map_or(StepStatus::Pending, |r| r.status(position))
    }

    fn count(&self, status: StepStatus) -> usize {
        (0..DEPS.len())
            .filter(|i| self.status(&step_id(*i)) == status)
            .count()
    }
}

impl std::fmt::Display for StoredRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} completed, {} running, {} pending",
            self.count(StepStatus::Completed),
            self.count(StepStatus::Running),
            self.count(StepStatus::Pending)
        )
    }
}

async fn stored_run(platform: &Platform) -> StoredRun {
    let state = platform.state();
    let keys = state.keys(soorma::TASKS_BUCKET, "default").await.unwrap();
    assert_eq!(keys.len(), 1, "one task: {keys:?}");
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", keys[0].clone());
    let stored = state.get(&key).await.unwrap().expect("the task is stored");
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    StoredRun(record.workflow)
}

fn config(url: String) -> NatsConfig {
    NatsConfig::new(url).with_ack_wait(ACK_WAIT)
}

/// Not a test of its own: the entry point of the worker processes. Without `SOORMA_WF_ROLE`
/// it returns at once. `before-<k>`: the worker stops (forever) at its `k`-th step request,
/// after the write that marks the step running and before the request is published;
/// `after-<k>`: the same, right after it is published (before the handled event is acked). Either prints `HOLD <step>`, and the test kills it. `plain`: a
/// worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_child_process() {
    let Ok(role) = std::env::var("SOORMA_WF_ROLE") else {
        return;
    };
    soorma_tests::init_tracing();
    let url = std::env::var("SOORMA_WF_NATS_URL").expect("SOORMA_WF_NATS_URL");
    let platform = soorma::nats::connect(config(url))
        .await
        .expect("child connects");
    let hold = role
        .split_once('-')
        .map(|(when, k)| (when == "after", k.parse().expect("<before|after>-<k>")));
    let platform = match hold {
        Some((publish_first, at)) => {
            let parts = soorma::EngineParts::new(
                "nats",
                Arc::new(HoldsStepRequests {
                    inner: platform.bus().clone(),
                    at,
                    publish_first,
                    seen: AtomicUsize::new(0),
                }),
                platform.state().clone(),
                platform.registry().clone(),
            );
            Platform::from_parts(parts)
        }
        None => platform,
    };
    let _running = runner().start(&platform).await.expect("worker starts");
    println!("READY {role}");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// A bus that never finishes the `at`-th publication of a step request (announced on stdout):
/// it publishes it first when `publish_first`. (A run sends each step's request on its own.)
struct HoldsStepRequests {
    inner: Arc<dyn EventBus>,
    at: usize,
    publish_first: bool,
    seen: AtomicUsize,
}

impl EventBus for HoldsStepRequests {
    fn publish(&self, envelope: soorma::EventEnvelope) -> BoxFuture<'_, soorma::Result<()>> {
        if envelope.event_type == STEP && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
            let step = envelope.data["step"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (inner, publish_first) = (self.inner.clone(), self.publish_first);
            return Box::pin(async move {
                if publish_first {
                    inner.publish(envelope).await?;
                }
                println!("HOLD {step}");
                std::future::pending().await
            });
        }
        self.inner.publish(envelope)
    }

    fn publish_batch(
        &self,
        envelopes: Vec<soorma::EventEnvelope>,
    ) -> BoxFuture<'_, soorma::Result<()>> {
        self.inner.publish_batch(envelopes)
    }

    fn publish_coalesced(
        &self,
        envelope: soorma::EventEnvelope,
    ) -> BoxFuture<'_, soorma::Result<()>> {
        self.inner.publish_coalesced(envelope)
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, soorma::Result<Box<dyn Subscription>>> {
        self.inner.subscribe(spec)
    }

    fn observe(
        &self,
        topic: Option<Topic>,
    ) -> BoxFuture<'_, soorma::Result<Box<dyn Subscription>>> {
        self.inner.observe(topic)
    }

    fn redelivery_delay(&self) -> Option<Duration> {
        self.inner.redelivery_delay()
    }
}

/// A worker process, SIGKILLed on drop.
struct WorkerProcess(ChildProcess);

impl WorkerProcess {
    /// Starts the worker process `role` and waits until it is ready.
    fn spawn(server: &NatsServer, role: &str) -> Self {
        Self(ChildProcess::spawn(
            "workflow_child_process",
            &[
                ("SOORMA_WF_ROLE", role),
                ("SOORMA_WF_NATS_URL", &server.url()),
            ],
        ))
    }

    /// The next line of the process's stdout containing `text`, waiting up to 20 s for it.
    fn line_with(&self, text: &str) -> Option<String> {
        self.0.line_with(text, Duration::from_secs(20))
    }

    /// SIGKILL: no shutdown, no acks, no deregistration.
    fn kill(self) {
        self.0.kill();
    }
}

/// Runs blocking process work (spawning, reading stdout) off the async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A 28-step DAG runs in worker processes SIGKILLed three times, each while some steps are
/// completed and others pending or running: (1) in the middle of a handling that starts steps,
/// after the write that marks them running and before their requests go out (only the
/// redelivery of that handling's event can send them); (2) in its successor, right after a
/// handling published the requests of the steps it started, before the event was acked; (3) in
/// the next one at an arbitrary moment, once a few more steps have completed. A fourth process
/// finishes the run. Five runs, a fresh server each, with different kill points.
///
/// Around kill 2 the tool holds its replies (a gate) in every other run until the third
/// process has handled the redelivered event, which then finds the steps it started still
/// running and publishes their requests again (seen on the bus): the tool must not be called
/// again for them. In the other runs the replies come first and the redelivery sends nothing.
///
/// Asserted, per run: the caller gets the `WorkflowOutput` with every step completed in one
/// attempt and every output right (nothing lost), and the tool was called **exactly once per
/// step** (nothing re-run, not even a step that was running at a kill). Exactly once, not just
/// "never after its completion was recorded", because JetStream's de-duplication covers every
/// republish here: a step's request is published again only by the redelivery of the event
/// whose handling started it (`started_by`), and only while its reply is not recorded; it goes
/// out under the same id (its sub-task id: each step's request is published on its own),
/// within the 120 s duplicate window (far longer than a run). After kill 1 the held request was
/// never published, so the redelivery publishes it for the first time. After kill 2 the
/// redelivered event publishes the held request again, unless its reply is recorded by then;
/// JetStream drops the copy (the gated runs check this).
///
/// The journal also checks the weaker property, so that a failure says which one broke: no
/// call of a step after its `workflow.step.completed` was observed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_dag_and_restarted_reruns_no_completed_step_and_loses_none() {
    soorma_tests::init_tracing();
    let started = Instant::now();
    for run in 0..RUNS {
        let run_started = Instant::now();
        let kills = Kills {
            // The 2nd to 6th step request.
            before: 2 + run,
            // The first (the held step, sent again) or the second step request.
            after: 1 + run % 2,
            // 2 to 6 more completions.
            more: 2 + (run * 3) % 5,
            gated: run % 2 == 0,
        };
        tokio::time::timeout(RUN_LIMIT, one_run(run, kills))
            .await
            .unwrap_or_else(|_| panic!("run {run} took more than {RUN_LIMIT:?}"));
        eprintln!("run {run}: passed in {:?}", run_started.elapsed());
    }
    eprintln!("{RUNS} runs in {:?}", started.elapsed());
}

/// Where one run's processes are killed.
struct Kills {
    /// The first process stops before publishing its `before`-th step request.
    before: usize,
    /// The second process stops after publishing its `after`-th step request.
    after: usize,
    /// The third process is killed once `more` steps have completed since it started.
    more: usize,
    /// The tool holds its replies from the second process's start until the third one has
    /// published again the requests that the second one published before it was killed.
    gated: bool,
}

async fn one_run(run: usize, kills: Kills) {
    let server = NatsServer::start();
    let platform = soorma::nats::connect(config(server.url())).await.unwrap();
    let (journal, gate) = (Journal::default(), Gate::default());
    let tool = tool(&journal, &gate).start(&platform).await.unwrap();
    let mut events = platform.bus().observe(None).await.unwrap();
    let observed = journal.clone();
    let observer = tokio::spawn(async move {
        while let Some(delivery) = events.next().await {
            let e = &delivery.envelope;
            let step = e.data["step"].as_str().unwrap_or_default().to_owned();
            if e.event_type == "workflow.step.completed" {
                observed.push(Seen::Completed { step });
            } else if e.event_type == STEP {
                observed.push(Seen::Published { step });
            }
        }
    });

    let a = blocking(|| WorkerProcess::spawn(&server, &format!("before-{}", kills.before)));
    let seed = 10 * run as i64;
    let client = platform
        .client("dag-caller")
        .with_timeout(RUN_LIMIT - Duration::from_secs(5));
    let call = tokio::spawn(async move {
        client
            .invoke::<WorkflowOutput>("dag.requested", json!({"seed": seed}), "dag.completed")
            .await
    });

    // Kill 1: in the middle of the handling that starts the held steps, before their requests
    // are published.
    let Some(held) = blocking(|| a.line_with("HOLD ")) else {
        panic!("run {run}: the first worker started no steps")
    };
    a.kill();
    let first = stored_run(&platform).await;
    let called = journal.calls();
    for step in held.trim_start_matches("HOLD ").split(' ') {
        assert_eq!(
            first.status(step),
            StepStatus::Running,
            "run {run}: the held step {step} is stored as running"
        );
        assert!(
            !called.contains_key(step),
            "run {run}: the held step {step} was not called"
        );
    }
    assert!(
        first.count(StepStatus::Completed) >= 1 && first.count(StepStatus::Pending) >= 1,
        "run {run}: killed mid-DAG: {first}"
    );

    // Kill 2: right after a handling published the requests of the steps it started.
    gate.set(!kills.gated);
    let b = blocking(|| WorkerProcess::spawn(&server, &format!("after-{}", kills.after)));
    let Some(sent) = blocking(|| b.line_with("HOLD ")) else {
        panic!(
            "run {run}: the restarted worker sent no steps (the run stalled after `{held}`: {})",
            stored_run(&platform).await
        )
    };
    b.kill();
    let second = stored_run(&platform).await;
    assert!(
        second.count(StepStatus::Completed) >= 1 && second.count(StepStatus::Pending) >= 1,
        "run {run}: killed mid-DAG: {second}"
    );
    let sent_steps: Vec<String> = sent
        .trim_start_matches("HOLD ")
        .split(' ')
        .map(str::to_owned)
        .collect();

    // Kill 3: at an arbitrary moment once `more` steps have completed (unless the run
    // finishes first).
    let c = blocking(|| WorkerProcess::spawn(&server, "plain"));
    if kills.gated {
        // The redelivery of the event whose handling published `sent` publishes it again.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sent_steps.iter().all(|s| journal.published(s) >= 2) {
            assert!(
                Instant::now() < deadline,
                "run {run}: `{sent}` not published again: {}",
                stored_run(&platform).await
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.set(true);
    }
    let from = journal.completed();
    let deadline = Instant::now() + Duration::from_secs(20);
    while journal.completed() < from + kills.more && !call.is_finished() {
        assert!(
            Instant::now() < deadline,
            "run {run}: the restarted worker completed no {} steps (the run stalled after \
             `{held}`, `{sent}`: {})",
            kills.more,
            stored_run(&platform).await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.kill();
    let third = stored_run(&platform).await;

    // A fourth process finishes the run.
    let _d = blocking(|| WorkerProcess::spawn(&server, "plain"));
    let out = call
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("run {run}: the workflow did not complete: {e}"));
    // Let any redelivery that could call a step again happen.
    tokio::time::sleep(ACK_WAIT * 2).await;

    let calls = journal.calls();
    let entries = journal.entries();
    let report = format!(
        "run {run} (killed before `{held}` with {first}; after `{sent}` with {second}, {}; \
         then with {third}; {} tool calls)",
        if kills.gated {
            "replies after its redelivery"
        } else {
            "replies first"
        },
        entries
            .iter()
            .filter(|s| matches!(s, Seen::Call { .. }))
            .count()
    );
    eprintln!("{report}");
    // Nothing called after its completion was observed.
    let mut completed_seen = std::collections::HashSet::new();
    let mut late: Vec<String> = Vec::new();
    for s in &entries {
        match s {
            Seen::Completed { step } => {
                completed_seen.insert(step.clone());
            }
            Seen::Call { step, request } if completed_seen.contains(step) => {
                late.push(format!("{step} ({request})"));
            }
            Seen::Call { .. } | Seen::Published { .. } => {}
        }
    }
    assert!(
        late.is_empty(),
        "{report}: steps called again after their completion: {late:?}"
    );
    // Each step's tool called exactly once.
    let doubled: Vec<_> = calls.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(
        doubled.is_empty(),
        "{report}: steps called more than once: {doubled:?}"
    );
    assert_eq!(calls.len(), DEPS.len(), "{report}: every step called");
    // Nothing lost: every step completed, in its first attempt, with the right output.
    let x = expected_x(seed);
    assert_eq!(out.steps.len(), DEPS.len(), "{report}: {out:?}");
    for (i, want) in x.iter().enumerate() {
        let id = step_id(i);
        let outcome = &out.steps[&id];
        assert_eq!(
            (outcome.status, outcome.attempts),
            (StepStatus::Completed, 1),
            "{report}: step {id}: {outcome:?}"
        );
        assert_eq!(
            out.output(&id),
            Some(&json!({"step": id, "x": want})),
            "{report}: the output of {id}"
        );
    }
    observer.abort();
    tool.shutdown().await.unwrap();
}
