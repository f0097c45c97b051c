//! [`TaskContext`]: a worker's task — persisted state, delegation, fan-out and completion.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use soorma_common::events::{HUMAN_INPUT, TASK_DEADLINE, TASK_PROGRESS};
use soorma_common::{
    ActionReply, DelegationGroup, EventEnvelope, SubTaskGroup, SubTaskInfo, TaskProgress,
    TaskRecord, TaskStatus, Topic,
};

use super::delegation::Delegation;
use super::{
    STATE_CONCURRENCY, TASK_TIMEOUT_EVENT, WorkerWiring, group, sub_task_id, subtask_key, task_key,
    update_task,
};
use crate::error::{Error, Result};
use crate::platform::timers;
use crate::protocol::decode_payload;
use crate::protocol::reply::{ReplyRoute, publish_reply};
use crate::protocol::request::{Request, RequestSet};
use crate::runtime::context::context_accessors;
use crate::runtime::extract::{AgentRuntime, HandlerInput};
use crate::spi::state::{self, Change, Revision, StateKey};
use crate::util::{concurrently, now_rfc3339, rfc3339_after};

/// A task's result over this many bytes (as JSON) is stored in a record of its own
/// ([`TaskRecord::result_apart`]), not in the task's record beside the request.
const RESULT_KEPT_APART_BYTES: usize = 256 * 1024;
/// A task's record with its result kept in it stays under this many bytes (as JSON); a
/// result that would take it past is stored apart.
const TASK_RECORD_BUDGET_BYTES: usize = 768 * 1024;

/// A worker's task, for `#[on_task]` handlers: persisted state, delegation and completion.
///
/// The task's id is the id of the request that started it. `delegate` and `delegate_parallel`
/// save the task before publishing, so results can be recorded by any instance of the worker.
/// Sub-task ids are derived from the task and the handled event, so a redelivered event
/// re-delegates the same sub-tasks rather than new ones. `complete` and `fail` are
/// revision-checked: a task completes exactly once however many handlers try.
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
/// struct Text { text: String }
///
/// #[on_task("analyze.requested", agent = "analyzer")]
/// async fn analyze(mut task: TaskContext<Text>) -> soorma::Result<()> {
///     let text = serde_json::json!({"text": task.data.text});
///     task.delegate_parallel([
///         Delegation::new("sentiment.analyze", &text, "sentiment.completed"),
///         Delegation::new("entity.extract", &text, "entity.completed"),
///     ])
///     .await?;
///     Ok(())
/// }
/// ```
pub struct TaskContext<T = Value, S = StateMap> {
    /// The task's request payload.
    pub data: T,
    /// The handler-owned state saved with the task.
    state: S,
    /// Keep the stored state when persisting (a context made only to fail the task).
    pub(super) keep_stored_state: bool,
    /// Whether this context, made for a request, found its task stored already (a
    /// redelivered request): see [`write_state`].
    replayed: bool,
    record: TaskRecord,
    revision: Option<Revision>,
    /// Delegations made through this context (part of sub-task ids).
    delegated: u32,
    /// For a context restored by a result: the result's group, and whether this result may
    /// see it complete (see [`group_results`](Self::group_results)).
    fan_in_gate: Option<(String, bool)>,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

/// Writes `state` (when there is one to write) into `rec` as stored by the handler of the
/// event `event`; but a context that found its task stored already (`replayed`: a redelivered
/// request, whose handler started from a fresh state) leaves the stored state alone when a
/// handler of another event stored it since: it would undo what that handler recorded.
fn write_state(rec: &mut TaskRecord, state: Option<&StateMap>, event: &str, replayed: bool) {
    let Some(state) = state else { return };
    if replayed && rec.state_by.as_deref().is_some_and(|by| by != event) {
        return;
    }
    rec.state.clone_from(state);
    rec.state_by = Some(event.to_owned());
}

/// The error for a request whose task id is the task of another agent: two workers take the
/// same request event as a task (or a request reused another one's id). A request is one
/// agent's task: neither touches the other's.
fn another_agents(rec: &TaskRecord, agent: &str) -> Result<()> {
    if rec.agent == agent {
        return Ok(());
    }
    Err(Error::Handler(format!(
        "task `{}` is agent `{}`'s: `{agent}` and `{}` both take `{}` requests as tasks (or a request reused the id of another); a request is one agent's task",
        rec.task_id, rec.agent, rec.agent, rec.event_type
    )))
}

/// The default task state: a string-keyed map ([`TaskContext::set_state`],
/// [`TaskContext::state_value`]). Use your own type for typed state: `TaskContext<T, S>`.
pub type StateMap = Map<String, Value>;

/// What can be a task's typed state: saved with the task as a JSON object (a struct or a
/// map), starting from `Default`.
///
/// ```
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Notes { topic: String, attempts: u32 }
///
/// fn is_state<S: soorma::TaskState>() {}
/// is_state::<Notes>();
/// is_state::<soorma::StateMap>();
/// ```
pub trait TaskState: Serialize + DeserializeOwned + Default + Send + Sync + 'static {}

impl<S: Serialize + DeserializeOwned + Default + Send + Sync + 'static> TaskState for S {}

/// A delegation made: the sub-tasks are saved and their requests published. Return it from a
/// handler that fans out (its replies come to the `#[on_fan_in]` handler).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the replies arrive later, at the fan-in handler"]
pub struct Delegated {
    group_id: String,
}

impl Delegated {
    /// The delegation group's id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }
}

context_accessors!(TaskContext, S);

impl<T: fmt::Debug, S> fmt::Debug for TaskContext<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("task_id", &self.record.task_id)
            .field("status", &self.record.status)
            .field("data", &self.data)
            .field("groups", &self.record.groups.len())
            .finish_non_exhaustive()
    }
}

impl<T, S: TaskState> TaskContext<T, S> {
    /// A new task for the request being handled.
    pub(crate) fn from_request(data: T, input: &HandlerInput) -> Self {
        let env = &input.envelope;
        let mut record = TaskRecord::new(&env.id, &*input.runtime.name, &env.event_type);
        record.data = env.data.clone();
        record.correlation_id = Some(env.correlation_id.clone().unwrap_or_else(|| env.id.clone()));
        record.response_event.clone_from(&env.response_event);
        record.response_topic = env.response_event.as_ref().map(|_| env.reply_topic());
        record.tenant_id.clone_from(&env.tenant_id);
        record.user_id.clone_from(&env.user_id);
        record.session_id.clone_from(&env.session_id);
        record.plan_id.clone_from(&env.plan_id);
        record.goal_id.clone_from(&env.goal_id);
        record.trace_id = Some(env.trace_id.clone().unwrap_or_else(|| env.id.clone()));
        Self {
            data,
            state: S::default(),
            keep_stored_state: false,
            replayed: false,
            record,
            revision: None,
            delegated: 0,
            fan_in_gate: None,
            envelope: env.clone(),
            runtime: input.runtime.clone(),
        }
    }

    /// The state as stored with the task: a JSON object.
    fn state_object(&self) -> Result<StateMap> {
        match serde_json::to_value(&self.state).map_err(|e| Error::serialize("task state", e))? {
            Value::Object(map) => Ok(map),
            other => Err(Error::InvalidArgument(format!(
                "the state of task `{}` ({}) must serialize to a JSON object (a struct or a map), not `{other}`",
                self.record.task_id,
                std::any::type_name::<S>()
            ))),
        }
    }

    /// The state to write with the next update: the typed state as an object, or `None` for
    /// a context that keeps the stored state (one made only to fail the task).
    fn state_to_store(&mut self) -> Result<Option<StateMap>> {
        if self.keep_stored_state {
            return Ok(None);
        }
        let state = self.state_object()?;
        self.record.state.clone_from(&state);
        Ok(Some(state))
    }

    fn store(&self) -> &dyn crate::spi::state::StateStore {
        &**self.runtime.platform.state()
    }

    pub(super) fn key(&self) -> StateKey {
        task_key(
            self.record
                .tenant_id
                .as_deref()
                .unwrap_or(soorma_common::DEFAULT_TENANT),
            &self.record.task_id,
        )
    }

    /// The task id (the id of the request that started the task).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn which(mut task: TaskContext) -> soorma::Result<()> {
    ///     let id = task.task_id().to_owned();
    ///     task.complete(id).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("tasks").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("which.requested", which)).start(&platform).await?;
    /// let reply = platform.client("docs").request("which.requested", (), "which.completed").await?;
    /// assert_eq!(reply.reply.result, Some(reply.reply.request_id.clone().into()));
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn task_id(&self) -> &str {
        &self.record.task_id
    }

    /// The task as persisted (or as it will be on the next save).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn describe(mut task: TaskContext) -> soorma::Result<()> {
    ///     let rec = task.record();
    ///     let summary = format!("{} handles {}", rec.agent, rec.event_type);
    ///     task.complete(summary).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("describer").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("describe.requested", describe)).start(&platform).await?;
    /// let s: String = platform.client("docs").invoke("describe.requested", (), "describe.completed").await?;
    /// assert_eq!(s, "describer handles describe.requested");
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn record(&self) -> &TaskRecord {
        &self.record
    }

    /// Where the task stands.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// use soorma::TaskStatus;
    ///
    /// async fn report(mut task: TaskContext) -> soorma::Result<()> {
    ///     let status = task.status();
    ///     task.complete(status).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("reporter").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("status.requested", report)).start(&platform).await?;
    /// let s: TaskStatus = platform.client("docs").invoke("status.requested", (), "status.completed").await?;
    /// assert_eq!(s, TaskStatus::Running); // while the handler runs
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn status(&self) -> TaskStatus {
        self.record.status
    }

    /// The handler-owned state saved with the task.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn keys(mut task: TaskContext) -> soorma::Result<()> {
    ///     task.set_state("step", "fetch")?;
    ///     let keys: Vec<String> = task.state().keys().cloned().collect();
    ///     task.complete(keys).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("stateful").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("keys.requested", keys)).start(&platform).await?;
    /// let k: Vec<String> = platform.client("docs").invoke("keys.requested", (), "keys.completed").await?;
    /// assert_eq!(k, ["step"]);
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The state, to change (saved by the next `save`, delegation or completion).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Progress { pages: u32 }
    ///
    /// async fn crawl(mut task: TaskContext<String, Progress>) -> soorma::Result<()> {
    ///     task.state_mut().pages += 3;
    ///     let pages = task.state().pages;
    ///     task.complete(pages).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("crawler").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("crawl.requested", crawl)).start(&platform).await?;
    /// let pages: u32 = platform.client("docs").invoke("crawl.requested", "rust", "crawl.completed").await?;
    /// assert_eq!(pages, 3);
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn state_mut(&mut self) -> &mut S {
        &mut self.state
    }

    /// The delegation group `group_id` (counts and which sub-tasks finished).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// async fn fan_out(mut task: TaskContext) -> soorma::Result<bool> {
    ///     let group = task.delegate_parallel([
    ///         Delegation::new("sentiment.analyze", &task.data, "sentiment.completed"),
    ///         Delegation::new("entity.extract", &task.data, "entity.completed"),
    ///     ]).await?;
    ///     let size = task.group(&group).map(|g| g.size);
    ///     task.complete(size).await
    /// }
    /// # async fn analyze(_: Invocation) -> Result<(), ToolError> { Ok(()) }
    /// # async fn collect(_: ResultContext) {}
    ///
    /// # let platform = Platform::embedded();
    /// # let tools = Tool::new("analyzers").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("sentiment.analyze", analyze))
    /// #     .handler(Handler::on_invoke("entity.extract", analyze)).start(&platform).await?;
    /// # let worker = Worker::new("fan").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("fan.requested", fan_out))
    /// #     .handler(Handler::on_result("sentiment.completed", collect))
    /// #     .handler(Handler::on_result("entity.completed", collect)).start(&platform).await?;
    /// let size: Option<u32> = platform.client("docs").invoke("fan.requested", "hi", "fan.completed").await?;
    /// assert_eq!(size, Some(2));
    /// # worker.shutdown().await?; tools.shutdown().await?; Ok(()) }
    /// ```
    pub fn group(&self, group_id: &str) -> Option<&SubTaskGroup> {
        self.record.groups.get(group_id)
    }

    /// The sub-tasks of `groups`, in delegation order: with their results when
    /// `with_results`, else all as pending (see [`group::sub_tasks`]).
    async fn load_members(
        &self,
        groups: &[&SubTaskGroup],
        with_results: bool,
    ) -> Result<Vec<SubTaskInfo>> {
        let tenant = self.tenant_owned();
        let platform = self.runtime.platform.clone();
        let groups: Vec<SubTaskGroup> = groups.iter().map(|g| (*g).clone()).collect();
        let members = concurrently(groups, STATE_CONCURRENCY, move |g: SubTaskGroup| {
            let (platform, tenant) = (platform.clone(), tenant.clone());
            async move { group::sub_tasks(&platform, &tenant, &g, with_results).await }
        })
        .await?;
        let mut out: Vec<SubTaskInfo> = members.into_iter().flatten().collect();
        out.sort_by_key(|s| s.seq);
        Ok(out)
    }

    /// The sub-tasks still without a result, in delegation order (no result is read: the
    /// group records and the task's bits say which).
    pub(crate) async fn pending_sub_tasks(&self) -> Result<Vec<SubTaskInfo>> {
        let open: Vec<&SubTaskGroup> = self
            .record
            .groups
            .values()
            .filter(|g| !g.is_complete())
            .collect();
        let mut members = self.load_members(&open, false).await?;
        members.retain(|m| {
            !self
                .record
                .groups
                .get(&m.group_id)
                .is_some_and(|g| g.is_finished(m.seq))
        });
        Ok(members)
    }

    /// Every sub-task of the task (with results where they arrived), in delegation order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn research(mut task: TaskContext) -> soorma::Result<bool> {
    ///     task.delegate_with(Delegation::new("search.requested", &"rust", "search.completed")).await?;
    ///     task.delegate_with(Delegation::new("translate.requested", &"rust", "translate.completed")).await?;
    ///     let events: Vec<String> = task.sub_tasks().await?.into_iter().map(|s| s.event_type).collect();
    ///     task.complete(events).await
    /// }
    /// # async fn serve(_: Invocation) -> Result<(), ToolError> { Ok(()) }
    /// # async fn collect(_: ResultContext) {}
    ///
    /// # let platform = Platform::embedded();
    /// # let tools = Tool::new("tools").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", serve))
    /// #     .handler(Handler::on_invoke("translate.requested", serve)).start(&platform).await?;
    /// # let worker = Worker::new("research").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect))
    /// #     .handler(Handler::on_result("translate.completed", collect)).start(&platform).await?;
    /// let e: Vec<String> = platform.client("docs").invoke("research.requested", (), "research.completed").await?;
    /// assert_eq!(e, ["search.requested", "translate.requested"]);
    /// # worker.shutdown().await?; tools.shutdown().await?; Ok(()) }
    /// ```
    pub async fn sub_tasks(&self) -> Result<Vec<SubTaskInfo>> {
        let groups: Vec<&SubTaskGroup> = self.record.groups.values().collect();
        self.load_members(&groups, true).await
    }

    /// The sub-tasks of a delegation group (or of every group for `None`), in delegation
    /// order, once every one of them has a result; `None` while any is pending.
    ///
    /// On the task a result handler got from
    /// [`ResultContext::record_in_parent`](crate::ResultContext::record_in_parent), the
    /// result's group is complete for one result only: the one whose record completed it (or
    /// its redelivery, after a crash). Results recorded in the same write see `None`, so the
    /// group's completion is handled once.
    ///
    /// ```no_run
    /// # async fn demo(result: soorma::ResultContext) -> soorma::Result<()> {
    /// let mut task = result.record_in_parent().await?;
    /// if let Some(all) = task.group_results(result.group_id()).await? {
    ///     let values: Vec<_> = all.into_iter().map(|s| s.result).collect();
    ///     task.complete(values).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn group_results(&self, group_id: Option<&str>) -> Result<Option<Vec<SubTaskInfo>>> {
        let groups: Vec<&SubTaskGroup> = match group_id {
            Some(g) => self.record.groups.get(g).into_iter().collect(),
            None => self.record.groups.values().collect(),
        };
        if groups.is_empty() || groups.iter().any(|g| !g.is_complete()) {
            return Ok(None);
        }
        // In a result handler only the result that completed the group (or, after a crash,
        // a redelivered one) sees it complete: the group's completion is handled once, not by
        // every result of the write that completed it.
        if let Some((gated, false)) = &self.fan_in_gate
            && groups.iter().any(|g| g.group_id == *gated)
        {
            return Ok(None);
        }
        // A complete group's results never change: concurrent callers in this process share
        // one load.
        let mut out = Vec::new();
        for g in groups {
            let key = (
                self.tenant_owned(),
                self.record.task_id.clone(),
                g.group_id.clone(),
            );
            let members = self
                .runtime
                .platform
                .fan_in()
                .complete
                .get_or_load(key, self.load_members(&[g], true))
                .await?;
            out.extend(members.iter().cloned());
        }
        out.sort_by_key(|s| s.seq);
        Ok(Some(out))
    }

    /// Persists the task (its state; sub-task results recorded concurrently are kept).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// async fn step(mut task: TaskContext) -> soorma::Result<()> {
    ///     task.set_state("step", "fetched")?;
    ///     task.save().await?; // stored before the slow part
    ///     task.complete(()).await?;
    ///     Ok(())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// # let worker = Worker::new("stepper").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("step.requested", step)).start(&platform).await?;
    /// let reply = platform.client("docs").request("step.requested", (), "step.completed").await?;
    /// let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", reply.reply.request_id.clone());
    /// let stored = platform.state().get(&key).await?.unwrap();
    /// assert!(String::from_utf8_lossy(&stored.value).contains(r#""step":"fetched""#));
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn save(&mut self) -> Result<()> {
        let state = self.state_to_store()?;
        self.persist(state, |_| {}).await
    }

    /// Applies `state` (see [`write_state`]) and `mutate` locally and to the stored record
    /// (created on first save).
    pub(super) async fn persist(
        &mut self,
        state: Option<StateMap>,
        mutate: impl Fn(&mut TaskRecord),
    ) -> Result<()> {
        let now = now_rfc3339();
        let event = self.envelope.id.clone();
        write_state(&mut self.record, state.as_ref(), &event, false);
        mutate(&mut self.record);
        self.record.updated_at = Some(now.clone());
        let key = self.key();
        if self.revision.is_none() {
            self.record.created_at.get_or_insert(now.clone());
            let bytes = state::encode("task", &self.record)?;
            match self.store().create(&key, bytes).await {
                Ok(revision) => {
                    self.revision = Some(revision);
                    return Ok(());
                }
                // Stored by an earlier delivery of the same request: merge into it.
                Err(Error::Conflict { .. }) => self.replayed = true,
                Err(e) => return Err(e),
            }
        }
        let replayed = self.replayed;
        let agent = self.record.agent.clone();
        let ((), stored) = update_task(self.store(), &key, |rec: &mut TaskRecord| {
            if replayed {
                another_agents(rec, &agent)?;
            }
            write_state(rec, state.as_ref(), &event, replayed);
            mutate(rec);
            rec.updated_at = Some(now.clone());
            Ok(Change::Write(()))
        })
        .await?;
        self.record = stored.value;
        self.revision = Some(stored.revision);
        Ok(())
    }

    fn next_group_id(&mut self) -> String {
        let k = self.delegated;
        self.delegated += 1;
        // Derived from the task and the handled event: a redelivered event re-creates the same
        // sub-tasks instead of new ones. The event's id is digested, not copied: a reply's id
        // holds the group id it answers, so copying it would grow ids with every link of a
        // chain of delegations (past what a store key or a subject can take).
        if self.envelope.id == self.record.task_id {
            format!("{}-g{k}", self.record.task_id)
        } else {
            format!(
                "{}-{}-g{k}",
                self.record.task_id,
                event_digest(&self.envelope.id)
            )
        }
    }

    /// Delegates one typed request (sequential chaining); its reply comes to the worker's
    /// `#[on_fan_in(R)]` handler. The task is saved first; checked like
    /// [`fan_out`](Self::fan_out). For a request named at run time, use
    /// [`delegate_with`](Self::delegate_with) and a [`Delegation`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Search { q: String }
    /// impl Request for Search { const EVENT: &'static str = "search.requested"; type Reply = Vec<String>; }
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Research { topic: String }
    /// impl Request for Research { const EVENT: &'static str = "research.requested"; type Reply = String; }
    ///
    /// async fn search(req: Invocation<Search>) -> Result<Vec<String>, ToolError> {
    ///     Ok(vec![format!("all about {}", req.data.q)])
    /// }
    ///
    /// async fn research(mut task: TaskContext<Research>) -> soorma::Result<Delegated> {
    ///     let q = task.data.topic.clone();
    ///     task.delegate(Search { q }).await
    /// }
    ///
    /// async fn searched(_task: TaskContext<Research>, hits: Vec<String>) -> soorma::Result<String> {
    ///     Ok(hits.join("; "))
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let running = Agents::new()
    ///     .tool("search", vec![Handler::invoke(search)])
    ///     .worker("researcher", vec![Handler::task(research), Handler::fan_in::<Search>().handle(searched)])
    ///     .start(&platform)
    ///     .await?;
    /// let report = platform.client("docs").call(Research { topic: "rust".into() }).await?;
    /// assert_eq!(report, "all about rust");
    /// # running.shutdown().await?; Ok(()) }
    /// ```
    pub async fn delegate<R: Request>(&mut self, request: R) -> Result<Delegated> {
        self.fan_out(request).await
    }

    /// Gives the task a deadline: unless it completed or failed before, it fails `after` from
    /// now with an error saying what it was still waiting for (which sub-tasks, of which
    /// events), and its caller gets that error reply instead of waiting for its own timeout.
    /// The deadline is durable (a restarted worker still enforces it); setting it again moves it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::prelude::*;
    ///
    /// async fn research(mut task: TaskContext<String>) -> soorma::Result<String> {
    ///     task.fail_after(Duration::from_millis(200)).await?;
    ///     // Nobody serves this yet, so the reply never comes.
    ///     let search = Delegation::new("slow.search", &task.data, "slow.searched").skip_consumer_check();
    ///     task.delegate_with(search).await
    /// }
    /// # async fn searched(_: ResultContext) {}
    ///
    /// let platform = Platform::embedded();
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("slow.searched", searched)).start(&platform).await?;
    /// let err = platform.client("docs").invoke::<String>("research.requested", "rust", "research.completed").await.unwrap_err();
    /// assert!(err.to_string().contains("still waiting for `slow.search`"), "{err}");
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn fail_after(&mut self, after: std::time::Duration) -> Result<()> {
        let deadline = rfc3339_after(after);
        let state = self.state_to_store()?;
        let at = deadline.clone();
        self.persist(state, move |rec| {
            rec.deadline_at = Some(at.clone());
        })
        .await?;
        let data = serde_json::json!({
            "task_id": self.record.task_id,
            "deadline_at": deadline,
            "after_seconds": after.as_secs_f64(),
        });
        let mut env = self
            .bus()
            .envelope(Topic::ActionResults, TASK_DEADLINE.into(), data);
        env.id = deadline_timer_id(&self.record.task_id);
        env.correlation_id = Some(self.record.task_id.clone());
        env.tenant_id.clone_from(&self.record.tenant_id);
        timers::schedule(&self.runtime.platform, env, after).await
    }

    /// Asks a person, as a sub-task: publishes `notification.human_input` on
    /// `notification-events` (`{task_id, question, response_event, timeout_seconds}`, correlation
    /// id = the returned sub-task id). The answer — `response_event` on `action-results` with that
    /// correlation id — arrives at the worker's `#[on_result(response_event)]` handler like any
    /// sub-task result. With a `timeout`, a `task.timeout` error result for the same sub-task
    /// arrives instead when nobody answered in time (handle `#[on_result("task.timeout")]`); the
    /// first of the two wins. The timer is durable (stored; a restarted worker fires it).
    ///
    /// ```
    /// # use soorma::prelude::*;
    /// async fn publish(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     let within = Some(std::time::Duration::from_secs(3600));
    ///     task.request_human_input("Publish this post?", "post.reviewed", within).await?;
    ///     Ok(())
    /// }
    /// # let _ = publish;
    /// ```
    pub async fn request_human_input(
        &mut self,
        question: impl Into<String>,
        response_event: impl Into<String>,
        timeout: Option<std::time::Duration>,
    ) -> Result<String> {
        let question = question.into();
        let response_event = response_event.into();
        let timeout_seconds = timeout.map(|t| t.as_secs_f64());
        let ask = Delegation {
            event_type: HUMAN_INPUT.into(),
            data: Ok(serde_json::json!({
                "task_id": self.record.task_id,
                "question": question,
                "response_event": response_event,
                "timeout_seconds": timeout_seconds,
            })),
            response_event: response_event.clone(),
            validate: false,
            check_consumer: false,
            topic: Topic::NotificationEvents,
        };
        if timeout.is_some() {
            let timed_out = Delegation::new(HUMAN_INPUT, &(), TASK_TIMEOUT_EVENT);
            self.check_reply_handlers(&[timed_out], None)?;
        }
        let sub_task = self.delegate_with(ask).await?;
        if let Some(after) = timeout {
            let reply = ActionReply::failure(
                &sub_task,
                format!(
                    "no answer to \"{question}\" within {} s",
                    after.as_secs_f64()
                ),
            );
            let data = serde_json::to_value(reply).map_err(|e| Error::serialize("timeout", e))?;
            let mut env =
                self.bus()
                    .envelope(Topic::ActionResults, TASK_TIMEOUT_EVENT.into(), data);
            env.id = format!("{sub_task}-timeout");
            env.correlation_id = Some(sub_task.clone());
            env.tenant_id.clone_from(&self.record.tenant_id);
            timers::schedule(&self.runtime.platform, env, after).await?;
        }
        Ok(sub_task)
    }

    /// [`delegate`](Self::delegate) with a prepared [`Delegation`] (e.g. one that skips schema
    /// validation); returns the sub-task id.
    ///
    /// ```
    /// # use soorma::prelude::*;
    /// async fn forward(mut task: TaskContext<serde_json::Value>) -> soorma::Result<()> {
    ///     let legacy = Delegation::new("legacy.requested", &task.data, "legacy.done").skip_validation();
    ///     task.delegate_with(legacy).await?;
    ///     Ok(())
    /// }
    /// # let _ = forward;
    /// ```
    pub async fn delegate_with(&mut self, delegation: Delegation) -> Result<String> {
        let group_id = self.delegate_group(vec![delegation], None).await?;
        Ok(sub_task_id(&group_id, 0))
    }

    /// Delegates several sub-tasks at once (fan-out); returns the group id to pass to
    /// [`group_results`](Self::group_results). Everything is saved before anything is published.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # use std::time::Duration;
    /// async fn analyze(mut task: TaskContext<String>) -> soorma::Result<String> {
    ///     // This test plays the analyzers: nobody consumes the requests.
    ///     task.delegate_parallel([
    ///         Delegation::new("sentiment.analyze", &task.data, "sentiment.completed").skip_consumer_check(),
    ///         Delegation::new("entity.extract", &task.data, "entity.completed").skip_consumer_check(),
    ///     ]).await
    /// }
    /// # async fn collect(_: ResultContext) {}
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// # t.start(Worker::new("analyzer").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("analyze.requested", analyze))
    /// #     .handler(Handler::on_result("sentiment.completed", collect))
    /// #     .handler(Handler::on_result("entity.completed", collect))).await?;
    /// t.client().bus().request("analyze.requested", "soorma is great", "analyze.completed").await?;
    /// t.expect_event("sentiment.analyze", Duration::from_secs(1)).await?;
    /// t.expect_event("entity.extract", Duration::from_secs(1)).await?;
    /// # t.shutdown().await }
    /// ```
    pub async fn delegate_parallel(
        &mut self,
        delegations: impl IntoIterator<Item = Delegation>,
    ) -> Result<String> {
        let delegations: Vec<Delegation> = delegations.into_iter().collect();
        if delegations.is_empty() {
            return Err(Error::InvalidArgument(
                "delegate_parallel needs at least one delegation".into(),
            ));
        }
        self.delegate_group(delegations, None).await
    }

    /// Fans typed requests out — one request, or a tuple of up to 8 — and returns the
    /// delegation; the replies, all of them, come to the worker's `#[on_fan_in]` handler for
    /// exactly these request types (in this order), which runs once when the last one is in.
    ///
    /// Checked before anything is saved or published: the worker must have that fan-in
    /// handler, and a registered agent must consume each request
    /// ([`Error::NoConsumer`]); each payload is checked against its consumer's schema.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Count { text: String }
    /// impl Request for Count { const EVENT: &'static str = "count.requested"; type Reply = usize; }
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Shout { text: String }
    /// impl Request for Shout { const EVENT: &'static str = "shout.requested"; type Reply = String; }
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Analyze { text: String }
    /// impl Request for Analyze { const EVENT: &'static str = "analyze.requested"; type Reply = String; }
    ///
    /// async fn count(req: Invocation<Count>) -> Result<usize, ToolError> { Ok(req.data.text.len()) }
    /// async fn shout(req: Invocation<Shout>) -> Result<String, ToolError> { Ok(req.data.text.to_uppercase()) }
    ///
    /// async fn analyze(mut task: TaskContext<Analyze>) -> soorma::Result<Delegated> {
    ///     let text = task.data.text.clone();
    ///     task.fan_out((Count { text: text.clone() }, Shout { text })).await
    /// }
    ///
    /// async fn collect(_task: TaskContext<Analyze>, (n, loud): (usize, String)) -> soorma::Result<String> {
    ///     Ok(format!("{loud} ({n})")) // completes the task
    /// }
    ///
    /// let platform = Platform::embedded();
    /// # let tools = Tool::new("text").use_registered_handlers(false)
    /// #     .handler(Handler::invoke(count)).handler(Handler::invoke(shout)).start(&platform).await?;
    /// let worker = Worker::new("analyzer").use_registered_handlers(false)
    ///     .handler(Handler::task(analyze))
    ///     .handler(Handler::fan_in::<(Count, Shout)>().handle(collect))
    ///     .start(&platform).await?;
    /// let out = platform.client("docs").call(Analyze { text: "hi".into() }).await?;
    /// assert_eq!(out, "HI (2)");
    /// # worker.shutdown().await?; tools.shutdown().await?; Ok(()) }
    /// ```
    pub async fn fan_out<Q: RequestSet>(&mut self, requests: Q) -> Result<Delegated> {
        let delegations = requests
            .into_requests()?
            .into_iter()
            .map(|r| Delegation {
                event_type: r.event.to_owned(),
                data: Ok(r.data),
                response_event: r.reply_event.into_owned(),
                validate: true,
                check_consumer: true,
                topic: Topic::ActionRequests,
            })
            .collect();
        let group_id = self.delegate_group(delegations, Some(Q::key())).await?;
        Ok(Delegated { group_id })
    }

    /// Fails with [`Error::Misconfigured`] when no handler of this worker waits for the
    /// replies of a delegation: an `#[on_fan_in]` handler for the fan-out `fan_in`, else an
    /// `#[on_result]` handler for each reply event.
    fn check_reply_handlers(&self, delegations: &[Delegation], fan_in: Option<&str>) -> Result<()> {
        let wiring = self.runtime.wiring.get::<WorkerWiring>();
        let problem = match fan_in {
            Some(key) if !wiring.is_some_and(|w| w.fan_ins.contains(key)) => Some(format!(
                "it fans out `{}` but has no `#[on_fan_in]` handler for these requests (in this order); add one taking the task and their replies",
                key.replace(',', "`, `")
            )),
            Some(_) => None,
            None => delegations
                .iter()
                .find(|d| !wiring.is_some_and(|w| w.handles_result(&d.response_event)))
                .map(|d| {
                    format!(
                        "it delegates `{}` but no handler of the worker waits for the reply `{}`; add `#[on_result(\"{}\")]`",
                        d.event_type, d.response_event, d.response_event
                    )
                }),
        };
        match problem {
            None => Ok(()),
            Some(problem) => {
                tracing::error!(agent = %self.runtime.name, %problem, "delegation refused");
                Err(Error::Misconfigured {
                    agent: self.runtime.name.to_string(),
                    problems: vec![problem],
                })
            }
        }
    }

    async fn delegate_group(
        &mut self,
        delegations: Vec<Delegation>,
        fan_in: Option<String>,
    ) -> Result<String> {
        let size = u32::try_from(delegations.len())
            .map_err(|_| Error::InvalidArgument("too many delegations in one group".into()))?;
        self.check_reply_handlers(&delegations, fan_in.as_deref())?;
        let mut planned = Vec::with_capacity(delegations.len());
        for d in delegations {
            if d.event_type.trim().is_empty() || d.response_event.trim().is_empty() {
                return Err(Error::InvalidArgument(
                    "a delegation needs an event type and a response event".into(),
                ));
            }
            let data = d
                .data
                .map_err(|e| Error::InvalidArgument(format!("delegation data: {e}")))?;
            planned.push((
                d.event_type,
                d.response_event,
                data,
                (d.validate, d.check_consumer, d.topic),
            ));
        }
        let group_id = self.next_group_id();
        // The requests, each correlated by its sub-task id; checked against their consumers
        // (one must exist) and their schemas before anything is saved, so a rejected
        // delegation leaves no trace.
        let bus = self.bus();
        let mut envelopes = Vec::with_capacity(planned.len());
        for (i, (event_type, response_event, data, (validate, check_consumer, topic))) in
            planned.iter().enumerate()
        {
            let id = sub_task_id(&group_id, i as u32);
            let mut env =
                bus.envelope_with_id(id.clone(), *topic, event_type.clone(), data.clone());
            if *topic != Topic::ActionRequests {
                env.response_topic = Some(Topic::ActionResults);
            }
            env.correlation_id = Some(id);
            env.response_event = Some(response_event.clone());
            if *check_consumer {
                bus.check_consumer(&env).await?;
            }
            if *validate {
                bus.check_request(&env).await?;
            }
            envelopes.push(env);
        }
        let base_seq = self.record.next_seq;
        let tenant = self.tenant_owned();
        // 1. The group's record: what each member delegates (a replay finds it there).
        let (record, pages) = DelegationGroup::paged(
            &group_id,
            &self.record.task_id,
            base_seq,
            planned
                .iter()
                .map(|(event, response, _, _)| (event, response)),
            group::PAGE_BYTES,
        );
        group::store(&self.runtime.platform, &tenant, &record, pages).await?;
        // 2. The group in the parent task, with the task's state.
        let mut group = SubTaskGroup::new(&group_id, base_seq, size);
        if let Some(key) = fan_in {
            group = group.with_fan_in(key);
        }
        let state = self.state_to_store()?;
        self.persist(state, move |rec| {
            if !rec.groups.contains_key(&group.group_id) {
                rec.groups.insert(group.group_id.clone(), group.clone());
                rec.next_seq = rec.next_seq.max(group.first_seq + group.size);
            }
            if !rec.status.is_terminal() {
                rec.status = TaskStatus::Waiting;
            }
        })
        .await?;
        if self.record.status == TaskStatus::Canceled {
            return Err(Error::InvalidArgument(format!(
                "task `{}` was canceled: nothing is delegated",
                self.record.task_id
            )));
        }
        // 3. The requests (stored together where the platform can: one write for many).
        bus.publish_envelopes(envelopes).await?;
        Ok(group_id)
    }

    /// The agent handling the task, its platform and bus.
    pub(super) fn runtime(&self) -> &Arc<AgentRuntime> {
        &self.runtime
    }

    /// Takes the task as a write stored it.
    pub(super) fn set_stored(&mut self, stored: state::Versioned<TaskRecord>) {
        self.record = stored.value;
        self.revision = Some(stored.revision);
    }

    pub(super) fn tenant_owned(&self) -> String {
        self.record
            .tenant_id
            .clone()
            .unwrap_or_else(|| soorma_common::DEFAULT_TENANT.to_owned())
    }

    /// Publishes a `task.progress` event on `system-events`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn crawl(task: TaskContext) -> soorma::Result<()> {
    ///     task.progress(0.5, "half of the pages fetched").await
    /// }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// # t.start(Worker::new("crawler").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("crawl.requested", crawl))).await?;
    /// t.client().bus().request("crawl.requested", (), "crawl.completed").await?;
    /// let p = t.expect_event("task.progress", std::time::Duration::from_secs(1)).await?;
    /// assert_eq!(p.data["progress"], 0.5);
    /// # t.shutdown().await }
    /// ```
    pub async fn progress(&self, fraction: f64, message: impl Into<String>) -> Result<()> {
        let mut progress = TaskProgress::new(
            &self.record.task_id,
            &*self.runtime.name,
            fraction.clamp(0.0, 1.0),
        )
        .with_message(message);
        if let Some(plan) = &self.record.plan_id {
            progress = progress.with_plan_id(plan);
        }
        self.bus()
            .publish(Topic::SystemEvents, TASK_PROGRESS, progress)
            .await?;
        Ok(())
    }

    /// Completes the task and replies `{request_id, success: true, result}` on the caller's
    /// `response_event`. Returns `false` (and publishes nothing) if the task had already ended.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn shout(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     let loud = task.data.to_uppercase();
    ///     task.complete(loud).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("shouter").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("shout.requested", shout)).start(&platform).await?;
    /// let out: String = platform.client("docs").invoke("shout.requested", "hi", "shout.completed").await?;
    /// assert_eq!(out, "HI");
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn complete(&mut self, result: impl Serialize) -> Result<bool> {
        let value = serde_json::to_value(result).map_err(|e| Error::serialize("task result", e))?;
        self.finish(Ok(value)).await
    }

    /// Fails the task and replies `{request_id, success: false, error}`. Returns `false` if the
    /// task had already ended.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn validate(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     if task.data.is_empty() {
    ///         task.fail("empty input").await?;
    ///     }
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("validator").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("validate.requested", validate)).start(&platform).await?;
    /// let err = platform.client("docs").invoke::<()>("validate.requested", "", "validate.completed").await;
    /// assert!(matches!(err, Err(soorma::Error::Remote { message, .. }) if message == "empty input"));
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub async fn fail(&mut self, error: impl fmt::Display) -> Result<bool> {
        self.finish(Err(error.to_string())).await
    }

    async fn finish(&mut self, outcome: std::result::Result<Value, String>) -> Result<bool> {
        let now = now_rfc3339();
        let state = self.state_to_store()?;
        let event = self.envelope.id.clone();
        let apart = match &outcome {
            Ok(v) if !self.record.status.is_terminal() => self.store_result_apart(v).await?,
            _ => None,
        };
        let apply = |rec: &mut TaskRecord, replayed: bool| {
            write_state(rec, state.as_ref(), &event, replayed);
            match &outcome {
                Ok(v) => {
                    rec.status = TaskStatus::Completed;
                    if apart.is_some() {
                        rec.result_apart.clone_from(&apart);
                    } else {
                        rec.result = Some(v.clone());
                    }
                }
                Err(e) => {
                    rec.status = TaskStatus::Failed;
                    // As the reply carries it: an error may quote a large (or hostile) input.
                    rec.error = Some(crate::util::bounded(e, crate::util::MAX_REASON_BYTES));
                }
            }
            rec.updated_at = Some(now.clone());
            // Recorded in the write that ends the task: this handler is the one that replies.
            rec.ended_by = Some(self.envelope.id.clone());
        };
        let key = self.key();
        let mut won = None;
        if self.revision.is_none() {
            let mut record = self.record.clone();
            record.created_at.get_or_insert(now.clone());
            apply(&mut record, self.replayed);
            match self
                .store()
                .create(&key, state::encode("task", &record)?)
                .await
            {
                Ok(revision) => {
                    self.record = record;
                    self.revision = Some(revision);
                    won = Some(true);
                }
                Err(Error::Conflict { .. }) => self.replayed = true,
                Err(e) => return Err(e),
            }
        }
        let won = match won {
            Some(w) => w,
            None => {
                let (agent, replayed) = (self.record.agent.clone(), self.replayed);
                let (won, stored) = update_task(self.store(), &key, |rec: &mut TaskRecord| {
                    if replayed {
                        another_agents(rec, &agent)?;
                    }
                    if rec.status.is_terminal() {
                        return Ok(Change::Keep(false));
                    }
                    apply(rec, replayed);
                    Ok(Change::Write(true))
                })
                .await?;
                self.record = stored.value;
                self.revision = Some(stored.revision);
                won
            }
        };
        if !won {
            self.drop_unused_result(apart.as_deref()).await;
        }
        if won && self.record.deadline_at.is_some() {
            let timer = deadline_timer_id(&self.record.task_id);
            let tenant = self.tenant_owned();
            if let Err(e) = timers::cancel(&self.runtime.platform, &tenant, &timer).await {
                tracing::debug!(error = %e, task_id = %self.record.task_id, "could not cancel the task's deadline");
            }
        }
        if self.record.status == TaskStatus::Canceled {
            // Canceled before this handler ended: no reply (the one who canceled knows).
            tracing::debug!(task_id = %self.record.task_id, "task was canceled; no reply");
        } else if won || self.owes_reply() {
            self.send_final_reply().await?;
        } else {
            tracing::debug!(task_id = %self.record.task_id, "task already ended; its reply is another handler's");
        }
        Ok(won)
    }

    /// Whether this handler owes the ended task's reply although its write did not end the
    /// task: the reply is not known to be out and the event being handled is the one whose
    /// write ended it (a redelivery: its first handling may have died between the write and
    /// the reply). A task stored before `ended_by` existed is replied to by any handler; a
    /// canceled task by none.
    fn owes_reply(&self) -> bool {
        let record = &self.record;
        record.status.is_terminal()
            && record.status != TaskStatus::Canceled
            && !record.reply_sent
            && match &record.ended_by {
                Some(by) => *by == self.envelope.id,
                None => true,
            }
    }

    /// Republishes the reply of the ended task when this handler owes it (see
    /// [`owes_reply`](Self::owes_reply)); returns whether it did.
    pub(crate) async fn resend_owed_reply(&mut self) -> Result<bool> {
        if !self.owes_reply() {
            return Ok(false);
        }
        tracing::debug!(task_id = %self.record.task_id, "republishing the reply of a task ended by an earlier delivery");
        self.send_final_reply().await?;
        Ok(true)
    }

    /// Stores a result in a record of its own when it is over [`RESULT_KEPT_APART_BYTES`], or
    /// when the task's record with it would pass [`TASK_RECORD_BUDGET_BYTES`] (the task's
    /// record also holds the request, and one stored value is bounded: 1 MiB on NATS by
    /// default); returns its key, or `None` for a result kept in the task's record. The key is
    /// derived from the handled event and the result: a redelivery with the same result reuses
    /// the record the first handling stored instead of storing another.
    async fn store_result_apart(&self, result: &Value) -> Result<Option<String>> {
        let bytes = state::encode("task result", result)?;
        // The record is encoded only when the result alone does not decide.
        if bytes.len() <= RESULT_KEPT_APART_BYTES
            && state::encode("task", &self.record)?
                .len()
                .saturating_add(bytes.len())
                <= TASK_RECORD_BUDGET_BYTES
        {
            return Ok(None);
        }
        // The same event's redelivery with the same result reuses the record; another result
        // (a handler that is not deterministic) gets one of its own.
        let handled = crate::util::digest(&[self.envelope.id.as_bytes(), &bytes]);
        let apart = format!("{}-out{}", self.record.task_id, &handled[..16]);
        let key = subtask_key(&self.tenant_owned(), &apart);
        match self.store().create(&key, bytes).await {
            Ok(_) | Err(Error::Conflict { .. }) => Ok(Some(apart)),
            Err(e) => Err(e),
        }
    }

    /// Deletes the result this handler stored apart when the task ended with another one
    /// (another handler ended it first); best effort.
    async fn drop_unused_result(&self, apart: Option<&str>) {
        let Some(apart) = apart else {
            return;
        };
        if self.record.result_apart.as_deref() == Some(apart) {
            return;
        }
        let key = subtask_key(&self.tenant_owned(), apart);
        if let Err(e) = self.store().delete(&key).await {
            tracing::debug!(%key, error = %e, "could not delete a task result stored for nothing");
        }
    }

    /// Publishes the ended task's reply, then marks it sent. The reply's id is derived from the
    /// task, so a republish after a crash is dropped by the bus's duplicate window.
    async fn send_final_reply(&mut self) -> Result<()> {
        let stored_apart = match &self.record.result_apart {
            Some(apart) if self.record.status == TaskStatus::Completed => {
                let key = subtask_key(&self.tenant_owned(), apart);
                let result = state::load::<Value>(self.store(), "task result", &key).await?;
                Some(result.map(|r| r.value).ok_or_else(|| {
                    crate::error::EngineError::new(
                        crate::error::EngineErrorKind::Inconsistent,
                        format!(
                            "the result of task `{}` (`{key}`) is missing",
                            self.record.task_id
                        ),
                    )
                })?)
            }
            _ => None,
        };
        let reply = match (self.record.status, &self.record.result, &self.record.error) {
            (TaskStatus::Failed, _, error) => {
                ActionReply::failure(&self.record.task_id, error.clone().unwrap_or_default())
            }
            (_, result, _) => ActionReply::success(
                &self.record.task_id,
                stored_apart.or_else(|| result.clone()).unwrap_or_default(),
            ),
        };
        self.reply(reply).await?;
        self.mark_reply_sent().await
    }

    async fn mark_reply_sent(&mut self) -> Result<()> {
        let key = self.key();
        let ((), stored) = update_task(self.store(), &key, |rec: &mut TaskRecord| {
            if rec.reply_sent {
                return Ok(Change::Keep(()));
            }
            rec.reply_sent = true;
            Ok(Change::Write(()))
        })
        .await?;
        self.record = stored.value;
        self.revision = Some(stored.revision);
        Ok(())
    }

    async fn reply(&self, reply: ActionReply) -> Result<()> {
        let record = &self.record;
        let route = ReplyRoute {
            event: record.response_event.clone(),
            topic: record.response_topic,
            correlation_id: record.correlation_id.clone(),
            tenant_id: record.tenant_id.clone(),
            user_id: record.user_id.clone(),
            session_id: record.session_id.clone(),
            plan_id: record.plan_id.clone(),
        };
        publish_reply(&self.bus(), &record.task_id, route, reply).await
    }
}

impl TaskContext<Value> {
    /// Marks the stored task `task_id` of `tenant` canceled unless it has ended (a
    /// revision-checked write: one instance wins). The winner cancels the task's deadline and
    /// sends each of its pending sub-tasks a cancel request of its own (their workers do the
    /// same for theirs, so a task tree is canceled once per task). Returns whether this call
    /// canceled the task; an unknown task is not an error.
    pub(crate) async fn cancel(input: &HandlerInput, tenant: &str, task_id: &str) -> Result<bool> {
        let now = now_rfc3339();
        let key = task_key(tenant, task_id);
        let store = &**input.runtime.platform.state();
        let updated = update_task(store, &key, |rec: &mut TaskRecord| {
            if rec.status.is_terminal() {
                return Ok(Change::Keep(false));
            }
            rec.status = TaskStatus::Canceled;
            rec.error = Some("canceled".into());
            rec.updated_at = Some(now.clone());
            Ok(Change::Write(true))
        })
        .await;
        let stored = match updated {
            Ok((true, stored)) => stored,
            Ok((false, _)) | Err(Error::TaskNotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        let task = Self::restored(
            stored.value,
            stored.revision,
            input.envelope.clone(),
            input.runtime.clone(),
        );
        tracing::info!(task_id = %task_id, tenant = %tenant, "task canceled");
        if task.record.deadline_at.is_some() {
            let timer = deadline_timer_id(task_id);
            if let Err(e) = timers::cancel(&task.runtime.platform, tenant, &timer).await {
                tracing::debug!(error = %e, task_id = %task_id, "could not cancel the task's deadline");
            }
        }
        let pending: Vec<String> = task
            .pending_sub_tasks()
            .await?
            .into_iter()
            .map(|s| s.sub_task_id)
            .collect();
        let bus = task.bus();
        let tenant = tenant.to_owned();
        concurrently(pending, STATE_CONCURRENCY, move |sub_task: String| {
            let (bus, tenant) = (bus.clone(), tenant.clone());
            async move { bus.cancel(sub_task).tenant_id(tenant).await.map(drop) }
        })
        .await?;
        Ok(true)
    }

    /// The stored task `task_id` of `tenant`, as the context of the handler of `input`.
    pub(crate) async fn load(input: &HandlerInput, tenant: &str, task_id: &str) -> Result<Self> {
        let stored = state::load::<TaskRecord>(
            &**input.runtime.platform.state(),
            "task",
            &task_key(tenant, task_id),
        )
        .await?
        .ok_or_else(|| Error::TaskNotFound(task_id.to_owned()))?;
        Ok(Self::restored(
            stored.value,
            stored.revision,
            input.envelope.clone(),
            input.runtime.clone(),
        ))
    }

    /// A stored task, as the context of a handler of `envelope`.
    /// Lets this context (restored by a result of `group`) see that group complete only when
    /// `may_see_complete`.
    pub(crate) fn gated_by(mut self, group: String, may_see_complete: bool) -> Self {
        self.fan_in_gate = Some((group, may_see_complete));
        self
    }

    pub(crate) fn restored(
        record: TaskRecord,
        revision: Revision,
        envelope: Arc<EventEnvelope>,
        runtime: Arc<AgentRuntime>,
    ) -> Self {
        Self {
            data: record.data.clone(),
            state: record.state.clone(),
            keep_stored_state: false,
            replayed: false,
            record,
            revision: Some(revision),
            delegated: 0,
            fan_in_gate: None,
            envelope,
            runtime,
        }
    }

    /// Decodes the task's request payload as `T`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    /// #     let topic = task.data.clone();
    /// #     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    /// #     Ok(())
    /// # }
    /// # async fn search(req: Invocation<String>) -> Result<usize, ToolError> { Ok(req.data.len() * 10) }
    ///
    /// async fn collect(result: ResultContext<usize>) -> soorma::Result<()> {
    ///     let task = result.record_in_parent().await?;
    ///     let mut task = task.into_typed::<String>()?; // the original request: the topic
    ///     let summary = format!("{} hits for {}", result.data.unwrap_or(0), task.data);
    ///     task.complete(summary).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("search").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("search.requested", search)).start(&platform).await?;
    /// # let worker = Worker::new("researcher").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("research.requested", research))
    /// #     .handler(Handler::on_result("search.completed", collect)).start(&platform).await?;
    /// let s: String = platform.client("docs").invoke("research.requested", "rust", "research.completed").await?;
    /// assert_eq!(s, "40 hits for rust");
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn into_typed<T: DeserializeOwned>(self) -> Result<TaskContext<T>> {
        let data = decode_payload(&self.record.event_type, &self.record.data)?;
        Ok(TaskContext {
            data,
            state: self.state,
            keep_stored_state: self.keep_stored_state,
            replayed: self.replayed,
            record: self.record,
            revision: self.revision,
            delegated: self.delegated,
            fan_in_gate: self.fan_in_gate,
            envelope: self.envelope,
            runtime: self.runtime,
        })
    }
}

impl<T> TaskContext<T, StateMap> {
    /// The same task with its state decoded as `S` (an error names the field that does not
    /// decode).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    /// # async fn search(req: Invocation<String>) -> Result<String, ToolError> { Ok(format!("results for {}", req.data)) }
    ///
    /// #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// struct Notes { topic: String }
    ///
    /// async fn research(mut task: TaskContext<String, Notes>) -> soorma::Result<()> {
    ///     task.state_mut().topic = task.data.clone();
    ///     let topic = task.data.clone();
    ///     task.delegate_with(Delegation::new("search.requested", &topic, "search.completed")).await?;
    ///     Ok(())
    /// }
    ///
    /// async fn collect(result: ResultContext<String>) -> soorma::Result<()> {
    ///     let task = result.record_in_parent().await?;
    ///     let mut task = task.with_state::<Notes>()?;
    ///     let report = format!("{}: {}", task.state().topic, result.data.unwrap_or_default());
    ///     task.complete(report).await?;
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
    /// assert_eq!(r, "rust: results for rust");
    /// # tool.shutdown().await?; worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn with_state<S: TaskState>(self) -> Result<TaskContext<T, S>> {
        let state = decode_payload(
            &format!("the state of task `{}`", self.record.task_id),
            &Value::Object(self.state),
        )?;
        Ok(TaskContext {
            data: self.data,
            state,
            keep_stored_state: self.keep_stored_state,
            replayed: self.replayed,
            record: self.record,
            revision: self.revision,
            delegated: self.delegated,
            fan_in_gate: self.fan_in_gate,
            envelope: self.envelope,
            runtime: self.runtime,
        })
    }
}

/// The string-keyed state of tasks without a typed state.
impl<T> TaskContext<T, StateMap> {
    /// Reads a typed value from the task state.
    ///
    /// Returns `Ok(None)` when the key is absent and an error when it does not decode.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn count(mut task: TaskContext<Vec<String>>) -> soorma::Result<()> {
    ///     task.set_state("items", task.data.len())?;
    ///     let items: Option<usize> = task.state_value("items")?;
    ///     let missing: Option<usize> = task.state_value("nope")?;
    ///     task.complete((items, missing)).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("counter").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("count.requested", count)).start(&platform).await?;
    /// let got: (Option<usize>, Option<usize>) =
    ///     platform.client("docs").invoke("count.requested", ["a", "b"], "count.completed").await?;
    /// assert_eq!(got, (Some(2), None));
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn state_value<V: DeserializeOwned>(&self, key: &str) -> Result<Option<V>> {
        self.state
            .get(key)
            .map(|v| decode_payload(&format!("task state `{key}`"), v))
            .transpose()
    }

    /// Sets a state value (persisted by the next `save`, `delegate` or completion).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn start(mut task: TaskContext<String>) -> soorma::Result<()> {
    ///     task.set_state("query", task.data.clone())?;
    ///     task.set_state("attempts", 1)?;
    ///     task.complete(task.state().clone()).await?;
    ///     Ok(())
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let worker = Worker::new("starter").use_registered_handlers(false)
    /// #     .handler(Handler::on_task("start.requested", start)).start(&platform).await?;
    /// let state: serde_json::Value = platform.client("docs").invoke("start.requested", "rust", "start.completed").await?;
    /// assert_eq!(state, serde_json::json!({"query": "rust", "attempts": 1}));
    /// # worker.shutdown().await?; Ok(()) }
    /// ```
    pub fn set_state(&mut self, key: impl Into<String>, value: impl Serialize) -> Result<()> {
        let value = serde_json::to_value(value).map_err(|e| Error::serialize("task state", e))?;
        self.state.insert(key.into(), value);
        Ok(())
    }
}

/// A short stable digest of an event id (96 bits of SHA-256, hex): the same on every
/// delivery and in every process and version.
fn event_digest(event_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(event_id.as_bytes());
    crate::util::hex(&digest[..12])
}

/// The id of a task's deadline timer (and of the event it fires).
pub(super) fn deadline_timer_id(task_id: &str) -> String {
    format!("{task_id}-deadline")
}
