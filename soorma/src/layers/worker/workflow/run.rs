//! Running a workflow in a worker task.
//!
//! Each step attempt is a delegation group of one sub-task (its request, question or
//! sub-workflow run), recorded with the revision-checked fan-in like any delegation. Where each
//! step stands is stored in the task ([`WorkflowRun`]: a letter per step, the attempts in
//! flight, the failures); the definition and input once beside it ([`WorkflowSpec`]), and each
//! completed step's output in a record of its own, written before the write that completes the
//! step, so the task stays small however many steps the workflow has. After each recorded
//! reply, [`transition`](super::transition) decides what changes; it runs twice per handling:
//! on a copy, to learn which attempts to prepare (render their inputs, resolve their
//! capabilities), then inside the revision-checked write. Only the writer that moved a step to
//! running sends its attempt; a redelivery of the event whose write started an attempt sends
//! it again (its first handling may have died in between).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use soorma_common::events::{HUMAN_INPUT, WORKFLOW_RUN_REQUESTED, WORKFLOW_STEP_REPLIED};
use soorma_common::{
    ActionReply, DelegationGroup, StepOutcome, StepStatus, SubTaskGroup, SubTaskInfo,
    SubTaskStatus, TaskStatus, Topic, WorkflowOutput, WorkflowRun, WorkflowSpec,
};

use super::super::result::ResultContext;
use super::super::task::{StateMap, TaskContext};
use super::super::{STATE_CONCURRENCY, group, subtask_key, task_key, update_task};
use super::transition::{
    Actions, Outgoing, Prepared, Reply, Send, attempt_group, inconsistent, output_of, sub_task,
    transition,
};
use super::{MAX_SUB_WORKFLOW_DEPTH, StepKind, Workflow};
use crate::error::{Error, Result};
use crate::platform::fanin::OnceCache;
use crate::platform::timers;
use crate::protocol::request::Request;
use crate::runtime::extract::HandlerInput;
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerKind, HandlerOutcome, schema_of,
};
use crate::spi::state::{self, Change, StateKey};
use crate::util::concurrently;

/// How many workflow runs' definitions a worker keeps validated in memory.
const SPECS_KEPT: usize = 256;
/// How many completed steps' outputs a worker keeps in memory.
const OUTPUTS_KEPT: usize = 1024;

/// `WorkflowSpec` is the request of `workflow.run.requested`: run this definition on this
/// input; the reply is every step's outcome.
impl Request for WorkflowSpec {
    const EVENT: &'static str = WORKFLOW_RUN_REQUESTED;
    type Reply = WorkflowOutput;
}

/// A workflow run's definition (validated) and input, as stored beside its task.
struct Spec {
    workflow: Workflow,
    input: Value,
}

/// What a worker keeps of the runs it advances: their specs (validated) and completed steps'
/// outputs, loaded once (neither changes once stored), and which runs it is advancing.
#[derive(Clone)]
struct Specs {
    specs: Arc<OnceCache<StateKey, Spec>>,
    outputs: Arc<OnceCache<StateKey, StepOutcome>>,
    lanes: Arc<Lanes>,
}

/// One advance per run at a time in a process: a reply handled (for the first time) while its
/// run is being advanced is recorded, then leaves the advance to the handler already at it,
/// which looks again before it stops. A redelivered reply advances the run itself (see
/// `on_step_replied`). Across processes the revision-checked write still arbitrates.
/// An entry lives while its run is being advanced: at most one per handler running.
#[derive(Default)]
struct Lanes(std::sync::Mutex<HashMap<StateKey, bool>>);

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StateKey, bool>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the caller advances the run of the task at `key`; if another handler is at it,
    /// that one is asked to look again.
    fn enter(self: &Arc<Self>, key: &StateKey) -> Option<Lane> {
        let mut lanes = self.lock();
        match lanes.get_mut(key) {
            Some(again) => {
                *again = true;
                None
            }
            None => {
                lanes.insert(key.clone(), false);
                Some(Lane {
                    lanes: self.clone(),
                    key: key.clone(),
                    open: true,
                })
            }
        }
    }
}

/// The right to advance one run in this process; leaving it (or dropping it, on an error)
/// lets the next reply's handler advance.
struct Lane {
    lanes: Arc<Lanes>,
    key: StateKey,
    open: bool,
}

impl Lane {
    /// Whether a reply came while advancing (then the caller looks again); otherwise the lane
    /// is left, atomically with that answer.
    fn look_again(&mut self) -> bool {
        let mut lanes = self.lanes.lock();
        match lanes.get_mut(&self.key) {
            Some(again) if *again => {
                *again = false;
                true
            }
            _ => {
                lanes.remove(&self.key);
                self.open = false;
                false
            }
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if self.open {
            self.lanes.lock().remove(&self.key);
        }
    }
}

/// The reply event of the step attempts of `agent`'s runs (each worker agent gets only its
/// own).
pub(super) fn step_reply_event(agent: &str) -> String {
    format!("{WORKFLOW_STEP_REPLIED}.{agent}")
}

/// Why `agent` cannot run workflows: its name cannot be part of an event name.
pub(in crate::layers::worker) fn unusable_name(agent: &str) -> Option<String> {
    let usable = agent.split('.').all(|t| {
        !t.is_empty()
            && t.chars()
                .all(|c| !c.is_whitespace() && c != '*' && c != '>')
    });
    (!usable).then(|| {
        format!(
            "it runs workflows, whose steps reply with `{}`: an agent name that runs workflows \
             must be dot-separated tokens without spaces, `*` or `>`",
            step_reply_event(agent)
        )
    })
}

/// Marks a handler as one that starts workflows (so that the worker gets the step handler).
struct StartsWorkflows;

impl Handler {
    /// A worker task handler that runs `workflow` for each request of type `event`: the
    /// request's payload is the workflow's input. Each step starts as soon as the steps it
    /// depends on are done; the task completes with every step's outcome
    /// ([`WorkflowOutput`](crate::common::WorkflowOutput)), or fails as the failure policies
    /// say. The run is stored with the task, so any instance of the worker goes on with it,
    /// after a crash too. Progress goes out as `workflow.step.*` events on `system-events`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// use soorma::common::WorkflowOutput;
    /// use soorma::workflow::Workflow;
    ///
    /// async fn search(req: Invocation<serde_json::Value>) -> Result<Vec<String>, ToolError> {
    ///     Ok(vec![format!("about {}", req.data["q"].as_str().unwrap_or_default())])
    /// }
    /// async fn count(req: Invocation<serde_json::Value>) -> Result<usize, ToolError> {
    ///     Ok(req.data["hits"].as_array().map_or(0, Vec::len))
    /// }
    ///
    /// let workflow = Workflow::from_json(r#"{"goal": "Count hits", "steps": [
    ///   {"id": "search", "operator": "search.requested", "input_mapping": {"q": "{{topic}}"}},
    ///   {"id": "count", "operator": "count.requested", "depends_on": ["search"],
    ///    "input_mapping": {"hits": "{{search}}"}}
    /// ]}"#).expect("a valid workflow");
    ///
    /// let platform = Platform::embedded();
    /// let running = Agents::new()
    ///     .tool("tools", vec![Handler::on_invoke("search.requested", search), Handler::on_invoke("count.requested", count)])
    ///     .worker("counter", vec![Handler::workflow("hits.requested", workflow)])
    ///     .start(&platform)
    ///     .await?;
    /// let out: WorkflowOutput = platform.client("docs").invoke("hits.requested", serde_json::json!({"topic": "rust"}), "hits.completed").await?;
    /// assert_eq!(out.output("count"), Some(&serde_json::json!(1)));
    /// # running.shutdown().await }
    /// ```
    pub fn workflow(event: impl Into<String>, workflow: Workflow) -> Self {
        let workflow = Arc::new(workflow);
        let input_schema = workflow.definition().input_schema.clone();
        let description = workflow.definition().goal.clone();
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let workflow = workflow.clone();
            Box::pin(async move {
                let data = input.envelope.data.clone();
                let spec = Spec {
                    workflow: Workflow::clone(&workflow),
                    input: data,
                };
                start(&input, spec).await.map_err(retryable)?;
                Ok(None)
            })
        });
        let mut h = workflow_task(event.into(), call);
        if let Some(schema) = input_schema {
            h = h.with_payload_schema(schema);
        }
        h.with_description(description)
    }

    /// A worker task handler for `workflow.run.requested`: runs the workflow a
    /// [`WorkflowSpec`](crate::common::WorkflowSpec) request carries on its input (as
    /// [`Handler::workflow`] does). A definition that is not valid fails the task with every
    /// problem. Sub-workflow steps are run through it: a worker whose workflows have
    /// sub-workflows serves it too (or another worker does).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// use soorma::common::{WorkflowDefinition, WorkflowSpec, WorkflowStep};
    ///
    /// async fn shout(req: Invocation<serde_json::Value>) -> Result<String, ToolError> {
    ///     Ok(req.data["text"].as_str().unwrap_or_default().to_uppercase())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let running = Agents::new()
    ///     .tool("shouter", vec![Handler::on_invoke("shout.requested", shout)])
    ///     .worker("workflows", vec![Handler::run_workflows()])
    ///     .start(&platform)
    ///     .await?;
    /// let spec = WorkflowSpec::new(
    ///     WorkflowDefinition::new("Shout").with_step(WorkflowStep::new("a", "shout.requested").with_input("text", "{{word}}")),
    ///     serde_json::json!({"word": "hi"}),
    /// );
    /// let out = platform.client("docs").call(spec).await?;
    /// assert_eq!(out.output("a"), Some(&serde_json::json!("HI")));
    /// # running.shutdown().await }
    /// ```
    pub fn run_workflows() -> Self {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            Box::pin(async move {
                let spec: WorkflowSpec = crate::protocol::decode_payload(
                    &input.envelope.event_type,
                    &input.envelope.data,
                )
                .map_err(Failure::Decode)?;
                match Workflow::new(spec.workflow) {
                    Ok(workflow) => {
                        let spec = Spec {
                            workflow,
                            input: spec.input,
                        };
                        start(&input, spec).await.map_err(retryable)?;
                    }
                    Err(invalid) => {
                        let mut task = TaskContext::<(), StateMap>::from_request((), &input);
                        task.fail(invalid.to_string()).await.map_err(retryable)?;
                    }
                }
                Ok(None)
            })
        });
        let mut h = workflow_task(WORKFLOW_RUN_REQUESTED.to_owned(), call);
        h.payload_schema = crate::runtime::handler::SchemaSource::Of(schema_of::<WorkflowSpec>);
        h.reply_event = Some(WorkflowSpec::reply_event());
        h.with_description("Runs a workflow definition on an input.")
    }
}

fn workflow_task(event: String, call: ErasedFn) -> Handler {
    let mut h = Handler::new(
        HandlerKind::Task,
        Topic::ActionRequests,
        event,
        schema_of::<Value>,
        Vec::new(),
        call,
    );
    h.advertised = Advertised::Capability;
    h.response_schema = Some(crate::runtime::handler::SchemaSource::Of(
        schema_of::<WorkflowOutput>,
    ));
    h.on_failure = Some(super::super::fail_task);
    h.on_start = Some(timers::ensure_running);
    h.on_cancel = Some(super::super::cancel_task);
    h.assemble = Some(super::super::assemble_worker);
    h.layer = Some(Arc::new(StartsWorkflows));
    h
}

/// Whether `h` starts workflows (its worker then needs the step handler).
pub(in crate::layers::worker) fn starts_workflows(h: &Handler) -> bool {
    h.layer
        .as_ref()
        .is_some_and(|l| l.downcast_ref::<StartsWorkflows>().is_some())
}

/// The hidden handler of worker `agent` that runs workflows: records each step's reply and
/// advances the run.
pub(in crate::layers::worker) fn step_handler(agent: &str) -> Handler {
    let specs = Specs {
        specs: Arc::new(OnceCache::new(SPECS_KEPT)),
        outputs: Arc::new(OnceCache::new(OUTPUTS_KEPT)),
        lanes: Arc::default(),
    };
    let call: ErasedFn = Arc::new(move |input: HandlerInput| {
        let specs = specs.clone();
        Box::pin(async move { on_step_replied(input, specs).await })
    });
    let mut h = Handler::new(
        HandlerKind::Result,
        Topic::ActionResults,
        step_reply_event(agent),
        schema_of::<Value>,
        Vec::new(),
        call,
    );
    h.advertised = Advertised::Hidden;
    h.on_start = Some(timers::ensure_running);
    h
}

fn retryable(e: Error) -> Failure {
    Failure::Handler {
        retryable: e.is_retryable(),
        message: e.to_string(),
    }
}

/// Starts the run of `spec` in the task of `input`'s request (a redelivered request finds
/// the run stored and goes on with it).
async fn start(input: &HandlerInput, spec: Spec) -> Result<()> {
    let mut task = TaskContext::<Value, StateMap>::from_request(Value::Null, input);
    task.keep_stored_state = true;
    // A run started by a step of another run (a sub-workflow, or a step calling
    // `workflow.run.requested`) has that step's sub-task id as its id: the nesting shows in
    // it, and is bounded, so a workflow that runs itself ends.
    let depth = nesting(task.task_id());
    if depth > MAX_SUB_WORKFLOW_DEPTH {
        tracing::warn!(task_id = %task.task_id(), depth, "workflow nested too deeply");
        task.fail(format!(
            "workflows nest at most {MAX_SUB_WORKFLOW_DEPTH} deep: this run is started by a step \
             of a run {depth} levels down"
        ))
        .await?;
        return Ok(());
    }
    #[cfg(feature = "schema-validation")]
    if let Some(schema) = &spec.workflow.definition().input_schema
        && let Some(problem) = input_problem(schema, &spec.input)
    {
        task.fail(format!(
            "the workflow's input does not match its input schema: {problem}"
        ))
        .await?;
        return Ok(());
    }
    let tenant = task.tenant_owned();
    let spec_id = spec_id(task.task_id());
    let stored = WorkflowSpec::new(spec.workflow.definition().clone(), spec.input.clone());
    let key = subtask_key(&tenant, &spec_id);
    match task
        .runtime()
        .platform
        .state()
        .create(&key, state::encode("workflow", &stored)?)
        .await
    {
        Ok(_) | Err(Error::Conflict { .. }) => {}
        Err(e) => return Err(e),
    }
    let steps = spec.workflow.steps().len();
    task.persist(None, move |rec| {
        if rec.workflow.is_none() {
            rec.workflow = Some(WorkflowRun::new(spec_id.clone(), steps));
        }
        if !rec.status.is_terminal() {
            rec.status = TaskStatus::Waiting;
        }
    })
    .await?;
    let outputs = Arc::new(OnceCache::new(OUTPUTS_KEPT));
    advance(task, &spec, &outputs).await
}

/// Why `input` does not match the workflow's input `schema`, if it does not.
#[cfg(feature = "schema-validation")]
fn input_problem(schema: &Value, input: &Value) -> Option<String> {
    match crate::platform::validation::compile(schema) {
        Err(e) => Some(format!("the input schema is not a valid JSON Schema: {e}")),
        Ok(validator) => validator
            .iter_errors(input)
            .next()
            .map(|e| format!("at `{}`: {e}", e.instance_path())),
    }
}

/// Records a step's reply and advances the run of the task that waits for it.
async fn on_step_replied(input: HandlerInput, specs: Specs) -> HandlerOutcome {
    let result = ResultContext::<Value>::decode(&input).map_err(Failure::Decode)?;
    let tenant = input.envelope.tenant().to_owned();
    // The step this replies to, from its sub-task id (`<task id>-s<step>a<attempt>-0`): a
    // person's answer must match the step's answer schema before it is recorded.
    if let Some(sub_task) = result.sub_task_id()
        && let Some((task_id, step)) = step_of(sub_task)
    {
        // No spec: no such run, so no such sub-task (a run's spec is stored before its steps).
        let unknown = || Error::UnknownSubTask(sub_task.to_owned());
        let spec = specs
            .load(&input, &tenant, &spec_id(task_id), unknown)
            .await
            .map_err(retryable)?;
        if let Some(problem) = answer_problem(&spec, step, &result) {
            tracing::warn!(task_id, %problem, "an answer was refused");
            return Err(Failure::Handler {
                message: problem,
                retryable: false,
            });
        }
    }
    let stored = result.record().await.map_err(retryable)?.task;
    if stored.value.agent != *input.runtime.name {
        // Another worker's run (a reply sent to this worker's event by mistake): that worker
        // advances it when its own replies come.
        return Ok(None);
    }
    let stored = Arc::unwrap_or_clone(stored);
    let Some(run) = &stored.value.workflow else {
        return Err(retryable(inconsistent(format!(
            "task `{}` runs no workflow, but got a step reply",
            stored.value.task_id
        ))));
    };
    let missing = || {
        inconsistent(format!(
            "the spec `{}` of a running workflow is missing",
            run.spec
        ))
    };
    let spec = specs
        .load(&input, &tenant, &run.spec, missing)
        .await
        .map_err(retryable)?;
    let task_id = stored.value.task_id.clone();
    let mut lane = match specs.lanes.enter(&task_key(&tenant, &task_id)) {
        Some(lane) => Some(lane),
        // A redelivery advances the run itself, beside the handler at it: it sends again what
        // its first handling started (only its own id finds those attempts).
        None if input.attempt > 1 => None,
        // Recorded; the handler advancing the run looks again before it stops.
        None => return Ok(None),
    };
    let mut task = TaskContext::restored(
        stored.value,
        stored.revision,
        input.envelope.clone(),
        input.runtime.clone(),
    );
    loop {
        advance(task, &spec, &specs.outputs)
            .await
            .map_err(retryable)?;
        if !lane.as_mut().is_some_and(Lane::look_again) {
            return Ok(None);
        }
        task = TaskContext::load(&input, &tenant, &task_id)
            .await
            .map_err(retryable)?;
    }
}

/// Where the spec of task `task_id`'s run is stored (in the `subtasks` bucket).
fn spec_id(task_id: &str) -> String {
    format!("{task_id}-wf")
}

/// How many runs a run with id `task_id` is nested in: the step attempt ids in it
/// (`-s<step>a<attempt>-0`, see [`attempt_group`]).
fn nesting(task_id: &str) -> usize {
    task_id
        .split("-s")
        .skip(1)
        .filter(|part| {
            let Some((step, rest)) = part.split_once('a') else {
                return false;
            };
            let attempt = rest.split('-').next().unwrap_or_default();
            !step.is_empty()
                && step.bytes().all(|b| b.is_ascii_digit())
                && !attempt.is_empty()
                && attempt.bytes().all(|b| b.is_ascii_digit())
                && rest[attempt.len()..].starts_with("-0")
        })
        .count()
}

/// Where the output of the completed step `step` (a position) of task `task_id`'s run is
/// stored (in the `subtasks` bucket).
fn output_id(task_id: &str, step: usize) -> String {
    format!("{task_id}-o{step}")
}

/// The task and step position an attempt's sub-task id names (see [`attempt_group`]).
fn step_of(sub_task_id: &str) -> Option<(&str, usize)> {
    let (group_id, _) = group::parse_sub_task_id(sub_task_id)?;
    let (task_id, rest) = group_id.rsplit_once("-s")?;
    let (step, attempt) = rest.split_once('a')?;
    attempt.parse::<u32>().ok()?;
    Some((task_id, step.parse().ok()?))
}

/// Why a person's answer to a human-input step cannot be taken: it does not match the step's
/// `response_schema` (without the `schema-validation` feature, every answer is taken).
fn answer_problem<T>(spec: &Spec, step: usize, result: &ResultContext<T>) -> Option<String> {
    let step = spec.workflow.steps().get(step)?;
    let StepKind::HumanInput(ask) = step.kind() else {
        return None;
    };
    let (schema, answer) = (ask.response_schema.as_ref()?, result.raw()?);
    #[cfg(feature = "schema-validation")]
    {
        input_problem(schema, answer).map(|p| {
            format!(
                "the answer to step `{}` does not match its response schema: {p}",
                step.id()
            )
        })
    }
    #[cfg(not(feature = "schema-validation"))]
    {
        let _ = (schema, answer);
        None
    }
}

impl Specs {
    /// The spec stored at `id` (in the `subtasks` bucket of `tenant`), loaded and validated
    /// once; `missing` is the error when there is none.
    async fn load(
        &self,
        input: &HandlerInput,
        tenant: &str,
        id: &str,
        missing: impl FnOnce() -> Error,
    ) -> Result<Arc<Spec>> {
        let key = subtask_key(tenant, id);
        let store = input.runtime.platform.state().clone();
        self.specs
            .get_or_load(key.clone(), async move {
                let stored = state::load::<WorkflowSpec>(&*store, "workflow", &key)
                    .await?
                    .ok_or_else(missing)?;
                let workflow = Workflow::new(stored.value.workflow)
                    .map_err(|e| inconsistent(format!("the stored workflow `{key}`: {e}")))?;
                Ok(Spec {
                    workflow,
                    input: stored.value.input,
                })
            })
            .await
    }
}

impl Reply {
    fn of(member: &SubTaskInfo) -> Self {
        Self {
            output: match member.status {
                SubTaskStatus::Completed => Ok(member.result.clone().unwrap_or(Value::Null)),
                _ => Err(member
                    .error
                    .clone()
                    .unwrap_or_else(|| "the step failed".to_owned())),
            },
        }
    }
}

/// The outputs of completed steps a worker keeps.
type Outputs = OnceCache<StateKey, StepOutcome>;

/// Advances the run: settles ended attempts, starts what became ready, ends the workflow when
/// it is done. Repeats while steps became ready that this handling did not prepare, or failed
/// without being sent (their failure may make more steps ready or skipped), at most once per
/// step.
async fn advance(mut task: TaskContext<Value>, spec: &Spec, outputs: &Arc<Outputs>) -> Result<()> {
    let by = task.envelope().id.clone();
    let steps = spec.workflow.steps().len();
    // The attempts this handling sent already (a later round must not send them again).
    let mut sent: HashSet<String> = HashSet::new();
    for _ in 0..=steps {
        if task.status().is_terminal() {
            task.resend_owed_reply().await?;
            return Ok(());
        }
        let replies = load_replies(&task).await?;
        // A dry run on a copy says which attempts to prepare.
        let mut copy = task.record().clone();
        let dry = transition(&mut copy, &spec.workflow, &replies, &None, &by)?;
        // The outputs of the steps it completes are stored before the write that says so.
        store_outputs(&task, &dry, &replies).await?;
        let sends: Vec<Send> = dry
            .sends
            .into_iter()
            .filter(|s| !sent.contains(&s.group_id))
            .collect();
        let prepared = Some(prepare(&task, spec, outputs, &replies, &sends).await?);
        let key = task.key();
        let store = task.runtime().platform.state().clone();
        let (mut actions, stored) = update_task(&*store, &key, |rec| {
            let actions = transition(rec, &spec.workflow, &replies, &prepared, &by)?;
            Ok(if actions.changed {
                Change::Write(actions)
            } else {
                Change::Keep(actions)
            })
        })
        .await?;
        task.set_stored(stored);
        actions.sends.retain(|s| !sent.contains(&s.group_id));
        sent.extend(actions.sends.iter().map(|s| s.group_id.clone()));
        let again = actions.again;
        act(&mut task, spec, outputs, actions, prepared.as_ref()).await?;
        if !again {
            return Ok(());
        }
    }
    Ok(())
}

/// The replies of the attempts in flight whose group is complete. Loaded once per process
/// while kept (a complete group never changes).
async fn load_replies(task: &TaskContext<Value>) -> Result<HashMap<String, Reply>> {
    let rec = task.record();
    let Some(run) = &rec.workflow else {
        return Ok(HashMap::new());
    };
    let groups: Vec<SubTaskGroup> = run
        .running
        .iter()
        .filter_map(|(&i, r)| {
            rec.groups
                .get(&attempt_group(&rec.task_id, i as usize, r.attempts))
        })
        .filter(|g| g.is_complete())
        .cloned()
        .collect();
    if groups.is_empty() {
        return Ok(HashMap::new());
    }
    let platform = task.runtime().platform.clone();
    let tenant = task.tenant_owned();
    let task_id = rec.task_id.clone();
    let loaded = concurrently(groups, STATE_CONCURRENCY, move |g: SubTaskGroup| {
        let (platform, tenant, task_id) = (platform.clone(), tenant.clone(), task_id.clone());
        async move {
            let key = (tenant.clone(), task_id, g.group_id.clone());
            let members = platform
                .fan_in()
                .complete
                .get_or_load(key, group::sub_tasks(&platform, &tenant, &g, true))
                .await?;
            let reply = members
                .first()
                .map(Reply::of)
                .ok_or_else(|| inconsistent(format!("group `{}` has no member", g.group_id)))?;
            Ok::<_, Error>((g.group_id.clone(), reply))
        }
    })
    .await?;
    Ok(loaded.into_iter().collect())
}

/// Stores the outputs of the steps `actions` completes (each once: a record of its own,
/// created by whichever writer gets there first, with the same content).
async fn store_outputs(
    task: &TaskContext<Value>,
    actions: &Actions,
    replies: &HashMap<String, Reply>,
) -> Result<()> {
    let tenant = task.tenant_owned();
    let mut records = Vec::new();
    for c in &actions.completed {
        let Some(Reply { output: Ok(output) }) = replies.get(&c.group_id) else {
            continue;
        };
        let outcome = StepOutcome::completed(output.clone(), c.attempts);
        records.push((
            subtask_key(&tenant, &output_id(task.task_id(), c.step)),
            state::encode("step output", &outcome)?,
        ));
    }
    let store = task.runtime().platform.state().clone();
    concurrently(records, STATE_CONCURRENCY, move |(key, bytes)| {
        let store = store.clone();
        async move {
            match store.create(&key, bytes).await {
                Ok(_) | Err(Error::Conflict { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }
    })
    .await?;
    Ok(())
}

/// The outputs of the completed steps at `positions`, by position (loaded once per process
/// while kept).
async fn load_outputs(
    task: &TaskContext<Value>,
    outputs: &Arc<Outputs>,
    positions: Vec<usize>,
) -> Result<BTreeMap<usize, StepOutcome>> {
    let tenant = task.tenant_owned();
    let task_id = task.task_id().to_owned();
    let store = task.runtime().platform.state().clone();
    let outputs = outputs.clone();
    let loaded = concurrently(positions, STATE_CONCURRENCY, move |i: usize| {
        let key = subtask_key(&tenant, &output_id(&task_id, i));
        let (store, outputs) = (store.clone(), outputs.clone());
        async move {
            let outcome = outputs
                .get_or_load(key.clone(), async move {
                    state::load::<StepOutcome>(&*store, "step output", &key)
                        .await?
                        .map(|o| o.value)
                        .ok_or_else(|| inconsistent(format!("`{key}` is missing")))
                })
                .await?;
            Ok::<_, Error>((i, StepOutcome::clone(&outcome)))
        }
    })
    .await?;
    Ok(loaded.into_iter().collect())
}

/// Prepares the attempts of `sends`: renders each step's input from the workflow's input and
/// the outputs of completed steps (stored, or completing in this handling: in `replies`), and
/// resolves what it calls.
async fn prepare(
    task: &TaskContext<Value>,
    spec: &Spec,
    outputs: &Arc<Outputs>,
    replies: &HashMap<String, Reply>,
    sends: &[Send],
) -> Result<HashMap<(usize, bool), Prepared>> {
    let mut prepared = HashMap::new();
    if sends.is_empty() {
        return Ok(prepared);
    }
    let steps = spec.workflow.steps();
    let Some(run) = &task.record().workflow else {
        return Ok(prepared);
    };
    // The steps the sends' inputs read: completing now (their reply) or stored.
    let mut read: BTreeMap<String, Value> = BTreeMap::new();
    let mut stored = Vec::new();
    for send in sends {
        for r in steps[send.step].input().reads() {
            let Some(id) = r.step() else { continue };
            let Some(&d) = spec.workflow.index.get(id) else {
                continue;
            };
            if read.contains_key(id) || stored.contains(&d) {
                continue;
            }
            let in_flight = run.running.get(&(d as u32)).and_then(|a| {
                match replies.get(&attempt_group(task.task_id(), d, a.attempts)) {
                    Some(Reply { output: Ok(v) }) => Some(v.clone()),
                    _ => None,
                }
            });
            match in_flight {
                Some(v) => {
                    read.insert(id.to_owned(), v);
                }
                None if run.status(d) == StepStatus::Completed => stored.push(d),
                None => {}
            }
        }
    }
    for (d, outcome) in load_outputs(task, outputs, stored).await? {
        if let Some(v) = outcome.output {
            read.insert(steps[d].id().to_owned(), v);
        }
    }
    let bus = task.bus();
    let reply_event = step_reply_event(&task.record().agent);
    for send in sends {
        let step = &steps[send.step];
        let data = match step.input().render(&spec.input, &read) {
            Ok(data) => data,
            Err(e) => {
                let why = format!("its input does not render: {e}");
                prepared.insert((send.step, false), Err(why.clone()));
                prepared.insert((send.step, true), Err(why));
                continue;
            }
        };
        let outgoing = match step.kind() {
            StepKind::Operator { operator, fallback } => {
                // A first attempt that cannot be sent goes to the fallback at once: prepare both.
                if !send.fallback
                    && let Some(fallback) = fallback
                {
                    let out = resolve(task, &bus, fallback, data.clone()).await?;
                    prepared.insert((send.step, true), out);
                }
                let calls = if send.fallback {
                    fallback.as_deref().unwrap_or(operator)
                } else {
                    operator
                };
                resolve(task, &bus, calls, data).await?
            }
            StepKind::HumanInput(ask) => Ok(Outgoing {
                topic: Topic::NotificationEvents,
                event: HUMAN_INPUT.to_owned(),
                data: serde_json::json!({
                    "task_id": task.task_id(),
                    "step": step.id(),
                    "question": ask.question,
                    "response_schema": ask.response_schema,
                    "context": data,
                    "response_event": reply_event,
                    "timeout_seconds": step.timeout().map(|t| t.as_secs_f64()),
                }),
                calls: HUMAN_INPUT.to_owned(),
            }),
            StepKind::SubWorkflow(inner) => {
                let spec = WorkflowSpec::new(inner.definition().clone(), data);
                let data =
                    serde_json::to_value(spec).map_err(|e| Error::serialize("sub-workflow", e))?;
                resolve(task, &bus, WORKFLOW_RUN_REQUESTED, data).await?
            }
        };
        prepared.insert((send.step, send.fallback), outgoing);
    }
    Ok(prepared)
}

/// The request calling capability `name` (its task name, or the event it consumes) with
/// `data`, checked against the capability's payload schema; or why it cannot be sent.
async fn resolve(
    task: &TaskContext<Value>,
    bus: &crate::protocol::publish::BusClient,
    name: &str,
    data: Value,
) -> Result<Prepared> {
    // From the registry snapshot the platform's request checks share (not a registry read
    // per attempt).
    let validator = task.runtime().platform.validator();
    let Some(event) = validator.capability_event(name).await else {
        return Ok(Err(format!(
            "no registered capability is called `{name}` or consumes it"
        )));
    };
    let env = bus.envelope_with_id(
        "check".to_owned(),
        Topic::ActionRequests,
        event.clone(),
        data,
    );
    match bus.check_consumer(&env).await {
        Ok(()) => {}
        Err(e @ Error::NoConsumer { .. }) => return Ok(Err(e.to_string())),
        Err(e) => return Err(e),
    }
    match bus.check_request(&env).await {
        Ok(()) => Ok(Ok(Outgoing {
            topic: Topic::ActionRequests,
            event,
            data: env.data,
            calls: name.to_owned(),
        })),
        Err(e @ Error::SchemaViolation { .. }) => Ok(Err(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Does what a write decided: stores the attempts' group records, publishes the progress (in
/// the order of the changes, before the requests they announce, so that an observer never
/// sees a step's reply before its start), sends the requests (and arms their timeouts),
/// forgets ended attempts' timers, cancels what a failed attempt or workflow left running, and
/// ends the task.
async fn act(
    task: &mut TaskContext<Value>,
    spec: &Spec,
    outputs: &Arc<Outputs>,
    actions: Actions,
    prepared: Option<&HashMap<(usize, bool), Prepared>>,
) -> Result<()> {
    let bus = task.bus();
    let platform = task.runtime().platform.clone();
    let tenant = task.tenant_owned();
    let task_id = task.task_id().to_owned();
    let reply_event = step_reply_event(&task.record().agent);
    let outgoing = |s: &Send| match prepared.and_then(|p| p.get(&(s.step, s.fallback))) {
        Some(Ok(out)) => Some(out),
        _ => None,
    };
    // The attempts' records first: a reply finds its group.
    let mut records = Vec::new();
    for send in &actions.sends {
        if let Some(out) = outgoing(send) {
            records.push(DelegationGroup::paged(
                &send.group_id,
                &task_id,
                send.first_seq,
                [(out.event.as_str(), reply_event.as_str())],
                group::PAGE_BYTES,
            ));
        }
    }
    let store_platform = platform.clone();
    let store_tenant = tenant.clone();
    concurrently(records, STATE_CONCURRENCY, move |(record, pages)| {
        let (platform, tenant) = (store_platform.clone(), store_tenant.clone());
        async move { group::store(&platform, &tenant, &record, pages).await }
    })
    .await?;
    for (event, mut p) in actions.progress {
        if let Some(out) = actions
            .sends
            .iter()
            .find(|s| spec.workflow.steps()[s.step].id() == p.step && s.attempt == p.attempt)
            .and_then(outgoing)
        {
            p.calls = Some(out.calls.clone());
        }
        if let Err(e) = bus.publish(Topic::SystemEvents, event, p).await {
            tracing::debug!(error = %e, "could not publish workflow progress");
        }
    }
    let mut envelopes = Vec::new();
    for send in &actions.sends {
        let Some(out) = outgoing(send) else {
            continue;
        };
        let id = sub_task(&send.group_id);
        let mut env =
            bus.envelope_with_id(id.clone(), out.topic, out.event.clone(), out.data.clone());
        if out.topic != Topic::ActionRequests {
            env.response_topic = Some(Topic::ActionResults);
        }
        env.correlation_id = Some(id.clone());
        env.response_event = Some(reply_event.clone());
        envelopes.push(env);
        let step = &spec.workflow.steps()[send.step];
        if let Some(after) = step.timeout() {
            let reply = ActionReply::failure(
                &id,
                format!(
                    "attempt {} of step `{}` timed out after {}",
                    send.attempt,
                    step.id(),
                    humantime::format_duration(after)
                ),
            );
            let data = serde_json::to_value(reply).map_err(|e| Error::serialize("timeout", e))?;
            let mut timer = bus.envelope(Topic::ActionResults, reply_event.clone(), data);
            timer.id = format!("{id}-timeout");
            timer.correlation_id = Some(id.clone());
            timer.tenant_id = Some(tenant.clone());
            timers::schedule(&platform, timer, after).await?;
        }
    }
    // One by one, not as a batch: an engine may store a batch's replies together, and a step
    // must not wait for the slowest request sent with it.
    let publisher = bus.clone();
    concurrently(envelopes, STATE_CONCURRENCY, move |env| {
        let bus = publisher.clone();
        async move { bus.publish_envelope(env).await }
    })
    .await?;
    for timer in actions.forget_timers {
        if let Err(e) = timers::cancel(&platform, &tenant, &format!("{timer}-timeout")).await {
            tracing::debug!(error = %e, "could not forget a step's timeout");
        }
    }
    for sub_task in actions.cancel {
        if let Err(e) = bus.cancel(sub_task).tenant_id(tenant.clone()).await {
            tracing::debug!(error = %e, "could not cancel a step's attempt");
        }
    }
    match actions.finish {
        None => {}
        Some(Err(error)) => {
            tracing::info!(task_id = %task_id, %error, "workflow failed");
            task.fail(error).await?;
        }
        Some(Ok(())) => {
            let completed: Vec<usize> = (0..spec.workflow.steps().len())
                .filter(|&i| {
                    task.record()
                        .workflow
                        .as_ref()
                        .is_some_and(|r| r.status(i) == StepStatus::Completed)
                })
                .collect();
            let stored = load_outputs(task, outputs, completed).await?;
            let output = output_of(task.record(), &spec.workflow, &stored);
            tracing::info!(task_id = %task_id, steps = output.steps.len(), "workflow completed");
            task.complete(output).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_counts_the_step_attempts_in_a_run_id() {
        assert_eq!(nesting("9b2c-4f1e"), 0);
        let once = format!("{}-0", attempt_group("9b2c-4f1e", 3, 1));
        assert_eq!(nesting(&once), 1);
        let twice = format!("{}-0", attempt_group(&once, 0, 12));
        assert_eq!(nesting(&twice), 2);
        assert_eq!(
            nesting("a-sky-0-s1ax-0-s-0"),
            0,
            "look-alikes are not attempts"
        );
    }
}
