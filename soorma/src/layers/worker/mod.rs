//! The worker layer (`#[on_task]`, `#[on_result]`): asynchronous tasks with persisted state,
//! delegation to other agents (sequential or fan-out) and revision-checked fan-in.

mod delegation;
mod fan_in;
pub(crate) mod group;
mod result;
mod task;
pub mod workflow;

use std::collections::BTreeSet;

use std::sync::Arc;

use soorma_common::events::TASK_DEADLINE;
use soorma_common::{AgentKind, TaskRecord, Topic};

pub use delegation::Delegation;
pub use fan_in::{FanInHandler, FanInOutput, FromReplies, FromReply, SubTaskFailed};
pub use result::ResultContext;
pub use task::{Delegated, StateMap, TaskContext, TaskState};

use crate::error::{Error, Result};
use crate::platform::timers;
use crate::protocol::request::Request;
use crate::runtime::agent::AgentBuilder;
use crate::runtime::cancel::request_id;
use crate::runtime::extract::{Extensions, HandlerInput};
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerFn, HandlerKind, HandlerOutput, HandlerPayload,
    extractor_failure, payload_call, schema_of,
};
use crate::spi::state::{self, Change, StateKey};
use crate::util::BoxFuture;

/// State bucket holding task records.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn echo(mut task: TaskContext<String>) -> soorma::Result<()> {
///     task.complete(task.data.clone()).await?;
///     Ok(())
/// }
///
/// let platform = Platform::embedded();
/// # let worker = Worker::new("echo").use_registered_handlers(false)
/// #     .handler(Handler::on_task("echo.requested", echo)).start(&platform).await?;
/// platform.client("docs").invoke::<String>("echo.requested", "hi", "echo.completed").await?;
/// let tasks = platform.state().keys(soorma::TASKS_BUCKET, "default").await?;
/// assert_eq!(tasks.len(), 1);
/// # worker.shutdown().await?; Ok(()) }
/// ```
pub const TASKS_BUCKET: &str = "tasks";
/// State bucket holding what tasks delegated: a record per delegation group (key: the group
/// id; the sub-task ids, the correlation ids of the requests, are `<group id>-<index>`), pages
/// of very large groups (`<group id>-p<n>`) and the chunks of results the fan-in recorded
/// (`<group id>-r<id>`, and the merges of them, `-m<level><id>` and `-f<id>`; listed in the
/// parent task), and a task's result too large to keep in its record (`<task id>-out<id>`,
/// [`TaskRecord::result_apart`](crate::TaskRecord::result_apart)). See
/// [`DelegationGroup`](crate::DelegationGroup) and [`ResultChunk`](crate::ResultChunk).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn plan(mut task: TaskContext) -> soorma::Result<String> {
///     // Nobody serves `search.requested` here: this test plays the searcher.
///     let search = Delegation::new("search.requested", &"rust", "search.completed").skip_consumer_check();
///     task.delegate_with(search).await
/// }
/// # async fn searched(_: ResultContext) {}
///
/// let mut t = soorma::testing::TestPlatform::new();
/// # t.start(Worker::new("planner").use_registered_handlers(false)
/// #     .handler(Handler::on_task("plan.requested", plan))
/// #     .handler(Handler::on_result("search.completed", searched))).await?;
/// t.client().bus().request("plan.requested", (), "plan.completed").await?;
/// let search = t.expect_event("search.requested", std::time::Duration::from_secs(1)).await?;
/// let groups = t.platform().state().keys(soorma::SUBTASKS_BUCKET, "default").await?;
/// assert_eq!(search.correlation_id, Some(format!("{}-0", groups[0])));
/// # t.shutdown().await }
/// ```
pub const SUBTASKS_BUCKET: &str = "subtasks";

pub(crate) fn task_key(tenant: &str, task_id: &str) -> StateKey {
    StateKey::new(TASKS_BUCKET, tenant, task_id)
}

pub(crate) fn subtask_key(tenant: &str, sub_task_id: &str) -> StateKey {
    StateKey::new(SUBTASKS_BUCKET, tenant, sub_task_id)
}

/// How many state reads/writes or publishes one fan-out keeps in flight.
pub(crate) const STATE_CONCURRENCY: usize = 256;

/// A revision-checked update of the task at `key` (see [`state::update_with`]).
pub(crate) async fn update_task<R>(
    store: &dyn crate::spi::state::StateStore,
    key: &StateKey,
    f: impl FnMut(&mut TaskRecord) -> Result<Change<R>>,
) -> Result<(R, state::Versioned<TaskRecord>)> {
    state::update_with(
        store,
        "task",
        key,
        || Error::TaskNotFound(key.key.clone()),
        f,
    )
    .await
}

pub(crate) fn sub_task_id(group_id: &str, index: u32) -> String {
    format!("{group_id}-{index}")
}

/// The event type of the error result a worker gets when a person did not answer a
/// [`TaskContext::request_human_input`] question in time.
pub const TASK_TIMEOUT_EVENT: &str = soorma_common::events::TASK_TIMEOUT;

/// Asynchronous task workers (`#[on_task]`, `#[on_result]`).
///
/// ```
/// let worker = soorma::Worker::new("researcher").version("0.3.0");
/// # let _ = worker;
/// ```
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A builder for a worker named `name`.
    ///
    /// ```
    /// let worker = soorma::Worker::new("researcher");
    /// assert_eq!(worker.definition().kind, soorma::AgentKind::Worker);
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Worker)
    }
}

impl Handler {
    /// A worker task handler for requests of type `event` on `action-requests`.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     let topic = task.data.clone();
    ///     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_task("research.requested", research);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Task);
    /// ```
    pub fn on_task<H, T, S, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<TaskContext<T, S>, Args>,
        H::Output: HandlerOutput,
        T: HandlerPayload,
        S: TaskState,
    {
        let call = payload_call(handler, TaskContext::from_request);
        let mut h = Handler::new(
            HandlerKind::Task,
            Topic::ActionRequests,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        );
        h.advertised = Advertised::Capability;
        h.on_failure = Some(fail_task);
        h.on_start = Some(timers::ensure_running);
        h.on_cancel = Some(cancel_task);
        h.assemble = Some(assemble_worker);
        h
    }

    /// A worker task handler for the typed request `R`: the event is `R::EVENT`, and the task
    /// replies with `R::Reply` (from its `#[on_fan_in]` handler, or `task.complete(..)`).
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Research { topic: String }
    /// impl Request for Research { const EVENT: &'static str = "research.requested"; type Reply = String; }
    ///
    /// #[derive(Default, Serialize, Deserialize)]
    /// struct Notes { attempts: u32 }
    ///
    /// async fn research(mut task: TaskContext<Research, Notes>) -> soorma::Result<()> {
    ///     task.state_mut().attempts += 1;
    ///     let topic = task.data.topic.clone();
    ///     task.complete(format!("nothing yet on {topic}")).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::task(research);
    /// assert_eq!(h.event(), "research.requested");
    /// ```
    pub fn task<H, R, S, Args>(handler: H) -> Self
    where
        H: HandlerFn<TaskContext<R, S>, Args>,
        H::Output: HandlerOutput,
        R: Request,
        S: TaskState,
    {
        let mut h = Self::on_task(R::EVENT, handler);
        h.reply_event = Some(R::reply_event());
        h
    }

    /// A sub-task result handler for replies of type `event` on `action-results`.
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?;
    ///     task.complete(result.data).await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_result("search.completed", collect);
    /// assert_eq!(h.topic(), Topic::ActionResults);
    /// ```
    pub fn on_result<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<ResultContext<T>, Args>,
        H::Output: HandlerOutput,
        T: HandlerPayload,
    {
        let call: ErasedFn = Arc::new(move |input: HandlerInput| {
            let handler = handler.clone();
            Box::pin(async move {
                let ctx = ResultContext::<T>::decode(&input).map_err(Failure::Decode)?;
                let fut = handler.call(ctx, &input).map_err(extractor_failure)?;
                fut.await.into_outcome().map(|()| None)
            })
        });
        let mut h = Handler::new(
            HandlerKind::Result,
            Topic::ActionResults,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        );
        h.on_start = Some(timers::ensure_running);
        h.assemble = Some(assemble_worker);
        h
    }
}

/// Cancels the worker task a cancel request names (see [`TaskContext::cancel`]).
fn cancel_task(input: &HandlerInput) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let Some(task_id) = request_id(&input.envelope) else {
            return;
        };
        let tenant = input.envelope.tenant();
        if let Err(e) = TaskContext::cancel(input, tenant, task_id).await {
            tracing::warn!(error = %e, task_id = %task_id, "could not cancel the task");
        }
    })
}

/// Fails the task started by `input`'s request (handler error or panic) exactly once.
fn fail_task(input: &HandlerInput, error: String) -> BoxFuture<'_, Result<bool>> {
    Box::pin(async move {
        tracing::warn!(error = %error, "task handler failed; failing the task");
        let mut task = TaskContext::<(), StateMap>::from_request((), input);
        task.keep_stored_state = true;
        task.fail(error).await?;
        Ok(true)
    })
}

/// What a worker's handlers need to know about each other: which replies it waits for.
#[derive(Debug, Default, Clone)]
pub(crate) struct WorkerWiring {
    /// The reply events of its `#[on_result]` handlers.
    pub(crate) results: BTreeSet<String>,
    /// The keys of its `#[on_fan_in]` handlers ([`RequestSet::key`](crate::protocol::request::RequestSet::key)).
    pub(crate) fan_ins: BTreeSet<String>,
}

impl WorkerWiring {
    /// Whether a reply `event` of a string delegation has an `#[on_result]` handler.
    pub(crate) fn handles_result(&self, event: &str) -> bool {
        self.results.contains(event)
    }
}

/// The worker layer's assembly of an agent's handlers: its fan-ins become routers, and what
/// it waits for is recorded for the delegation checks.
fn assemble_worker(
    agent: &str,
    handlers: &mut Vec<Handler>,
    wiring: &mut Extensions,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut worker = WorkerWiring {
        results: handlers
            .iter()
            .filter(|h| h.kind == HandlerKind::Result)
            .map(|h| h.event.clone())
            .collect(),
        fan_ins: BTreeSet::new(),
    };
    fan_in::assemble(handlers, &mut worker, &mut problems);
    let has_tasks = handlers.iter().any(|h| h.kind == HandlerKind::Task);
    let deadline_handled = handlers
        .iter()
        .any(|h| h.topic == Topic::ActionResults && h.event == TASK_DEADLINE);
    if has_tasks && !deadline_handled {
        handlers.push(deadline_handler());
    }
    if handlers.iter().any(workflow::starts_workflows) {
        match workflow::unusable_name(agent) {
            Some(problem) => problems.push(problem),
            None => handlers.push(workflow::step_handler(agent)),
        }
    }
    wiring.insert(worker);
    problems
}

/// Fails a task whose deadline ([`TaskContext::fail_after`]) passed before it ended.
fn deadline_handler() -> Handler {
    let call: ErasedFn = Arc::new(|input: HandlerInput| Box::pin(enforce_deadline(input)));
    let mut h = Handler::new(
        HandlerKind::Result,
        Topic::ActionResults,
        TASK_DEADLINE.to_owned(),
        schema_of::<serde_json::Value>,
        Vec::new(),
        call,
    );
    h.advertised = Advertised::Hidden;
    h.on_start = Some(timers::ensure_running);
    h
}

async fn enforce_deadline(input: HandlerInput) -> crate::runtime::handler::HandlerOutcome {
    let retryable = |e: crate::error::Error| Failure::Handler {
        retryable: e.is_retryable(),
        message: e.to_string(),
    };
    let Some(task_id) = input.envelope.correlation_id.clone() else {
        return Ok(None);
    };
    let tenant = input.envelope.tenant().to_owned();
    let mut task = match TaskContext::load(&input, &tenant, &task_id).await {
        Ok(task) => task,
        Err(Error::TaskNotFound(_)) => return Ok(None),
        Err(e) => return Err(retryable(e)),
    };
    let Some(deadline) = task.record().deadline_at.clone() else {
        return Ok(None);
    };
    if task.status().is_terminal() {
        // Ended already: by this timer's earlier delivery, whose reply may not have gone out
        // (a crash or a failed publish after the write), then it goes out now.
        task.resend_owed_reply().await.map_err(retryable)?;
        return Ok(None);
    }
    // The deadline was moved later (its own timer fires then).
    if deadline > crate::util::now_rfc3339() {
        return Ok(None);
    }
    let pending = task.pending_sub_tasks().await.map_err(retryable)?;
    let reason = if pending.is_empty() {
        format!("the task's deadline ({deadline}) passed before it completed")
    } else {
        let waiting: Vec<String> = pending
            .iter()
            .map(|s| {
                format!(
                    "`{}` (sub-task {}, reply `{}`)",
                    s.event_type, s.sub_task_id, s.response_event
                )
            })
            .collect();
        format!(
            "the task's deadline ({deadline}) passed; still waiting for {}",
            waiting.join(", ")
        )
    };
    tracing::warn!(task_id = %task_id, %reason, "task deadline passed");
    task.fail(reason).await.map_err(retryable)?;
    Ok(None)
}
