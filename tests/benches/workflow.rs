//! The workflow executor (`Handler::workflow`) against hand-written workers doing the same
//! work with `delegate_parallel` / `delegate_with` and `#[on_result]`, measured in one run on
//! the embedded platform (`Platform::embedded()`); with `SOORMA_BENCH_NATS=1` the makespan
//! and both chains run on NATS too (a `nats-server -js` the bench starts; `_nats` ratios).
//!
//! ```text
//! cargo bench -p soorma-tests --bench workflow
//! ```
//!
//! Every step calls one tool, `bench.sleep`, which sleeps the step's delay (none for 0 ms).
//!
//! Prints `RATIO <name> <x>` lines:
//! - `workflow_makespan_vs_critical_path`: makespan of a seeded random 50-step DAG (delays
//!   20–200 ms) run by `Handler::workflow` / its critical path (the longest path by delays,
//!   the least any executor can take), median of 3 (target ≤ 1.05).
//! - `workflow_level_by_level_vs_critical_path`: the same DAG run by a hand-written
//!   level-by-level executor (a worker task that `delegate_parallel`s each level and waits for
//!   all of it before the next, like LangGraph supersteps) / the critical path, median of 3,
//!   the runs alternating with the SDK's. For comparison: what readiness-driven execution wins.
//! - `workflow_step_overhead_vs_delegate`: per-step time of a 200-step chain of zero-delay
//!   steps through `Handler::workflow` / the same chain hand-written (a worker task that
//!   `delegate_with`s one step, its `#[on_result]` handler records the reply and delegates the
//!   next), median of 3 alternating runs each (target ≤ 1.5). The hand-written chain's cost per
//!   step grows with its length: its task record lists every delegation group it made, and is
//!   written at each link (a workflow's task keeps only the attempts in flight).
//! - `workflow_step_overhead_vs_delegate_20`: the same with a 20-step chain, median of 31
//!   (`SOORMA_BENCH_WF_SHORT_RUNS`): short enough that neither task record grows much, so the
//!   per-step cost of the two executors is compared without that growth.
//! - `workflow_<n>_rss_growth_2nd_half`: a zero-delay DAG of n steps (default 10,000:
//!   100 wide × 100 deep, each step depending on two of the level before), run once:
//!   (RSS at 100 % − RSS at 50 %) / RSS at 50 %, the fraction by which the resident memory
//!   (VmRSS) grew while the second half of the steps ran (sampled when 0, 25, 50 and 75 % of
//!   the steps were called and when the run's reply came). About 0: memory is flat once
//!   running. The growth per step of each half, and the peak, are printed too. On the embedded
//!   platform the state store is in the process: every step's records stay in memory (the
//!   bench prints what the store holds), a small growth per step that a worker on NATS does
//!   not have.
//!
//! With the makespans it prints how long the DAG's steps waited to start once they could (their
//! last dependency had ended; for a root, the run was requested): the executor's reaction
//! time (level by level, also the wait for the rest of the level).
//!
//! It also prints, from a second embedded platform whose state store and registry count what
//! goes through them, the state reads and writes per step (and their bytes) and the registry
//! listings per step (capability look-ups) of both executors on the chain, and of the
//! workflow executor on the random DAG and on DAGs of several sizes and widths.
//!
//! Knobs:
//! - `SOORMA_BENCH_WF_STEPS`: the large DAG's size (0 skips it);
//! - `SOORMA_BENCH_WF_PROFILE`: the profile's DAGs, `<steps>x<width>` comma-separated (default
//!   `1000x1,1000x10,1000x100,2000x100`; empty skips the profile);
//! - `SOORMA_BENCH_WF_CONCURRENCY`: the workflow worker's handler concurrency (default: the
//!   SDK's);
//! - `SOORMA_BENCH_WF_SHORT_RUNS`: runs of the 20-step chain (default 31);
//! - `SOORMA_BENCH_WF_DEBUG=1`: the profile's reads and writes by kind of record, and when
//!   each step of the random DAG ran;
//! - `SOORMA_BENCH_NATS=1`: the NATS phases.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use soorma::common::{StepStatus, WorkflowDefinition, WorkflowOutput, WorkflowStep};
use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
use soorma::prelude::*;
use soorma::registry::Registry;
use soorma::state::{Revision, StateKey, StateStore, Versioned};
use soorma::workflow::Workflow;
use soorma::{AgentDefinition, AgentHandle, BoxFuture, EngineParts};

/// The random DAG's seed (fixed: every run measures the same DAG).
const SEED: u64 = 0x5EED_0F50_57E9;
const DAG_STEPS: usize = 50;
/// Delays of the random DAG's steps, in milliseconds (inclusive).
const DELAY_MS: (u64, u64) = (20, 200);
/// How far back (in definition order) a step of the random DAG may depend, and on how many.
const DEP_WINDOW: usize = 12;
const MAX_DEPS: u64 = 3;
const CHAIN_STEPS: usize = 200;
/// A chain short enough that neither executor's task record grows much.
const SHORT_CHAIN_STEPS: usize = 20;
const SHORT_CHAIN_RUNS: usize = 31;
const RUNS: usize = 3;
/// Default size of the large DAG (`SOORMA_BENCH_WF_STEPS`).
const LARGE_STEPS: usize = 10_000;
/// The large DAG's width.
const LARGE_WIDTH: usize = 100;
/// The DAGs of the traffic profile (`SOORMA_BENCH_WF_PROFILE`): steps `x` width.
const PROFILE_SHAPES: &str = "1000x1,1000x10,1000x100,2000x100";

const SLEEP: &str = "bench.sleep";
const DAG: &str = "bench.dag.requested";
const GRID: &str = "bench.grid.requested";
const LEVELS: &str = "bench.levels.requested";
const HAND_CHAIN: &str = "bench.hand_chain.requested";
const LEVEL_DONE: &str = "bench.level.done";
const LINK_DONE: &str = "bench.link.done";

// ---------------------------------------------------------------------------------------------
// The tool.

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Sleep {
    ms: u64,
    /// The step's position in the random DAG: when it ran is noted in [`RAN`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    step: Option<usize>,
}

/// Calls of the tool (the large DAG's progress).
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// When each step of the random DAG ran (start, end) in the run being timed.
static RAN: Mutex<Vec<Option<(Instant, Instant)>>> = Mutex::new(Vec::new());

async fn sleep(req: Invocation<Sleep>) -> Result<u64, ToolError> {
    let started = Instant::now();
    if req.data.ms > 0 {
        tokio::time::sleep(Duration::from_millis(req.data.ms)).await;
    }
    if let Some(i) = req.data.step
        && let Some(ran) = RAN.lock().expect("ran").get_mut(i)
    {
        *ran = Some((started, Instant::now()));
    }
    CALLS.fetch_add(1, Ordering::Relaxed);
    Ok(req.data.ms)
}

// ---------------------------------------------------------------------------------------------
// DAGs.

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A DAG of steps: each step's delay and dependencies (earlier steps, by position).
struct Dag {
    delays: Vec<u64>,
    deps: Vec<Vec<usize>>,
}

impl Dag {
    /// `n` steps; each depends on up to `MAX_DEPS` of the `DEP_WINDOW` steps before it.
    fn random(n: usize, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let (lo, hi) = DELAY_MS;
        let mut dag = Self {
            delays: Vec::new(),
            deps: Vec::new(),
        };
        for i in 0..n {
            dag.delays.push(lo + rng.below(hi - lo + 1));
            let mut deps = Vec::new();
            if i > 0 {
                for _ in 0..rng.below(MAX_DEPS + 1) {
                    let back = 1 + rng.below(i.min(DEP_WINDOW) as u64) as usize;
                    if !deps.contains(&(i - back)) {
                        deps.push(i - back);
                    }
                }
            }
            dag.deps.push(deps);
        }
        dag
    }

    /// `n` zero-delay steps in a chain.
    fn chain(n: usize) -> Self {
        Self {
            delays: vec![0; n],
            deps: (0..n)
                .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
                .collect(),
        }
    }

    /// `n` zero-delay steps in levels of `width`; a step depends on the step of its column and
    /// the next one in the level before.
    fn grid(n: usize, width: usize) -> Self {
        let width = width.min(n).max(1);
        Self {
            delays: vec![0; n],
            deps: (0..n)
                .map(|i| {
                    let (level, col) = (i / width, i % width);
                    if level == 0 {
                        return vec![];
                    }
                    let above = (level - 1) * width;
                    let mut deps = vec![above + col];
                    if width > 1 {
                        deps.push(above + (col + 1) % width);
                    }
                    deps
                })
                .collect(),
        }
    }

    fn len(&self) -> usize {
        self.delays.len()
    }

    /// The longest path by delays, in milliseconds: the least any executor takes.
    fn critical_path_ms(&self) -> u64 {
        let mut finish = vec![0u64; self.len()];
        for i in 0..self.len() {
            let start = self.deps[i].iter().map(|&d| finish[d]).max().unwrap_or(0);
            finish[i] = start + self.delays[i];
        }
        finish.into_iter().max().unwrap_or(0)
    }

    /// The steps by level: a step's level is one more than its deepest dependency's.
    fn levels(&self) -> Vec<Vec<usize>> {
        let mut level = vec![0usize; self.len()];
        let mut levels: Vec<Vec<usize>> = Vec::new();
        for i in 0..self.len() {
            level[i] = self.deps[i]
                .iter()
                .map(|&d| level[d] + 1)
                .max()
                .unwrap_or(0);
            if levels.len() <= level[i] {
                levels.push(Vec::new());
            }
            levels[level[i]].push(i);
        }
        levels
    }

    /// What a level-by-level executor takes at least: the sum of each level's longest delay.
    fn level_by_level_ms(&self) -> u64 {
        self.levels()
            .iter()
            .map(|l| l.iter().map(|&i| self.delays[i]).max().unwrap_or(0))
            .sum()
    }

    /// The levels' delays: what the hand-written level-by-level executor is asked to run.
    fn level_delays(&self) -> Levels {
        Levels {
            levels: self
                .levels()
                .iter()
                .map(|l| {
                    l.iter()
                        .map(|&i| Sleep {
                            ms: self.delays[i],
                            step: Some(i),
                        })
                        .collect()
                })
                .collect(),
        }
    }

    /// How long each step waited to start once it could (its last dependency ended, or, for a
    /// root, the run was requested at `requested`), from when the steps ran ([`RAN`]).
    fn waits(&self, requested: Instant) -> Vec<Duration> {
        let ran = RAN.lock().expect("ran");
        (0..self.len())
            .map(|i| {
                let ready = self.deps[i]
                    .iter()
                    .filter_map(|&d| ran[d].map(|(_, end)| end))
                    .max()
                    .unwrap_or(requested);
                ran[i].map_or(Duration::ZERO, |(start, _)| {
                    start.saturating_duration_since(ready)
                })
            })
            .collect()
    }

    /// The workflow: step `s<i>` calls `bench.sleep` with its delay, after its dependencies
    /// (`timed`: and its position, so that when it ran is noted).
    fn workflow(&self, goal: &str, timed: bool) -> Workflow {
        let mut def = WorkflowDefinition::new(goal);
        for i in 0..self.len() {
            let mut step =
                WorkflowStep::new(format!("s{i}"), SLEEP).with_input("ms", self.delays[i]);
            if timed {
                step = step.with_input("step", i);
            }
            for &d in &self.deps[i] {
                step = step.depends_on(format!("s{d}"));
            }
            def = def.with_step(step);
        }
        Workflow::new(def).expect("a valid workflow")
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-written executors.

/// A level-by-level run: each level's delays.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Levels {
    levels: Vec<Vec<Sleep>>,
}

fn sleeps(steps: &[Sleep], reply: &str) -> Vec<Delegation> {
    steps
        .iter()
        .map(|step| Delegation::new(SLEEP, step, reply))
        .collect()
}

/// Delegates the first level.
async fn levels_start(mut task: TaskContext<Levels>) -> soorma::Result<()> {
    task.set_state("level", 0)?;
    let first = sleeps(&task.data.levels[0], LEVEL_DONE);
    task.delegate_parallel(first).await?;
    Ok(())
}

/// Records a reply; once the level is done, delegates the next one (or completes).
async fn level_done(result: ResultContext<u64>) -> soorma::Result<()> {
    let task = result.record_in_parent().await?;
    if task.group_results(result.group_id()).await?.is_none() {
        return Ok(());
    }
    let mut task = task.into_typed::<Levels>()?;
    let level = task.state_value::<usize>("level")?.unwrap_or(0) + 1;
    if level == task.data.levels.len() {
        task.complete(level).await?;
        return Ok(());
    }
    task.set_state("level", level)?;
    let next = sleeps(&task.data.levels[level], LEVEL_DONE);
    task.delegate_parallel(next).await?;
    Ok(())
}

/// A chain of `task.data` zero-delay calls: delegates the first.
async fn chain_start(mut task: TaskContext<usize>) -> soorma::Result<()> {
    task.set_state("done", 0)?;
    task.delegate_with(Delegation::new(
        SLEEP,
        &Sleep { ms: 0, step: None },
        LINK_DONE,
    ))
    .await?;
    Ok(())
}

/// Records a reply and delegates the next call (or completes).
async fn link_done(result: ResultContext<u64>) -> soorma::Result<()> {
    let task = result.record_in_parent().await?;
    if task.group_results(result.group_id()).await?.is_none() {
        return Ok(());
    }
    let mut task = task.into_typed::<usize>()?;
    let done = task.state_value::<usize>("done")?.unwrap_or(0) + 1;
    if done == task.data {
        task.complete(done).await?;
        return Ok(());
    }
    task.set_state("done", done)?;
    task.delegate_with(Delegation::new(
        SLEEP,
        &Sleep { ms: 0, step: None },
        LINK_DONE,
    ))
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The agents and the runs.

/// The event of the workflow running a chain of `n` steps.
fn chain_event(n: usize) -> String {
    format!("bench.chain{n}.requested")
}

struct Rig {
    client: Client,
    agents: Vec<AgentHandle>,
}

impl Rig {
    /// The tool, a worker running `workflows` (event, workflow) and the hand-written worker.
    async fn start(platform: &Platform, workflows: Vec<(String, Workflow)>) -> Self {
        let tool = Tool::new("bench-tools")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke(SLEEP, sleep))
            .start(platform)
            .await
            .expect("tool");
        let mut runner = Worker::new("wf-bench").use_registered_handlers(false);
        if let Some(limit) = std::env::var("SOORMA_BENCH_WF_CONCURRENCY")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            runner = runner.concurrency(limit);
        }
        for (event, workflow) in workflows {
            runner = runner.handler(Handler::workflow(event, workflow));
        }
        let runner = runner.start(platform).await.expect("workflow worker");
        let hand = Worker::new("hand-bench")
            .use_registered_handlers(false)
            .handler(Handler::on_task(LEVELS, levels_start))
            .handler(Handler::on_result(LEVEL_DONE, level_done))
            .handler(Handler::on_task(HAND_CHAIN, chain_start))
            .handler(Handler::on_result(LINK_DONE, link_done))
            .start(platform)
            .await
            .expect("hand-written worker");
        Self {
            client: platform
                .client("bench")
                .with_timeout(Duration::from_secs(600)),
            agents: vec![tool, runner, hand],
        }
    }

    /// Runs the workflow of `event`; checks every one of its `steps` completed.
    async fn workflow(&self, event: &str, steps: usize) -> Duration {
        let started = Instant::now();
        let out: WorkflowOutput = self
            .client
            .invoke(event, json!({}), soorma::reply_event_for(event))
            .await
            .expect("workflow");
        let took = started.elapsed();
        assert_eq!(out.steps.len(), steps);
        assert!(
            out.steps
                .values()
                .all(|s| s.status == StepStatus::Completed),
            "every step completes"
        );
        took
    }

    async fn levels(&self, levels: &Levels) -> Duration {
        let started = Instant::now();
        let done: usize = self
            .client
            .invoke(LEVELS, levels, soorma::reply_event_for(LEVELS))
            .await
            .expect("levels");
        assert_eq!(done, levels.levels.len());
        started.elapsed()
    }

    async fn hand_chain(&self, n: usize) -> Duration {
        let started = Instant::now();
        let done: usize = self
            .client
            .invoke(HAND_CHAIN, n, soorma::reply_event_for(HAND_CHAIN))
            .await
            .expect("chain");
        assert_eq!(done, n);
        started.elapsed()
    }

    async fn shutdown(self) {
        for agent in self.agents {
            agent.shutdown().await.expect("shutdown");
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Phase 1: the random DAG's makespan, the SDK's and the level-by-level executor's.
async fn makespan(rig: &Rig, dag: &Dag, suffix: &str) {
    let levels = dag.level_delays();
    let critical = dag.critical_path_ms() as f64;
    // One run, timed: its makespan and how long each step waited to start once it could.
    let timed = |sdk: bool| {
        let levels = &levels;
        async move {
            *RAN.lock().expect("ran") = vec![None; dag.len()];
            let requested = Instant::now();
            let took = if sdk {
                rig.workflow(DAG, dag.len()).await
            } else {
                rig.levels(levels).await
            };
            let waits = dag.waits(requested);
            if std::env::var_os("SOORMA_BENCH_WF_DEBUG").is_some() {
                let ran = RAN.lock().expect("ran").clone();
                for (i, w) in waits.iter().enumerate() {
                    let at = |t: Instant| ms(t.saturating_duration_since(requested));
                    let (start, end) = ran[i].map_or((0.0, 0.0), |(s, e)| (at(s), at(e)));
                    println!(
                        "    {} s{i:<2} deps {:<12} start {start:>7.1} end {end:>7.1} waited {:>6.1} ms",
                        if sdk { "sdk " } else { "hand" },
                        format!("{:?}", dag.deps[i]),
                        ms(*w)
                    );
                }
            }
            (took, waits)
        }
    };
    // Warm-up (discovery and schema caches, the first tasks).
    timed(true).await;
    timed(false).await;
    let (mut sdk, mut hand) = (Vec::new(), Vec::new());
    let (mut sdk_waits, mut hand_waits) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Alternate which goes first.
        for first in [run % 2 == 0, run % 2 != 0] {
            let (took, waits) = timed(first).await;
            if first {
                sdk.push(took);
                sdk_waits.extend(waits);
            } else {
                hand.push(took);
                hand_waits.extend(waits);
            }
        }
    }
    let (sdk, hand) = (median(sdk), median(hand));
    println!(
        "Random {}-step DAG (seed {SEED:#x}, delays {}–{} ms, {} levels): critical path {critical:.0} ms, \
         level-by-level bound {} ms",
        dag.len(),
        DELAY_MS.0,
        DELAY_MS.1,
        levels.levels.len(),
        dag.level_by_level_ms()
    );
    // How long a step waited to start once its last dependency had ended (or, for a root,
    // once the run was requested): the executor's reaction time, plus, level by level, the
    // wait for the rest of the level.
    let waits = |mut w: Vec<Duration>| {
        w.sort();
        format!(
            "step start waits p50 {:>6.1} ms, p90 {:>6.1} ms, max {:>6.1} ms",
            ms(w[w.len() / 2]),
            ms(w[w.len() * 9 / 10]),
            ms(w[w.len() - 1])
        )
    };
    println!(
        "  Handler::workflow      makespan {:>8.1} ms (median of {RUNS}); {}",
        ms(sdk),
        waits(sdk_waits)
    );
    println!(
        "  level-by-level (hand)  makespan {:>8.1} ms (median of {RUNS}); {}",
        ms(hand),
        waits(hand_waits)
    );
    println!(
        "RATIO workflow_makespan_vs_critical_path{suffix} {:.3}",
        ms(sdk) / critical
    );
    println!(
        "RATIO workflow_level_by_level_vs_critical_path{suffix} {:.3}",
        ms(hand) / critical
    );
}

/// Phase 2: per-step time of a zero-delay chain, the SDK's and hand-written.
async fn step_overhead(rig: &Rig, n: usize, runs: usize, name: &str) {
    let event = chain_event(n);
    rig.workflow(&event, n).await;
    rig.hand_chain(n).await;
    let (mut sdk, mut hand) = (Vec::new(), Vec::new());
    for run in 0..runs {
        if run % 2 == 0 {
            sdk.push(rig.workflow(&event, n).await);
            hand.push(rig.hand_chain(n).await);
        } else {
            hand.push(rig.hand_chain(n).await);
            sdk.push(rig.workflow(&event, n).await);
        }
    }
    let per_step = |v: Vec<Duration>| median(v).as_secs_f64() * 1e6 / n as f64;
    let (sdk, hand) = (per_step(sdk), per_step(hand));
    println!("Chain of {n} zero-delay steps (median of {runs}, alternating)");
    println!("  Handler::workflow            {sdk:>8.1} µs/step");
    println!("  delegate_with + #[on_result] {hand:>8.1} µs/step");
    println!("RATIO {name} {:.3}", sdk / hand);
}

/// Phase 3: the large DAG once, with memory and time at each quarter of the steps called.
async fn large(rig: &Rig, platform: &Platform, n: usize, suffix: &str) {
    CALLS.store(0, Ordering::SeqCst);
    let rss0 = soorma_tests::rss_kib();
    let started = Instant::now();
    let sampler = tokio::spawn(async move {
        let mut samples = Vec::new();
        for q in 1..=3 {
            while CALLS.load(Ordering::Relaxed) < q * n / 4 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples.push((soorma_tests::rss_kib(), started.elapsed()));
        }
        samples
    });
    let took = rig.workflow(GRID, n).await;
    let rss100 = soorma_tests::rss_kib();
    let mut samples = sampler.await.expect("sampler");
    samples.push((rss100, took));
    let width = LARGE_WIDTH.min(n);
    println!(
        "{n}-step DAG ({width} wide × {} deep, zero delay): {:.2} s, {:.0} steps/s; peak RSS {} KiB",
        n.div_ceil(width),
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        soorma_tests::status_kib("VmHWM:")
    );
    println!("  at 0 %: RSS {rss0} KiB");
    let mut last = Duration::ZERO;
    for (q, (rss, at)) in samples.iter().enumerate() {
        println!(
            "  at {:>3} %: RSS {rss} KiB (+{} KiB), {:>7.2} s (this quarter {:>7.2} s, {:>6.0} µs/step)",
            (q + 1) * 25,
            rss.saturating_sub(rss0),
            at.as_secs_f64(),
            (*at - last).as_secs_f64(),
            (*at - last).as_secs_f64() * 1e6 / (n / 4) as f64
        );
        last = *at;
    }
    if platform.kind() == "embedded" {
        let (records, bytes, largest) = stored(&**platform.state()).await;
        println!(
            "  the in-process state store holds {records} records, {} KiB ({:.0} bytes/step); the largest workflow task record {} KiB",
            bytes / 1024,
            bytes as f64 / n as f64,
            largest / 1024
        );
    }
    let rss50 = samples[1].0;
    let per_step = |from: u64, to: u64| (to as f64 - from as f64) * 1024.0 / (n / 2) as f64;
    println!(
        "  growth: first half {:.0} B/step, second half {:.0} B/step (second / first {:.2})",
        per_step(rss0, rss50),
        per_step(rss50, rss100),
        (rss100 as f64 - rss50 as f64) / (rss50 as f64 - rss0 as f64).max(1.0)
    );
    println!(
        "RATIO workflow_{n}_rss_growth_2nd_half{suffix} {:.3}",
        (rss100 as f64 - rss50 as f64) / rss50 as f64
    );
}

/// Records and bytes in the tasks and subtasks buckets of tenant `default`, and the largest
/// record of a task running a workflow.
async fn stored(store: &dyn StateStore) -> (usize, u64, u64) {
    let (mut records, mut bytes, mut largest) = (0, 0u64, 0u64);
    for bucket in [soorma::TASKS_BUCKET, soorma::SUBTASKS_BUCKET] {
        for key in store.keys(bucket, "default").await.expect("keys") {
            if let Some(v) = store
                .get(&StateKey::new(bucket, "default", key))
                .await
                .expect("get")
            {
                records += 1;
                bytes += v.value.len() as u64;
                let needle = br#""statuses""#;
                let runs_workflow = v.value.windows(needle.len()).any(|w| w == needle);
                if bucket == soorma::TASKS_BUCKET && runs_workflow {
                    largest = largest.max(v.value.len() as u64);
                }
            }
        }
    }
    (records, bytes, largest)
}

// ---------------------------------------------------------------------------------------------
// The state profile: an embedded platform whose store counts what goes through it.

#[derive(Default)]
struct Counts {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    task_writes: AtomicU64,
    task_write_bytes: AtomicU64,
    other_writes: AtomicU64,
    other_write_bytes: AtomicU64,
    failed_creates: AtomicU64,
    failed_updates: AtomicU64,
    /// (operation, bucket, key with digits as `#`) → (count, bytes), when
    /// `SOORMA_BENCH_WF_DEBUG` is set.
    by_key: Option<std::sync::Mutex<std::collections::HashMap<String, (u64, u64)>>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    reads: u64,
    read_bytes: u64,
    task_writes: u64,
    task_write_bytes: u64,
    other_writes: u64,
    other_write_bytes: u64,
    failed_creates: u64,
    failed_updates: u64,
}

impl Counts {
    fn snapshot(&self) -> Snapshot {
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        Snapshot {
            reads: l(&self.reads),
            read_bytes: l(&self.read_bytes),
            task_writes: l(&self.task_writes),
            task_write_bytes: l(&self.task_write_bytes),
            other_writes: l(&self.other_writes),
            other_write_bytes: l(&self.other_write_bytes),
            failed_creates: l(&self.failed_creates),
            failed_updates: l(&self.failed_updates),
        }
    }

    fn note(&self, op: &str, key: &StateKey, bytes: usize) {
        if let Some(m) = &self.by_key {
            let last = key.key.rsplit('-').next().unwrap_or_default();
            let kind = match key.bucket {
                soorma::TASKS_BUCKET => "task record",
                _ if last == "wf" => "workflow spec",
                _ if last.len() == 17 && last.starts_with(['r', 'f']) => "results chunk",
                _ if last.len() == 18 && last.starts_with('m') => "results chunk",
                _ if last.starts_with('o') && last[1..].bytes().all(|b| b.is_ascii_digit()) => {
                    "step output"
                }
                _ if last.starts_with('s') && last.contains('a') => "step attempt's group",
                _ => "other subtasks record",
            };
            let pattern = format!(
                "{kind}, keys < {} B",
                (key.key.len() + 1).next_power_of_two()
            );
            let mut m = m.lock().unwrap();
            let e = m.entry(format!("{op} {pattern}")).or_default();
            e.0 += 1;
            e.1 += bytes as u64;
        }
    }

    fn dump(&self) {
        if let Some(m) = &self.by_key {
            let mut m: Vec<_> = m.lock().unwrap().drain().collect();
            m.sort();
            for (k, (n, b)) in m {
                println!("    {k:<50} {n:>8} times {b:>12} bytes");
            }
        }
    }

    fn wrote(&self, key: &StateKey, bytes: usize) {
        self.note("write", key, bytes);
        let (n, b) = if key.bucket == soorma::TASKS_BUCKET {
            (&self.task_writes, &self.task_write_bytes)
        } else {
            (&self.other_writes, &self.other_write_bytes)
        };
        n.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl Snapshot {
    /// Per step, from `before` to `self`.
    fn per_step(&self, before: &Snapshot, steps: usize) -> String {
        let s = steps as f64;
        let d = |a: u64, b: u64| (a - b) as f64 / s;
        format!(
            "task writes {:>5.2} ({:>8.0} B), other writes {:>5.2} ({:>6.0} B), reads {:>5.2} ({:>8.0} B), failed creates {:>5.2}, failed updates {:>4.2}",
            d(self.task_writes, before.task_writes),
            d(self.task_write_bytes, before.task_write_bytes),
            d(self.other_writes, before.other_writes),
            d(self.other_write_bytes, before.other_write_bytes),
            d(self.reads, before.reads),
            d(self.read_bytes, before.read_bytes),
            d(self.failed_creates, before.failed_creates),
            d(self.failed_updates, before.failed_updates),
        )
    }
}

/// A `MemoryStore` that counts reads, writes, their bytes, and the creates and updates that
/// failed (a record that exists; a stale revision).
#[derive(Clone)]
struct Counting {
    inner: MemoryStore,
    counts: Arc<Counts>,
}

impl StateStore for Counting {
    fn get<'a>(
        &'a self,
        key: &'a StateKey,
    ) -> BoxFuture<'a, soorma::Result<Option<Versioned<Vec<u8>>>>> {
        Box::pin(async move {
            let got = self.inner.get(key).await?;
            self.counts.reads.fetch_add(1, Ordering::Relaxed);
            self.counts
                .note("read", key, got.as_ref().map_or(0, |v| v.value.len()));
            if let Some(v) = &got {
                self.counts
                    .read_bytes
                    .fetch_add(v.value.len() as u64, Ordering::Relaxed);
            }
            Ok(got)
        })
    }

    fn create<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
    ) -> BoxFuture<'a, soorma::Result<Revision>> {
        Box::pin(async move {
            let len = value.len();
            let r = self.inner.create(key, value).await;
            match &r {
                Ok(_) => self.counts.wrote(key, len),
                Err(_) => {
                    self.counts.failed_creates.fetch_add(1, Ordering::Relaxed);
                    self.counts.note("failed create", key, len);
                }
            }
            r
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Revision,
    ) -> BoxFuture<'a, soorma::Result<Revision>> {
        Box::pin(async move {
            let len = value.len();
            let r = self.inner.update(key, value, expected).await;
            match &r {
                Ok(_) => self.counts.wrote(key, len),
                Err(_) => {
                    self.counts.failed_updates.fetch_add(1, Ordering::Relaxed);
                    self.counts.note("failed update", key, len);
                }
            }
            r
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
    ) -> BoxFuture<'a, soorma::Result<Revision>> {
        Box::pin(async move {
            self.counts.wrote(key, value.len());
            self.inner.put(key, value).await
        })
    }

    fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, soorma::Result<()>> {
        self.inner.delete(key)
    }

    fn keys<'a>(
        &'a self,
        bucket: &'static str,
        tenant: &'a str,
    ) -> BoxFuture<'a, soorma::Result<Vec<String>>> {
        self.inner.keys(bucket, tenant)
    }

    fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, soorma::Result<Vec<String>>> {
        self.inner.tenants(bucket)
    }
}

/// A `MemoryRegistry` that counts how often the agents are listed (what resolving a
/// capability costs: on NATS a listing is a `STREAM.INFO` and a read per registered agent).
struct CountingRegistry {
    inner: MemoryRegistry,
    listings: Arc<AtomicU64>,
}

impl Registry for CountingRegistry {
    fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, soorma::Result<()>> {
        self.inner.register(agent)
    }

    fn deregister<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, soorma::Result<()>> {
        self.inner.deregister(agent_id)
    }

    fn agents(&self) -> BoxFuture<'_, soorma::Result<Vec<AgentDefinition>>> {
        self.listings.fetch_add(1, Ordering::Relaxed);
        self.inner.agents()
    }
}

/// A DAG shape for the profile: `n` steps, `width` wide (`n`x`width`; 1 wide is a chain).
fn shapes() -> Vec<(usize, usize)> {
    std::env::var("SOORMA_BENCH_WF_PROFILE")
        .unwrap_or_else(|_| PROFILE_SHAPES.into())
        .split(',')
        .filter_map(|s| {
            let (n, w) = s.trim().split_once('x')?;
            Some((n.parse().ok()?, w.parse().ok()?))
        })
        .filter(|&(n, w)| n > 0 && w > 0)
        .collect()
}

/// Phase 4: state and registry traffic per step, for the chain (both executors) and for DAGs
/// of `shapes` (steps × width).
async fn profile(shapes: &[(usize, usize)], dag: &Dag) {
    let counts = Arc::new(Counts {
        by_key: std::env::var_os("SOORMA_BENCH_WF_DEBUG").map(|_| Default::default()),
        ..Counts::default()
    });
    let listings = Arc::new(AtomicU64::new(0));
    let store = Counting {
        inner: MemoryStore::new(),
        counts: counts.clone(),
    };
    let platform = Platform::from_parts(EngineParts::new(
        "embedded-counting",
        Arc::new(EmbeddedBus::new()),
        Arc::new(store),
        Arc::new(CountingRegistry {
            inner: MemoryRegistry::new(),
            listings: listings.clone(),
        }),
    ));
    let shape_event = |(n, w): (usize, usize)| format!("bench.grid{n}x{w}.requested");
    let mut workflows = vec![
        (
            chain_event(CHAIN_STEPS),
            Dag::chain(CHAIN_STEPS).workflow("A chain", false),
        ),
        (DAG.to_owned(), dag.workflow("A random DAG", false)),
    ];
    for &shape in shapes {
        workflows.push((
            shape_event(shape),
            Dag::grid(shape.0, shape.1).workflow("A grid", false),
        ));
    }
    let rig = Rig::start(&platform, workflows).await;
    rig.workflow(&chain_event(CHAIN_STEPS), CHAIN_STEPS).await;
    rig.hand_chain(CHAIN_STEPS).await;
    counts.dump();
    println!(
        "Traffic per step (an embedded engine whose state store and registry count; \
         registry listings are capability look-ups)"
    );
    let measure = |what: String, steps: usize, took: Duration, before: (Snapshot, u64)| {
        println!(
            "  {what:<36} {}, registry listings {:>6.2} ({:.0} µs/step)",
            counts.snapshot().per_step(&before.0, steps),
            (listings.load(Ordering::SeqCst) - before.1) as f64 / steps as f64,
            took.as_secs_f64() * 1e6 / steps as f64
        );
        counts.dump();
    };
    let now = || (counts.snapshot(), listings.load(Ordering::SeqCst));
    let before = now();
    let took = rig.workflow(&chain_event(CHAIN_STEPS), CHAIN_STEPS).await;
    measure(
        format!("chain {CHAIN_STEPS}, Handler::workflow"),
        CHAIN_STEPS,
        took,
        before,
    );
    let before = now();
    let took = rig.hand_chain(CHAIN_STEPS).await;
    measure(
        format!("chain {CHAIN_STEPS}, hand-written"),
        CHAIN_STEPS,
        took,
        before,
    );
    let before = now();
    let took = rig.workflow(DAG, dag.len()).await;
    measure(
        format!("random {}-step DAG, Handler::workflow", dag.len()),
        dag.len(),
        took,
        before,
    );
    for &(n, w) in shapes {
        let before = now();
        let took = rig.workflow(&shape_event((n, w)), n).await;
        measure(
            format!("{n} steps {w} wide, Handler::workflow"),
            n,
            took,
            before,
        );
    }
    rig.shutdown().await;
}

fn main() {
    soorma_tests::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let large_steps = env_usize("SOORMA_BENCH_WF_STEPS", LARGE_STEPS);
    let profile_shapes = shapes();
    let short_runs = env_usize("SOORMA_BENCH_WF_SHORT_RUNS", SHORT_CHAIN_RUNS).max(1);
    let nats = std::env::var("SOORMA_BENCH_NATS").is_ok_and(|v| v == "1");
    rt.block_on(async {
        let dag = Dag::random(DAG_STEPS, SEED);
        let workflows = |large: usize| {
            let mut w = vec![
                (DAG.to_owned(), dag.workflow("A random DAG", true)),
                (
                    chain_event(CHAIN_STEPS),
                    Dag::chain(CHAIN_STEPS).workflow("A chain", false),
                ),
                (
                    chain_event(SHORT_CHAIN_STEPS),
                    Dag::chain(SHORT_CHAIN_STEPS).workflow("A short chain", false),
                ),
            ];
            if large > 0 {
                w.push((
                    GRID.to_owned(),
                    Dag::grid(large, LARGE_WIDTH).workflow("A grid", false),
                ));
            }
            w
        };
        let platform = Platform::embedded();
        let rig = Rig::start(&platform, workflows(large_steps)).await;
        println!("Embedded platform");
        makespan(&rig, &dag, "").await;
        step_overhead(
            &rig,
            CHAIN_STEPS,
            RUNS,
            "workflow_step_overhead_vs_delegate",
        )
        .await;
        step_overhead(
            &rig,
            SHORT_CHAIN_STEPS,
            short_runs,
            &format!("workflow_step_overhead_vs_delegate_{SHORT_CHAIN_STEPS}"),
        )
        .await;
        if large_steps > 0 {
            large(&rig, &platform, large_steps, "").await;
        }
        rig.shutdown().await;
        if !profile_shapes.is_empty() {
            profile(&profile_shapes, &dag).await;
        }
        if nats {
            let server = soorma_tests::nats_server::NatsServer::start();
            let platform = soorma::nats::connect(soorma::nats::NatsConfig::new(server.url()))
                .await
                .expect("connect");
            let rig = Rig::start(&platform, workflows(0)).await;
            println!("NATS (nats-server -js, default sync)");
            // What resolving a capability costs here (the workflow executor does it for each
            // attempt it prepares): the registry's agents are listed.
            let mut lookups = Vec::new();
            for _ in 0..21 {
                let started = Instant::now();
                platform
                    .discovery()
                    .capability(SLEEP)
                    .await
                    .expect("look-up")
                    .expect("the tool's capability");
                lookups.push(started.elapsed());
            }
            println!(
                "  a capability look-up (discovery().capability) takes {:.2} ms (median of 21)",
                ms(median(lookups))
            );
            makespan(&rig, &dag, "_nats").await;
            step_overhead(
                &rig,
                SHORT_CHAIN_STEPS,
                short_runs,
                &format!("workflow_step_overhead_vs_delegate_{SHORT_CHAIN_STEPS}_nats"),
            )
            .await;
            step_overhead(
                &rig,
                CHAIN_STEPS,
                RUNS,
                "workflow_step_overhead_vs_delegate_nats",
            )
            .await;
            rig.shutdown().await;
        }
    });
}
