//! The agents the product scenarios (`scenarios/`) and the platform-specific tests (`nats.rs`,
//! `faults.rs`) start: a calculator tool, a batch worker fanning out to an upper-casing tool, a
//! fan-in worker whose sub-agents the test plays, the research tools and planner, and a
//! planner that asks a person for approval, and a worker that asks one before publishing.
//!
//! Handlers are registered with the builder API, so these agents do not depend on which
//! attribute-registered handlers a test binary links.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::{ActionReply, AgentBuilder, EventEnvelope};

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculate {
    expression: String,
    /// Decimal places of the result (default: all).
    #[serde(default)]
    precision: Option<u8>,
}

/// The calculator's reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Calculated {
    /// The value.
    pub result: f64,
}

/// Evaluates an arithmetic expression.
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    if req.data.expression == "panic" {
        panic!("calculator exploded");
    }
    soorma_examples::calc::eval(&req.data.expression)
        .map(|result| match req.data.precision {
            Some(p) => (result * 10f64.powi(p.into())).round() / 10f64.powi(p.into()),
            None => result,
        })
        .map(|result| Calculated { result })
        .map_err(|e| ToolError::new(e.to_string()))
}

/// The calculator tool.
pub fn calculator() -> AgentBuilder {
    Tool::new("calculator")
        .use_registered_handlers(false)
        .handler(
            Handler::on_invoke("calculate.requested", calculate)
                .with_description("Evaluates an arithmetic expression."),
        )
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Job {
    items: Vec<String>,
}

/// Fans out one `upper.requested` per item (same event type for all).
async fn batch(mut task: TaskContext<Job>) -> soorma::Result<()> {
    let delegations: Vec<Delegation> = task
        .data
        .items
        .iter()
        // The NATS restart tests start the tool after the batcher delegates to it: the
        // requests wait in their stream until it runs.
        .map(|item| {
            Delegation::new("upper.requested", item, "upper.completed").skip_consumer_check()
        })
        .collect();
    task.delegate_parallel(delegations).await?;
    task.progress(0.5, "fanned out").await
}

async fn batch_collect(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let out: Vec<Value> = all
            .into_iter()
            .map(|s| s.result.unwrap_or_default())
            .collect();
        task.complete(out).await?;
    }
    Ok(())
}

async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    if req.data == "fail" {
        return Err(ToolError::new("refusing to shout"));
    }
    Ok(req.data.to_uppercase())
}

/// A worker fanning out one `upper.requested` per item.
pub fn batcher() -> AgentBuilder {
    Worker::new("batcher")
        .use_registered_handlers(false)
        .handler(Handler::on_task("batch.requested", batch))
        .handler(Handler::on_result("upper.completed", batch_collect))
}

/// A tool upper-casing text.
pub fn upper_tool() -> AgentBuilder {
    Tool::new("upper")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("upper.requested", upper))
}

/// Fans out to an event nobody serves; the test plays the sub-agents.
async fn big(mut task: TaskContext<u32>) -> soorma::Result<()> {
    let d: Vec<Delegation> = (0..task.data)
        .map(|i| Delegation::new("ghost.requested", &i, "ghost.completed").skip_consumer_check())
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

/// How many result handlers of [`fan_in`] saw their group complete, by task id.
pub static SAW_GROUP_COMPLETE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn ghost_done(result: ResultContext<i64>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        SAW_GROUP_COMPLETE
            .lock()
            .unwrap()
            .push(task.task_id().to_owned());
        let values: Vec<Value> = all
            .into_iter()
            .map(|s| s.result.unwrap_or_default())
            .collect();
        task.complete(values).await?;
    }
    Ok(())
}

/// A worker fanning out to an event nobody serves (the test plays the sub-agents).
pub fn fan_in() -> AgentBuilder {
    Worker::new("fan-in")
        .use_registered_handlers(false)
        .handler(Handler::on_task("big.requested", big))
        .handler(Handler::on_result("ghost.completed", ghost_done))
}

/// A sub-agent's success reply to a `ghost.requested` sub-task of [`fan_in`], with this
/// value, as if from `tenant` (`None`: the default tenant).
pub fn result_for(request: &EventEnvelope, value: i64, tenant: Option<&str>) -> EventEnvelope {
    let mut env = EventEnvelope::new(
        format!("res-{}-{value}-{}", request.id, tenant.unwrap_or("default")),
        "ghost",
        Topic::ActionResults,
        "ghost.completed",
    )
    .with_correlation_id(request.correlation_id.clone().unwrap())
    .with_data(serde_json::to_value(ActionReply::success(&request.id, json!(value))).unwrap());
    if let Some(t) = tenant {
        env = env.with_tenant_id(t);
    }
    env
}

async fn search(req: Invocation<Value>) -> Result<Value, ToolError> {
    let q = req.data["q"].as_str().unwrap_or_default().to_owned();
    if q == "broken" {
        return Err(ToolError::new("the search index is down"));
    }
    let items: Vec<String> = if q == "nothing" {
        Vec::new()
    } else {
        vec![format!("{q} book"), format!("{q} blog")]
    };
    Ok(json!({"count": items.len(), "items": items}))
}

async fn analyze(req: Invocation<Value>) -> Result<Value, ToolError> {
    let items = req.data["items"].as_array().cloned().unwrap_or_default();
    Ok(
        json!({"summary": format!("{} sources about {}", items.len(), req.data["topic"].as_str().unwrap_or("?"))}),
    )
}

/// Search and analysis tools for the planner scenarios.
pub fn research_tools() -> AgentBuilder {
    Tool::new("research-tools")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("search.requested", search))
        .handler(Handler::on_invoke("analyze.requested", analyze))
}

/// search → analyze → done, or → no_results (a failed terminal state) when nothing is found;
/// `approval` inserts a state the plan pauses in until `approval.given`.
pub fn research_plan(approval: bool) -> soorma::planner::Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let after_search = if approval { "approving" } else { "analyzing" };
    let mut def = PlanDefinition::new("research", "search, analyze, report")
        .with_state(
            StateConfig::new("start", "search the topic")
                .with_action(
                    StateAction::new("search.requested", "search.completed")
                        .with_data(json!({"q": "{{goal.topic}}"})),
                )
                .with_transition(
                    StateTransition::new("search.completed", after_search)
                        .with_condition("data.success && data.result.count > 0"),
                )
                .with_transition(
                    StateTransition::new("search.completed", "no_results")
                        .with_condition("data.success && data.result.count == 0"),
                ),
        )
        .with_state(
            StateConfig::new("analyzing", "analyze what was found")
                .with_action(
                    StateAction::new("analyze.requested", "analyze.completed").with_data(json!({
                        "items": "{{results.start.items}}",
                        "topic": "{{goal.topic}}"
                    })),
                )
                .with_transition(StateTransition::new("analyze.completed", "done")),
        )
        .with_state(
            StateConfig::new("done", "report")
                .terminal()
                .with_result(json!({
                    "summary": "{{results.analyzing.summary}}",
                    "found": "{{results.start.count}}",
                    "note": "found {{results.start.count}} sources"
                })),
        )
        .with_state(
            StateConfig::new("no_results", "nothing found")
                .failed()
                .with_result(json!("nothing found for {{goal.topic}}")),
        );
    if approval {
        def = def.with_state(
            StateConfig::new("approving", "a person approves the analysis")
                .with_transition(StateTransition::new("approval.given", "analyzing")),
        );
    }
    soorma::planner::Plan::new(def).expect("a valid plan")
}

async fn research_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

/// A planner whose plan pauses in `approving` until `approval.given` resumes it.
async fn research_transition(mut plan: PlanContext) -> soorma::Result<()> {
    let trigger = plan.trigger().cloned().expect("a trigger");
    if trigger.event_type == "approval.given" && plan.status() == soorma::common::PlanStatus::Paused
    {
        plan.resume(trigger.data.clone()).await?;
    }
    plan.execute_next().await?;
    if plan.current_state() == "approving" && plan.status() == soorma::common::PlanStatus::Running {
        plan.pause("waiting for approval").await?;
    }
    Ok(())
}

/// The research planner (with the default transition handler, or the approval one).
pub fn research_planner(approval: bool) -> AgentBuilder {
    let mut planner = Planner::new("research-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(research_plan(approval)))
        .handler(Handler::on_goal("research.goal", research_goal));
    if approval {
        planner = planner.handler(Handler::on_transition(research_transition));
    }
    planner
}

async fn draft(req: Invocation<Value>) -> Result<Value, ToolError> {
    Ok(json!({"text": format!("A post about {}", req.data["topic"].as_str().unwrap_or("?"))}))
}

/// draft → approving (a person answers, or the question times out) → published | rejected | expired.
pub fn approval_plan() -> soorma::planner::Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    soorma::planner::Plan::new(
        PlanDefinition::new("approval", "draft, then ask a person")
            .with_initial_state("drafting")
            .with_state(
                StateConfig::new("drafting", "write a draft")
                    .with_action(
                        StateAction::new("draft.requested", "draft.completed")
                            .with_data(json!({"topic": "{{goal.topic}}"})),
                    )
                    .with_transition(StateTransition::new("draft.completed", "approving")),
            )
            .with_state(
                StateConfig::new("approving", "a person approves the draft")
                    .with_transition(
                        StateTransition::new("approval.answered", "published")
                            .with_condition("data.approved == true"),
                    )
                    .with_transition(StateTransition::new("approval.answered", "rejected"))
                    .with_transition(StateTransition::new("plan.timeout", "expired")),
            )
            .with_state(
                StateConfig::new("published", "")
                    .terminal()
                    .with_result(json!({
                        "text": "{{results.drafting.text}}",
                        "approved_by": "{{results.approving.by}}"
                    })),
            )
            .with_state(
                StateConfig::new("rejected", "")
                    .failed()
                    .with_result(json!("rejected by {{results.approving.by}}")),
            )
            .with_state(StateConfig::new("expired", "").failed().with_result(json!(
                "nobody approved \"{{results.approving.question}}\" in time"
            ))),
    )
    .expect("a valid plan")
}

async fn approval_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await?;
    Ok(())
}

async fn approval_transition(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await?;
    if plan.current_state() == "approving" && plan.status() == soorma::common::PlanStatus::Running {
        let ms = plan.record().goal_data["timeout_ms"]
            .as_u64()
            .unwrap_or(10_000);
        plan.request_human_input_within(
            "Publish this draft?",
            "approval.answered",
            Duration::from_millis(ms),
        )
        .await?;
    }
    Ok(())
}

/// The drafting tool and the approval planner.
pub fn approval_agents() -> [AgentBuilder; 2] {
    [
        Tool::new("drafter")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("draft.requested", draft)),
        Planner::new("approval-planner")
            .use_registered_handlers(false)
            .with_state(Arc::new(approval_plan()))
            .handler(Handler::on_goal("post.goal", approval_goal))
            .handler(Handler::on_transition(approval_transition)),
    ]
}

async fn publish_post(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let ms = task.data["timeout_ms"].as_u64().unwrap_or(10_000);
    task.request_human_input(
        "Publish this post?",
        "post.reviewed",
        Some(Duration::from_millis(ms)),
    )
    .await?;
    Ok(())
}

async fn post_reviewed(result: ResultContext<Value>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    match &result.data {
        Some(answer) => task.complete(json!({"published": answer["ok"]})).await,
        None => task.fail(result.error.clone().unwrap_or_default()).await,
    }?;
    Ok(())
}

/// A worker that asks a person before publishing.
pub fn publisher() -> AgentBuilder {
    Worker::new("publisher")
        .use_registered_handlers(false)
        .handler(Handler::on_task("post.requested", publish_post))
        .handler(Handler::on_result("post.reviewed", post_reviewed))
        .handler(Handler::on_result(
            soorma::TASK_TIMEOUT_EVENT,
            post_reviewed,
        ))
}

/// What a [`sleeper`]'s handler did: how many calls started, were dropped (canceled: the
/// handler's future was dropped before its end) and ran to their end.
#[derive(Debug, Clone, Default)]
pub struct Tracked {
    started: Arc<std::sync::atomic::AtomicUsize>,
    dropped: Arc<std::sync::atomic::AtomicUsize>,
    finished: Arc<std::sync::atomic::AtomicUsize>,
}

impl Tracked {
    fn count(n: &std::sync::atomic::AtomicUsize) -> usize {
        n.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Calls started.
    pub fn started(&self) -> usize {
        Self::count(&self.started)
    }

    /// Calls dropped before their end.
    pub fn dropped(&self) -> usize {
        Self::count(&self.dropped)
    }

    /// Calls that ran to their end.
    pub fn finished(&self) -> usize {
        Self::count(&self.finished)
    }

    /// Waits until `n` calls have started; panics after `within`.
    pub async fn wait_started(&self, n: usize, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        while self.started() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the handler never started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `n` calls were dropped; panics after `within`, naming `what`.
    pub async fn wait_dropped(&self, n: usize, within: Duration, what: &str) {
        let deadline = std::time::Instant::now() + within;
        while self.dropped() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: the handler still runs {within:?} later"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Counts when dropped before it is disarmed (the handler's future dropped mid-way).
struct DropCounter(Option<Arc<std::sync::atomic::AtomicUsize>>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// A [`sleeper`]'s request: how long to sleep.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Nap {
    /// Milliseconds.
    pub nap_ms: u64,
}

async fn nap(req: Invocation<Nap>, State(t): State<Tracked>) -> Result<String, ToolError> {
    use std::sync::atomic::Ordering::SeqCst;
    t.started.fetch_add(1, SeqCst);
    let mut guard = DropCounter(Some(t.dropped.clone()));
    tokio::time::sleep(Duration::from_millis(req.data.nap_ms)).await;
    guard.0 = None;
    t.finished.fetch_add(1, SeqCst);
    Ok("woke up".into())
}

/// A tool `name` whose handler of `event` ([`Nap`]) sleeps, recording in `tracked` whether it
/// was dropped (canceled) or ran to its end.
pub fn sleeper(name: &str, event: &str, tracked: &Tracked) -> AgentBuilder {
    Tool::new(name)
        .use_registered_handlers(false)
        .with_state(tracked.clone())
        .handler(Handler::on_invoke(event, nap))
}

static PARKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Delegates to an event nobody serves: the task stays persisted and pending.
async fn park(mut task: TaskContext<u32>) -> soorma::Result<()> {
    task.delegate_with(
        Delegation::new("never.served", &task.data, "never.done").skip_consumer_check(),
    )
    .await?;
    PARKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The result handler the parked tasks' delegations need (no result ever comes).
async fn never_done(_result: ResultContext<u32>) {}

/// A worker whose `park.requested` tasks each delegate a sub-task nobody serves, so they stay
/// persisted and in flight (the NATS bench's memory phase and its small test).
pub fn parker() -> AgentBuilder {
    Worker::new("parker")
        .use_registered_handlers(false)
        .handler(Handler::on_task("park.requested", park))
        .handler(Handler::on_result("never.done", never_done))
}

/// Submits `tasks` tasks to [`parker`] (256 at a time) and waits until each has delegated,
/// calling `report` with the count every `poll`; panics when none is handled for `stall`.
pub async fn park_and_wait(
    bus: &soorma::BusClient,
    tasks: u32,
    stall: Duration,
    poll: Duration,
    report: impl Fn(usize),
) {
    use futures_util::StreamExt;
    let start = PARKED.load(std::sync::atomic::Ordering::Relaxed);
    futures_util::stream::iter(0..tasks)
        .for_each_concurrent(256, |i| {
            let bus = bus.clone();
            async move {
                bus.request("park.requested", i, "park.done")
                    .await
                    .expect("park");
            }
        })
        .await;
    let mut last = (0, tokio::time::Instant::now());
    loop {
        let parked = PARKED.load(std::sync::atomic::Ordering::Relaxed) - start;
        if parked >= tasks as usize {
            return;
        }
        if parked > last.0 {
            last = (parked, tokio::time::Instant::now());
        }
        assert!(
            last.1.elapsed() < stall,
            "the worker stalled: {parked} of {tasks} tasks handled, no progress for {stall:?}"
        );
        report(parked);
        tokio::time::sleep(poll).await;
    }
}
