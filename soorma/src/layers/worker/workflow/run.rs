//! Running a workflow in a worker task.
//!
//! Each step attempt is a delegation group of one sub-task (its request, question or
//! sub-workflow run), recorded with the revision-checked fan-in like any delegation. Where each
//! step stands is stored in the task ([`WorkflowRun`]); the definition and input once beside it
//! ([`WorkflowSpec`]). After each recorded reply, one pure function ([`transition`]) decides,
//! from the stored task and the replies known, what changes: attempts that ended, retries and
//! fallbacks, failure policies, the steps that just became ready (each as soon as its own
//! dependencies are done, not level by level), and the end. It runs twice per reply: once on a
//! copy to learn which steps to prepare (render their inputs, resolve their capabilities), then
//! inside the revision-checked write. Only the writer that moved a step from pending to running
//! publishes its request; a redelivery of the event whose write started a step publishes it
//! again (its first handling may have died in between).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use soorma_common::events::{
    HUMAN_INPUT, WORKFLOW_RUN_REQUESTED, WORKFLOW_STEP_COMPLETED, WORKFLOW_STEP_FAILED,
    WORKFLOW_STEP_REPLIED, WORKFLOW_STEP_RETRYING, WORKFLOW_STEP_SKIPPED, WORKFLOW_STEP_STARTED,
};
use soorma_common::{
    ActionReply, DelegationGroup, FailurePolicy, StepOutcome, StepRun, StepStatus, SubTaskGroup,
    SubTaskInfo, SubTaskStatus, TaskRecord, TaskStatus, Topic, WorkflowOutput, WorkflowRun,
    WorkflowSpec, WorkflowStepProgress,
};

use super::super::result::ResultContext;
use super::super::task::{StateMap, TaskContext};
use super::super::{STATE_CONCURRENCY, group, subtask_key, update_task};
use super::{StepKind, Workflow};
use crate::error::{EngineError, EngineErrorKind, Error, Result};
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

/// The specs of the runs a worker advances, loaded and validated once (they never change).
#[derive(Clone)]
struct Specs(Arc<OnceCache<StateKey, Spec>>);

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

/// The hidden handler of a worker that runs workflows: records each step's reply and advances
/// the run.
pub(in crate::layers::worker) fn step_handler() -> Handler {
    let specs = Specs(Arc::new(OnceCache::new(SPECS_KEPT)));
    let call: ErasedFn = Arc::new(move |input: HandlerInput| {
        let specs = specs.clone();
        Box::pin(async move { on_step_replied(input, specs).await })
    });
    let mut h = Handler::new(
        HandlerKind::Result,
        Topic::ActionResults,
        WORKFLOW_STEP_REPLIED.to_owned(),
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

fn inconsistent(what: String) -> Error {
    EngineError::new(EngineErrorKind::Inconsistent, what).into()
}

/// Starts the run of `spec` in the task of `input`'s request (a redelivered request finds
/// the run stored and goes on with it).
async fn start(input: &HandlerInput, spec: Spec) -> Result<()> {
    let mut task = TaskContext::<Value, StateMap>::from_request(Value::Null, input);
    task.keep_stored_state = true;
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
    let ids: Vec<String> = spec
        .workflow
        .steps()
        .iter()
        .map(|s| s.id().to_owned())
        .collect();
    task.persist(move |rec| {
        if rec.workflow.is_none() {
            rec.workflow = Some(WorkflowRun::new(spec_id.clone(), ids.iter().cloned()));
        }
        if !rec.status.is_terminal() {
            rec.status = TaskStatus::Waiting;
        }
    })
    .await?;
    advance(task, &spec).await
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
    let (stored, _) = result.record().await.map_err(retryable)?;
    if stored.value.agent != *input.runtime.name {
        // Another worker's workflow (each worker that runs workflows gets every step reply).
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
    let task = TaskContext::restored(
        stored.value,
        stored.revision,
        input.envelope.clone(),
        input.runtime.clone(),
    );
    advance(task, &spec).await.map_err(retryable)?;
    Ok(None)
}

/// Where the spec of task `task_id`'s run is stored (in the `subtasks` bucket).
fn spec_id(task_id: &str) -> String {
    format!("{task_id}-wf")
}

/// The group id of attempt `attempt` of step `step` (by position) of task `task_id`.
fn attempt_group(task_id: &str, step: usize, attempt: u32) -> String {
    format!("{task_id}-s{step}a{attempt}")
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
        self.0
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

/// How a sub-task ended.
#[derive(Debug, Clone)]
struct Reply {
    output: std::result::Result<Value, String>,
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

/// What one attempt of a step sends: the request (or question) to publish, or why it cannot
/// be sent (its input does not render, no capability is called that, the input breaks the
/// capability's schema).
type Prepared = std::result::Result<Outgoing, String>;

#[derive(Debug, Clone)]
struct Outgoing {
    topic: Topic,
    event: String,
    data: Value,
    /// What the attempt calls, for progress events.
    calls: String,
}

/// Which steps' attempts are prepared: by (step position, whether the attempt calls the
/// fallback). `None`: a dry run, in which every attempt can be sent.
type PreparedSet = Option<HashMap<(usize, bool), Prepared>>;

/// What a write decided, to do after it.
#[derive(Debug, Default)]
struct Actions {
    /// Attempts to send: (step position, group id, first seq, fallback, attempt number).
    sends: Vec<Send>,
    /// Progress events.
    progress: Vec<(&'static str, WorkflowStepProgress)>,
    /// Timers of ended attempts to forget (sub-task ids).
    forget_timers: Vec<String>,
    /// Sub-tasks to cancel (the workflow failed while they ran).
    cancel: Vec<String>,
    /// An attempt failed without being sent: the run must be looked at again.
    again: bool,
    /// How the workflow ended, when it did.
    finish: Option<std::result::Result<(), String>>,
}

#[derive(Debug, Clone)]
struct Send {
    step: usize,
    group_id: String,
    first_seq: u32,
    fallback: bool,
    attempt: u32,
}

fn sub_task(group_id: &str) -> String {
    super::super::sub_task_id(group_id, 0)
}

/// Advances the run: settles ended attempts, starts what became ready, ends the workflow when
/// it is done. Repeats while attempts fail before being sent (their failure may make more
/// steps ready or skipped), at most once per step.
async fn advance(mut task: TaskContext<Value>, spec: &Spec) -> Result<()> {
    let by = task.envelope().id.clone();
    let steps = spec.workflow.steps();
    // The attempts this handling sent already (a later round must not send them again).
    let mut sent: HashSet<String> = HashSet::new();
    for _ in 0..=steps.len() {
        if task.status().is_terminal() {
            task.resend_owed_reply().await?;
            return Ok(());
        }
        // The replies of the attempts that ended.
        let mut replies = load_replies(&task, |_, s| s.status == StepStatus::Running).await?;
        // A dry run on a copy says which attempts to prepare.
        let mut copy = task.record().clone();
        let dry = transition(&mut copy, &spec.workflow, &replies, &None, &by)?;
        let sends: Vec<Send> = dry
            .sends
            .into_iter()
            .filter(|s| !sent.contains(&s.group_id))
            .collect();
        // The outputs their inputs read.
        let read: HashSet<&str> = sends
            .iter()
            .flat_map(|s| {
                steps[s.step]
                    .input()
                    .reads()
                    .iter()
                    .filter_map(|r| r.step())
            })
            .collect();
        let outputs_read = load_replies(&task, |id, s| {
            s.status == StepStatus::Completed && read.contains(id)
        })
        .await?;
        replies.extend(outputs_read);
        let prepared = Some(prepare(&task, spec, &replies, &sends).await?);
        let key = task.key();
        let store = task.runtime().platform.state().clone();
        let (mut actions, stored) = update_task(&*store, &key, |rec| {
            let actions = transition(rec, &spec.workflow, &replies, &prepared, &by)?;
            Ok(if actions.changed() {
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
        act(&mut task, spec, &replies, actions, prepared.as_ref()).await?;
        if !again {
            return Ok(());
        }
    }
    Ok(())
}

impl Actions {
    /// Whether the write changes the task (sends include redeliveries' sends again, which
    /// change nothing, so progress and the end say it).
    fn changed(&self) -> bool {
        !self.progress.is_empty() || self.finish.is_some() || self.again
    }
}

/// The replies of the steps `which` selects (by id and run) whose current attempt's group is
/// complete. Loaded once per process while kept (complete groups never change).
async fn load_replies(
    task: &TaskContext<Value>,
    which: impl Fn(&str, &StepRun) -> bool,
) -> Result<HashMap<String, Reply>> {
    let rec = task.record();
    let Some(run) = &rec.workflow else {
        return Ok(HashMap::new());
    };
    let groups: Vec<SubTaskGroup> = run
        .steps
        .iter()
        .filter(|(id, s)| which(id, s))
        .filter_map(|(_, s)| rec.groups.get(s.group.as_deref()?))
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

/// The outputs of the completed steps, by step id, as far as `replies` has them.
fn outputs(rec: &TaskRecord, replies: &HashMap<String, Reply>) -> BTreeMap<String, Value> {
    let Some(run) = &rec.workflow else {
        return BTreeMap::new();
    };
    run.steps
        .iter()
        .filter(|(_, s)| s.status == StepStatus::Completed)
        .filter_map(|(id, s)| {
            let reply = replies.get(s.group.as_deref()?)?;
            Some((id.clone(), reply.output.clone().ok()?))
        })
        .collect()
}

/// Prepares the attempts of `sends`: renders each step's input from the workflow's input and
/// the outputs of completed steps, and resolves what it calls.
async fn prepare(
    task: &TaskContext<Value>,
    spec: &Spec,
    replies: &HashMap<String, Reply>,
    sends: &[Send],
) -> Result<HashMap<(usize, bool), Prepared>> {
    let mut prepared = HashMap::new();
    if sends.is_empty() {
        return Ok(prepared);
    }
    let outputs = outputs(task.record(), replies);
    // The dry run treats a settled attempt's step as completed before the write does: its
    // output is in `replies` under its group.
    let mut outputs = outputs;
    if let Some(run) = &task.record().workflow {
        for (id, s) in &run.steps {
            if let Some(Reply { output: Ok(v) }) = s.group.as_ref().and_then(|g| replies.get(g)) {
                outputs.entry(id.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    let bus = task.bus();
    for send in sends {
        let step = &spec.workflow.steps()[send.step];
        let data = match step.input().render(&spec.input, &outputs) {
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
                    "response_event": WORKFLOW_STEP_REPLIED,
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
    let Some(cap) = task.runtime().platform.discovery().capability(name).await? else {
        return Ok(Err(format!(
            "no registered capability is called `{name}` or consumes it"
        )));
    };
    let event = cap.consumed_event.event_name;
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

/// The policy of each step, by position.
fn policy_of(workflow: &Workflow, step: usize) -> FailurePolicy {
    workflow.steps()[step].on_failure()
}

/// Decides what changes in the run stored in `rec`, given the replies known and the attempts
/// prepared (`None`: a dry run, every attempt can be sent). Pure: the same inputs give the
/// same changes, so a retried write decides again on the record it finds.
fn transition(
    rec: &mut TaskRecord,
    workflow: &Workflow,
    replies: &HashMap<String, Reply>,
    prepared: &PreparedSet,
    by: &str,
) -> Result<Actions> {
    let mut acts = Actions::default();
    if rec.status.is_terminal() {
        return Ok(acts);
    }
    let task_id = rec.task_id.clone();
    let agent = rec.agent.clone();
    let Some(mut run) = rec.workflow.take() else {
        return Err(inconsistent(format!("task `{task_id}` runs no workflow")));
    };
    let steps = workflow.steps();
    let progress = |status: StepStatus, id: &str, s: &StepRun| {
        let mut p = WorkflowStepProgress::new(&task_id, &agent, id, status);
        p.attempt = s.attempts;
        p.sub_task_id = s.group.as_deref().map(sub_task);
        p.error.clone_from(&s.error);
        p
    };
    let mut next_seq = rec.next_seq;
    let mut new_groups: Vec<SubTaskGroup> = Vec::new();
    // Starts attempt `fallback` of step `i`, or fails it when it cannot be sent (then tries
    // the fallback, if any and not tried). Returns false when nothing could be sent and the
    // step is failed.
    let mut start = |i: usize,
                     fallback: bool,
                     s: &mut StepRun,
                     acts: &mut Actions,
                     new_groups: &mut Vec<SubTaskGroup>|
     -> Option<()> {
        let mut fallback = fallback;
        loop {
            let outcome = match prepared {
                None => Some(Ok(())),
                Some(p) => p
                    .get(&(i, fallback))
                    .map(|o| o.as_ref().map(drop).map_err(Clone::clone)),
            };
            match outcome {
                // Not prepared by this writer (a concurrent write made it startable): the
                // writer whose record made it so starts it.
                None => return Some(()),
                Some(Ok(())) => {
                    s.attempts += 1;
                    s.fallback = fallback;
                    s.status = StepStatus::Running;
                    s.started_by = Some(by.to_owned());
                    s.error = None;
                    let group_id = attempt_group(&task_id, i, s.attempts);
                    s.group = Some(group_id.clone());
                    new_groups.push(SubTaskGroup::new(&group_id, next_seq, 1));
                    acts.sends.push(Send {
                        step: i,
                        group_id,
                        first_seq: next_seq,
                        fallback,
                        attempt: s.attempts,
                    });
                    next_seq += 1;
                    return Some(());
                }
                Some(Err(why)) => {
                    s.attempts += 1;
                    acts.again = true;
                    let has_fallback = matches!(
                        &steps[i].kind,
                        StepKind::Operator {
                            fallback: Some(_),
                            ..
                        }
                    );
                    if !fallback && has_fallback {
                        s.error = Some(why);
                        fallback = true;
                        continue;
                    }
                    s.status = StepStatus::Failed;
                    s.error = Some(why);
                    return None;
                }
            }
        }
    };

    // 1. Attempts that ended.
    let mut failed_now: Vec<usize> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some(s) = run.steps.get_mut(step.id()) else {
            return Err(inconsistent(format!(
                "task `{task_id}`: the run has no step `{}`",
                step.id()
            )));
        };
        if s.status != StepStatus::Running {
            continue;
        }
        let Some(group_id) = s.group.clone() else {
            continue;
        };
        let complete = rec
            .groups
            .get(&group_id)
            .is_some_and(SubTaskGroup::is_complete);
        let Some(reply) = replies.get(&group_id).filter(|_| complete) else {
            // Still running; a redelivery of the event that started it sends it again.
            if s.started_by.as_deref() == Some(by) && !complete {
                let first_seq = rec.groups.get(&group_id).map_or(0, |g| g.first_seq);
                acts.sends.push(Send {
                    step: i,
                    group_id,
                    first_seq,
                    fallback: s.fallback,
                    attempt: s.attempts,
                });
            }
            continue;
        };
        if step.timeout().is_some() {
            acts.forget_timers.push(sub_task(&group_id));
        }
        match &reply.output {
            Ok(_) => {
                s.status = StepStatus::Completed;
                s.error = None;
                acts.progress.push((
                    WORKFLOW_STEP_COMPLETED,
                    progress(StepStatus::Completed, step.id(), s),
                ));
            }
            Err(error) => {
                // A timed-out attempt may still run: stop it (a no-op for one that replied).
                acts.cancel.push(sub_task(&group_id));
                s.error = Some(error.clone());
                let has_fallback = matches!(
                    step.kind(),
                    StepKind::Operator {
                        fallback: Some(_),
                        ..
                    }
                );
                let retry = if !s.fallback && s.attempts <= step.retries() {
                    Some(false)
                } else if !s.fallback && has_fallback {
                    Some(true)
                } else {
                    None
                };
                let ended = match retry {
                    Some(fallback) => {
                        let before = s.attempts;
                        let sent = start(i, fallback, s, &mut acts, &mut new_groups);
                        if sent.is_some() && s.attempts > before {
                            let mut p = progress(StepStatus::Running, step.id(), s);
                            p.error = Some(error.clone());
                            acts.progress.push((WORKFLOW_STEP_RETRYING, p));
                        }
                        sent.is_none()
                    }
                    None => {
                        s.status = StepStatus::Failed;
                        true
                    }
                };
                if ended {
                    acts.progress.push((
                        WORKFLOW_STEP_FAILED,
                        progress(StepStatus::Failed, step.id(), s),
                    ));
                    failed_now.push(i);
                }
            }
        }
    }

    // 2. Failure policies, then 3. the steps that became ready, in topological order (so a
    // skip reaches every descendant in one pass).
    let apply_failures = |failed: &[usize], run: &mut WorkflowRun| {
        for &i in failed {
            if policy_of(workflow, i) == FailurePolicy::FailFast && run.failed_by.is_none() {
                run.failed_by = Some(steps[i].id().to_owned());
            }
        }
    };
    apply_failures(&failed_now, &mut run);
    let order: Vec<usize> = workflow.order().map(|s| workflow.index[s.id()]).collect();
    if run.failed_by.is_none() {
        for &i in &order {
            let step = &steps[i];
            if run.steps.get(step.id()).map(|s| s.status) != Some(StepStatus::Pending) {
                continue;
            }
            let mut blocked_by = None;
            let mut ready = true;
            for dep in step.dependencies() {
                let d = workflow.index[dep.as_str()];
                match run.steps.get(dep.as_str()).map(|s| s.status) {
                    Some(StepStatus::Completed) => {}
                    Some(StepStatus::Failed)
                        if policy_of(workflow, d) == FailurePolicy::Continue => {}
                    Some(StepStatus::Failed | StepStatus::Skipped) => {
                        blocked_by = Some(dep.clone());
                        break;
                    }
                    _ => ready = false,
                }
            }
            let Some(s) = run.steps.get_mut(step.id()) else {
                continue;
            };
            if let Some(dep) = blocked_by {
                s.status = StepStatus::Skipped;
                s.error = Some(format!("skipped: step `{dep}` did not complete"));
                acts.progress.push((
                    WORKFLOW_STEP_SKIPPED,
                    progress(StepStatus::Skipped, step.id(), s),
                ));
                continue;
            }
            if !ready {
                continue;
            }
            match start(i, false, s, &mut acts, &mut new_groups) {
                Some(()) => {
                    if s.status == StepStatus::Running {
                        acts.progress.push((
                            WORKFLOW_STEP_STARTED,
                            progress(StepStatus::Running, step.id(), s),
                        ));
                    }
                }
                None => {
                    acts.progress.push((
                        WORKFLOW_STEP_FAILED,
                        progress(StepStatus::Failed, step.id(), s),
                    ));
                    apply_failures(&[i], &mut run);
                    if run.failed_by.is_some() {
                        break;
                    }
                }
            }
        }
    }
    // 4. The end.
    if let Some(failed) = run.failed_by.clone() {
        let error = run
            .steps
            .get(&failed)
            .and_then(|s| s.error.clone())
            .unwrap_or_default();
        for (id, s) in run.steps.iter_mut() {
            match s.status {
                StepStatus::Pending => {
                    s.status = StepStatus::Skipped;
                    s.error = Some(format!("skipped: the workflow failed at step `{failed}`"));
                }
                StepStatus::Running => {
                    if let Some(g) = &s.group {
                        acts.cancel.push(sub_task(g));
                    }
                    s.status = StepStatus::Skipped;
                    s.error = Some(format!("canceled: the workflow failed at step `{failed}`"));
                    let _ = id;
                }
                _ => {}
            }
        }
        // Nothing more goes out for a failed workflow.
        acts.sends.clear();
        acts.finish = Some(Err(format!("step `{failed}` failed: {error}")));
    } else if run.is_finished() {
        acts.finish = Some(Ok(()));
    }
    for g in new_groups {
        rec.groups.insert(g.group_id.clone(), g);
    }
    rec.next_seq = rec.next_seq.max(next_seq);
    rec.workflow = Some(run);
    Ok(acts)
}

/// Does what a write decided: stores and sends the attempts' requests (and their timeouts),
/// publishes progress, cancels what a failed workflow left running, ends the task.
async fn act(
    task: &mut TaskContext<Value>,
    spec: &Spec,
    replies: &HashMap<String, Reply>,
    actions: Actions,
    prepared: Option<&HashMap<(usize, bool), Prepared>>,
) -> Result<()> {
    let bus = task.bus();
    let platform = task.runtime().platform.clone();
    let tenant = task.tenant_owned();
    let task_id = task.task_id().to_owned();
    // The attempts' records first (a reply finds its group), then their requests.
    let mut envelopes = Vec::new();
    for send in &actions.sends {
        let Some(Ok(out)) = prepared.and_then(|p| p.get(&(send.step, send.fallback))) else {
            continue;
        };
        let (record, pages) = DelegationGroup::paged(
            &send.group_id,
            &task_id,
            send.first_seq,
            [(out.event.as_str(), WORKFLOW_STEP_REPLIED)],
            group::PAGE_BYTES,
        );
        group::store(&platform, &tenant, &record, pages).await?;
        let id = sub_task(&send.group_id);
        let mut env =
            bus.envelope_with_id(id.clone(), out.topic, out.event.clone(), out.data.clone());
        if out.topic != Topic::ActionRequests {
            env.response_topic = Some(Topic::ActionResults);
        }
        env.correlation_id = Some(id.clone());
        env.response_event = Some(WORKFLOW_STEP_REPLIED.to_owned());
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
            let mut timer = bus.envelope(Topic::ActionResults, WORKFLOW_STEP_REPLIED.into(), data);
            timer.id = format!("{id}-timeout");
            timer.correlation_id = Some(id.clone());
            timer.tenant_id = Some(tenant.clone());
            timers::schedule(&platform, timer, after).await?;
        }
    }
    bus.publish_envelopes(envelopes).await?;
    for (event, mut p) in actions.progress {
        if let Some(send) = actions
            .sends
            .iter()
            .find(|s| spec.workflow.steps()[s.step].id() == p.step)
            && let Some(Ok(out)) = prepared.and_then(|m| m.get(&(send.step, send.fallback)))
        {
            p.calls = Some(out.calls.clone());
        }
        if let Err(e) = bus.publish(Topic::SystemEvents, event, p).await {
            tracing::debug!(error = %e, "could not publish workflow progress");
        }
    }
    for timer in actions.forget_timers {
        if let Err(e) = timers::cancel(&platform, &tenant, &format!("{timer}-timeout")).await {
            tracing::debug!(error = %e, "could not forget a step's timeout");
        }
    }
    for sub_task in actions.cancel {
        if let Err(e) = bus.cancel(sub_task).tenant_id(tenant.clone()).await {
            tracing::debug!(error = %e, "could not cancel a running step");
        }
    }
    match actions.finish {
        None => {}
        Some(Err(error)) => {
            tracing::info!(task_id = %task_id, %error, "workflow failed");
            task.fail(error).await?;
        }
        Some(Ok(())) => {
            let mut replies = replies.clone();
            let missing = load_replies(task, |_, s| {
                s.status == StepStatus::Completed
                    && s.group.as_ref().is_some_and(|g| !replies.contains_key(g))
            })
            .await?;
            replies.extend(missing);
            let output = output_of(task.record(), &spec.workflow, &replies);
            tracing::info!(task_id = %task_id, steps = output.steps.len(), "workflow completed");
            task.complete(output).await?;
        }
    }
    Ok(())
}

/// Every step's outcome.
fn output_of(
    rec: &TaskRecord,
    workflow: &Workflow,
    replies: &HashMap<String, Reply>,
) -> WorkflowOutput {
    let mut out = WorkflowOutput::new(&workflow.definition().goal);
    let Some(run) = &rec.workflow else {
        return out;
    };
    for (id, s) in &run.steps {
        let outcome = match s.status {
            StepStatus::Completed => {
                let output = s
                    .group
                    .as_ref()
                    .and_then(|g| replies.get(g))
                    .and_then(|r| r.output.clone().ok())
                    .unwrap_or(Value::Null);
                StepOutcome::completed(output, s.attempts)
            }
            status => StepOutcome::ended(status, s.error.clone().unwrap_or_default(), s.attempts),
        };
        out.steps.insert(id.clone(), outcome);
    }
    out
}
