//! The worker layer (`#[on_task]`, `#[on_result]`): asynchronous tasks with persisted state,
//! delegation to other agents (sequential or fan-out) and revision-checked fan-in.

mod delegation;
mod result;
mod task;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use soorma_common::{AgentKind, TaskRecord, Topic};

pub use delegation::Delegation;
pub use result::ResultContext;
pub use task::TaskContext;

use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::runtime::agent::AgentBuilder;
use crate::runtime::extract::HandlerInput;
use crate::runtime::handler::{
    Advertised, ErasedFn, Failure, Handler, HandlerFn, HandlerKind, HandlerOutput,
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
///     task.complete(task.data.clone()).await.map(drop)
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
/// State bucket holding sub-task records (keyed by sub-task id = correlation id).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn plan(mut task: TaskContext) -> soorma::Result<()> {
///     task.delegate("search.requested", "rust", "search.completed").await.map(drop)
/// }
///
/// let mut t = soorma::testing::TestPlatform::new();
/// # t.start(Worker::new("planner").use_registered_handlers(false)
/// #     .handler(Handler::on_task("plan.requested", plan))).await?;
/// t.client().bus().request("plan.requested", (), "plan.completed").await?;
/// let search = t.expect_event("search.requested", std::time::Duration::from_secs(1)).await?;
/// let sub_tasks = t.platform().state().keys(soorma::SUBTASKS_BUCKET, "default").await?;
/// assert_eq!(Some(&sub_tasks[0]), search.correlation_id.as_ref());
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
pub(crate) const STATE_CONCURRENCY: usize = 64;

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
    ///     task.delegate("search.requested", topic, "search.completed").await?;
    ///     Ok(())
    /// }
    ///
    /// let h = Handler::on_task("research.requested", research);
    /// assert_eq!(h.kind(), soorma::HandlerKind::Task);
    /// ```
    pub fn on_task<H, T, Args>(event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<TaskContext<T>, Args>,
        H::Output: HandlerOutput,
        T: DeserializeOwned + JsonSchema + Send + 'static,
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
        h.on_start = Some(ensure_timers);
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
        T: DeserializeOwned + JsonSchema + Send + 'static,
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
        h.on_start = Some(ensure_timers);
        h
    }
}

/// Fails the task started by `input`'s request (handler error or panic) exactly once.
fn fail_task(input: &HandlerInput, error: String) -> BoxFuture<'_, Result<bool>> {
    Box::pin(async move {
        tracing::warn!(error = %error, "task handler failed; failing the task");
        let mut task = TaskContext::from_request((), input);
        task.fail(error).await?;
        Ok(true)
    })
}

/// Human-input timers (of every tenant, those of worker instances that stopped included) fire
/// from here on: the platform's timer service runs (idempotent).
fn ensure_timers<'a>(platform: &'a Platform, _tenant: Option<&'a str>) -> BoxFuture<'a, ()> {
    Box::pin(crate::platform::timers::ensure_running(platform))
}
