//! [`ResultContext`]: a sub-task's result, recorded in the task that delegated it (fan-in).

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde_json::Value;
use soorma_common::events::HUMAN_INPUT;
use soorma_common::{ActionReply, ChunkResult, DelegationGroup, EventEnvelope, TaskRecord};

use super::task::TaskContext;
use super::{TASK_TIMEOUT_EVENT, group, subtask_key, task_key};
use crate::error::{Error, Result};
use crate::platform::fanin::Mark;
use crate::protocol::decode_payload;
use crate::runtime::context::context_accessors;
use crate::runtime::extract::{AgentRuntime, HandlerInput};
use crate::spi::state;

/// A sub-task's result, for `#[on_result]` handlers.
///
/// `data` holds the decoded result when the sub-task succeeded; `error` its error otherwise.
/// [`record_in_parent`](Self::record_in_parent) records it in the delegating task atomically.
///
/// ```
/// use soorma::prelude::*;
///
/// #[on_result("sentiment.completed", agent = "analyzer")]
/// #[on_result("entity.completed", agent = "analyzer")]
/// async fn collect(result: ResultContext) -> soorma::Result<()> {
///     let mut task = result.record_in_parent().await?;
///     if let Some(all) = task.group_results(result.group_id()).await? {
///         let results: Vec<_> = all.into_iter().map(|s| s.result).collect();
///         task.complete(results).await?;
///     }
///     Ok(())
/// }
/// ```
pub struct ResultContext<T = Value> {
    /// The decoded result, when the sub-task succeeded.
    pub data: Option<T>,
    /// The error, when it failed.
    pub error: Option<String>,
    raw: Option<Value>,
    group: OnceLock<Option<String>>,
    /// Which delivery of the result this is (1 on the first).
    attempt: u32,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

context_accessors!(ResultContext);

impl<T: fmt::Debug> fmt::Debug for ResultContext<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultContext")
            .field("event_type", &self.envelope.event_type)
            .field("data", &self.data)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned> ResultContext<T> {
    pub(crate) fn decode(input: &HandlerInput) -> Result<Self> {
        let (raw, error) = match ActionReply::outcome_of(&input.envelope.data) {
            Ok(value) => (Some(value), None),
            Err(error) => (None, Some(error)),
        };
        let data = raw
            .as_ref()
            .map(|v| decode_payload::<T>(&input.envelope.event_type, v))
            .transpose()?;
        Ok(Self {
            data,
            error,
            raw,
            group: OnceLock::new(),
            attempt: input.attempt,
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
        })
    }
}

impl<T> ResultContext<T> {
    /// The reply's result as it came (before decoding), when the sub-task succeeded.
    pub(in crate::layers::worker) fn raw(&self) -> Option<&Value> {
        self.raw.as_ref()
    }

    /// Whether the sub-task succeeded.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let topic = task.data.clone();
    /// #     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> {
    /// #     if req.data.is_empty() { Err(ToolError::new("empty query")) } else { Ok(format!("results for {}", req.data)) }
    /// # }
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?;
    ///     if !result.is_success() {
    ///         task.fail("the search failed").await?;
    ///         return Ok(());
    ///     }
    ///     task.complete(result.data).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let outcome = client.invoke::<String>("research.requested", "", "research.completed").await;
    /// assert!(matches!(outcome, Err(Error::Remote { message, .. }) if message == "the search failed"));
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn is_success(&self) -> bool {
        self.error.is_none()
    }

    /// The sub-task id (this result's correlation id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let topic = task.data.clone();
    /// #     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> { Ok(format!("results for {}", req.data)) }
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?;
    ///     task.complete(result.sub_task_id()).await?;
    ///     Ok(())
    /// }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// # t.start(Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search))).await?;
    /// # t.start(Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect))).await?;
    /// let id: Option<String> = t.client().invoke("research.requested", "rust", "research.completed").await?;
    /// assert_eq!(id, t.events_of_type("search.requested")[0].correlation_id);
    /// # t.shutdown().await }
    /// ```
    pub fn sub_task_id(&self) -> Option<&str> {
        self.envelope.correlation_id.as_deref()
    }

    /// The fan-out group of the sub-task, known after
    /// [`record_in_parent`](Self::record_in_parent) (every delegation, sequential or parallel, forms a group).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let d = Delegation::new("search.requested", &task.data, "search.completed");
    /// #     task.delegate_parallel([d]).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> { Ok(format!("results for {}", req.data)) }
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?; // now `group_id()` is known
    ///     if let Some(all) = task.group_results(result.group_id()).await? {
    ///         task.complete(all.len()).await?;
    ///     }
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect)).start(&platform).await?;
    /// let n: usize = platform.client("docs").invoke("research.requested", "rust", "research.completed").await?;
    /// assert_eq!(n, 1);
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn group_id(&self) -> Option<&str> {
        self.group.get().and_then(|g| g.as_deref())
    }

    /// The sub-task this result answers: its group, found under the result's tenant, and its
    /// index there. The correlation id is `<group id>-<index>`; the index must be one of the
    /// group's and the result's event the member's reply event (or, for a question to a
    /// person, the timeout's).
    async fn sub_task(&self) -> Result<(Arc<DelegationGroup>, u32)> {
        let sub_task_id = self
            .sub_task_id()
            .ok_or_else(|| Error::UnknownSubTask("<result without correlation_id>".into()))?;
        let unknown = || Error::UnknownSubTask(sub_task_id.to_owned());
        let (group_id, index) = group::parse_sub_task_id(sub_task_id).ok_or_else(unknown)?;
        let platform = &self.runtime.platform;
        let tenant = self.envelope.tenant();
        let group = group::load(platform, tenant, group_id, unknown).await?;
        let member = group::member(platform, tenant, &group, index)
            .await?
            .ok_or_else(unknown)?;
        let event = &self.envelope.event_type;
        let timed_out = event == TASK_TIMEOUT_EVENT && member.event_type == HUMAN_INPUT;
        if *event != member.response_event && !timed_out {
            return Err(Error::UnexpectedReply {
                sub_task: sub_task_id.to_owned(),
                event: event.clone(),
                expected: member.response_event,
            });
        }
        let _ = self.group.set(Some(group.group_id.clone()));
        Ok((group, index))
    }

    /// Records this result in the task that delegated it and returns that task.
    ///
    /// The result is written with the others arriving at the same time (a results chunk),
    /// then the parent's group bitset is updated with a revision-checked, retried write that
    /// lists the chunk, so concurrent results are never lost; the first result of a sub-task
    /// wins (a duplicate delivery changes nothing). Use
    /// [`TaskContext::group_results`] on the returned task to see whether the fan-in is done.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let topic = task.data.clone();
    /// #     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> { Ok(format!("results for {}", req.data)) }
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.record_in_parent().await?;
    ///     task.complete(result.data).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect)).start(&platform).await?;
    /// let r: String = platform.client("docs").invoke("research.requested", "rust", "research.completed").await?;
    /// assert_eq!(r, "results for rust");
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn record_in_parent(&self) -> Result<TaskContext<Value>> {
        let recorded = self.record().await?;
        let stored = Arc::unwrap_or_clone(recorded.task);
        let group = self.group_id().unwrap_or_default().to_owned();
        // The result that completed the group sees it complete; so does a redelivery of that
        // result (its first delivery may have died between recording and completing the
        // task), and only of that one: others would run what follows a second time.
        Ok(TaskContext::restored(
            stored.value,
            stored.revision,
            self.envelope.clone(),
            self.runtime.clone(),
        )
        .gated_by(group, recorded.completes))
    }

    /// Records the result; returns the parent task as stored (shared with the other results
    /// of the same write, not copied) and whether this result completed its group (see
    /// [`Recorded`]).
    pub(crate) async fn record(&self) -> Result<Recorded> {
        let (group, index) = self.sub_task().await?;
        let seq = group
            .first_seq
            .checked_add(index)
            .ok_or_else(|| Error::UnknownSubTask(group.sub_task_id(index)))?;
        let result = match &self.error {
            None => ChunkResult::completed(seq, self.raw.clone().unwrap_or(Value::Null)),
            Some(e) => ChunkResult::failed(seq, e.clone()),
        };
        let platform = &self.runtime.platform;
        let tenant = self.envelope.tenant();
        // Coalesced with concurrent results: one results chunk and one revision-checked
        // update of the parent per batch; the first result of a sub-task wins.
        let mark = Mark {
            group: subtask_key(tenant, &group.group_id),
            result,
            event_id: self.envelope.id.clone(),
        };
        let marked = platform
            .fan_in()
            .mark(
                platform.state().clone(),
                task_key(tenant, &group.parent_task_id),
                mark,
            )
            .await?;
        // A redelivery of the result that completed its group in an earlier delivery (a
        // group recorded before `completed_by` existed: any redelivered result of it).
        let completed_before = self.attempt > 1
            && marked
                .task
                .value
                .groups
                .get(&group.group_id)
                .is_some_and(|g| completed_by(g, &self.envelope.id));
        Ok(Recorded {
            completes: marked.completed_group || completed_before,
            completed_now: marked.completed_group,
            task: marked.task,
        })
    }

    /// The task that delegated this sub-task, when this result is the one that completed its
    /// group (what follows the group is this result's to run): `None` for any other result,
    /// or while the group waits for more.
    pub(crate) async fn parent_if_completed_by_this(&self) -> Result<Option<TaskContext<Value>>> {
        let (group, _) = self.sub_task().await?;
        let task = self.parent().await?;
        let completed_by_this = task
            .record()
            .groups
            .get(&group.group_id)
            .is_some_and(|g| completed_by(g, &self.envelope.id));
        Ok(completed_by_this.then_some(task))
    }

    /// Loads the task that delegated this sub-task without recording anything.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let topic = task.data.clone();
    /// #     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> { Ok(format!("results for {}", req.data)) }
    ///
    /// async fn peek(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let mut task = result.parent().await?;
    ///     // Nothing recorded: the delegation still waits for this result.
    ///     let waiting = task.group_results(None).await?.is_none();
    ///     task.complete(waiting).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", peek)).start(&platform).await?;
    /// let waiting: bool = platform.client("docs").invoke("research.requested", "rust", "research.completed").await?;
    /// assert!(waiting);
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn parent(&self) -> Result<TaskContext<Value>> {
        let (group, _) = self.sub_task().await?;
        let store = &**self.runtime.platform.state();
        let stored = state::load::<TaskRecord>(
            store,
            "task",
            &task_key(self.envelope.tenant(), &group.parent_task_id),
        )
        .await?
        .ok_or_else(|| Error::TaskNotFound(group.parent_task_id.clone()))?;
        Ok(TaskContext::restored(
            stored.value,
            stored.revision,
            self.envelope.clone(),
            self.runtime.clone(),
        ))
    }
}

/// A result recorded in its parent task ([`ResultContext::record`]).
pub(crate) struct Recorded {
    /// The parent task as stored after the write.
    pub(crate) task: Arc<state::Versioned<TaskRecord>>,
    /// Whether this write completed the result's group.
    pub(crate) completed_now: bool,
    /// Whether this result is the one that completed its group: now, or in an earlier
    /// delivery of it (then it runs what follows the group again: its first run was cut short).
    pub(crate) completes: bool,
}

/// Whether `group` is complete and the result event `event_id` completed it (for a group
/// recorded before `completed_by` existed: any of its results).
fn completed_by(group: &soorma_common::SubTaskGroup, event_id: &str) -> bool {
    group.is_complete()
        && group
            .completed_by
            .as_deref()
            .is_none_or(|by| by == event_id)
}
