//! The gateway's A2A tasks: one per message sent, owned by the caller that sent it, updated
//! from the agent's reply and progress; bounded in count, bytes and time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use soorma_common::a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use tokio::sync::broadcast;

use super::auth::Owner;
use crate::util::{bounded, new_id, now_rfc3339};

/// How much the gateway keeps and runs at once: tasks, bytes and tasks in flight.
///
/// A task's history and artifacts count against [`per_task_bytes`](Self::per_task_bytes): a
/// message over it is kept as a short note in the history (the agent still gets all of it), a
/// result over it fails the task with an error saying so. When the table is full (count or
/// bytes) finished tasks are dropped, the oldest of the tenant holding the most first, so that
/// one tenant's flood does not drop another's results. At most
/// [`max_in_flight`](Self::max_in_flight) tasks work at once, and at most
/// [`max_in_flight_per_tenant`](Self::max_in_flight_per_tenant) of one tenant (so that one
/// tenant cannot take every slot); more are refused with JSON-RPC error -32000 until some
/// finish. A task with no reply within the gateway's task timeout
/// fails.
///
/// ```
/// use soorma::gateway::TaskLimits;
/// let limits = TaskLimits::default().max_tasks(1_000).per_task_bytes(64 * 1024);
/// assert_eq!(limits.max_tasks_value(), 1_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskLimits {
    max_tasks: usize,
    max_in_flight: usize,
    max_in_flight_per_tenant: usize,
    per_task_bytes: usize,
    total_bytes: usize,
    page_bytes: usize,
    max_streams_per_tenant: usize,
}

impl Default for TaskLimits {
    /// 10,000 tasks, 256 in flight (64 of one tenant), 256 KiB per task, 128 MiB in all,
    /// 1 MiB per list page, 32 open streams per tenant.
    fn default() -> Self {
        Self {
            max_tasks: 10_000,
            max_in_flight: 256,
            max_in_flight_per_tenant: 64,
            per_task_bytes: 256 * 1024,
            total_bytes: 128 * 1024 * 1024,
            page_bytes: 1024 * 1024,
            max_streams_per_tenant: 32,
        }
    }
}

impl TaskLimits {
    /// How many tasks are kept at most, finished or not (at least 1).
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().max_tasks(50);
    /// assert_eq!(l.max_tasks_value(), 50);
    /// ```
    #[must_use]
    pub fn max_tasks(mut self, n: usize) -> Self {
        self.max_tasks = n.max(1);
        self
    }

    /// How many tasks may work at once (at least 1).
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().max_in_flight(8);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// How many tasks of one tenant may work at once (at least 1).
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().max_in_flight_per_tenant(4);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn max_in_flight_per_tenant(mut self, n: usize) -> Self {
        self.max_in_flight_per_tenant = n.max(1);
        self
    }

    /// How many task streams (`SendStreamingMessage`, `SubscribeToTask`) one tenant may have
    /// open at once (at least 1; default 32): each holds a connection, and the connections of
    /// a gateway are limited ([`HttpConfig::max_connections`](crate::http::HttpConfig::max_connections)),
    /// so one tenant cannot take them all. One more is refused with JSON-RPC error -32000.
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().max_streams_per_tenant(8);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn max_streams_per_tenant(mut self, n: usize) -> Self {
        self.max_streams_per_tenant = n.max(1);
        self
    }

    /// The most task streams one tenant may have open at once.
    pub(crate) fn max_streams_per_tenant_value(&self) -> usize {
        self.max_streams_per_tenant
    }

    /// How many bytes (as JSON) one task's history and artifacts may hold.
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().per_task_bytes(1 << 20);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn per_task_bytes(mut self, n: usize) -> Self {
        self.per_task_bytes = n;
        self
    }

    /// How many bytes all tasks may hold together.
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().total_bytes(512 << 20);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn total_bytes(mut self, n: usize) -> Self {
        self.total_bytes = n;
        self
    }

    /// How many bytes of tasks one `ListTasks` page may carry (it carries at least one task).
    ///
    /// ```
    /// let l = soorma::gateway::TaskLimits::default().page_bytes(256 << 10);
    /// # let _ = l;
    /// ```
    #[must_use]
    pub fn page_bytes(mut self, n: usize) -> Self {
        self.page_bytes = n;
        self
    }

    /// The task count limit.
    ///
    /// ```
    /// assert_eq!(soorma::gateway::TaskLimits::default().max_tasks_value(), 10_000);
    /// ```
    pub fn max_tasks_value(&self) -> usize {
        self.max_tasks
    }
}

/// The longest status text kept (a progress note, an error); longer ones are cut.
const MAX_STATUS_TEXT: usize = 4096;

struct Entry {
    agent: String,
    owner: Owner,
    task: Task,
    request_id: String,
    seq: u64,
    /// When it finished (its key in `Tables::finished`), once it has.
    finished: Option<u64>,
    bytes: usize,
    deadline: Instant,
    updates: broadcast::Sender<StreamResponse>,
}

/// Every task the gateway keeps, by id, with the indexes that keep each operation O(log n).
pub(crate) struct TaskTable {
    inner: Mutex<Tables>,
    limits: TaskLimits,
    timeout: Duration,
}

#[derive(Default)]
struct Tables {
    tasks: HashMap<String, Entry>,
    by_request: HashMap<String, String>,
    /// Per agent and owner: the tasks by creation order (for `ListTasks`).
    by_owner: HashMap<(String, Owner), BTreeMap<u64, String>>,
    /// Working tasks by creation order, which is also deadline order.
    working: BTreeMap<u64, String>,
    /// Finished tasks by finishing order: the first is evicted first.
    finished: BTreeMap<u64, String>,
    /// The keys in `finished` of each tenant's tasks.
    finished_by_tenant: HashMap<String, BTreeSet<u64>>,
    /// Working tasks per tenant.
    working_by_tenant: HashMap<String, usize>,
    bytes: usize,
    next_seq: u64,
}

/// What changes a task.
pub(crate) enum Outcome {
    /// The agent's result.
    Completed(Value),
    /// The agent's error.
    Failed(String),
    /// The request was refused before it reached the agent.
    Rejected(String),
    /// Progress while the agent works.
    Progress(f64, Option<String>),
}

/// Why a task could not be started: too many in flight, in all or of the tenant.
#[derive(Debug)]
pub(crate) struct Busy {
    pub in_flight: usize,
    pub tenant: Option<String>,
}

/// A page of `ListTasks`.
pub(crate) struct Page {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub total_size: usize,
}

/// What `ListTasks` asks for.
pub(crate) struct ListQuery<'a> {
    pub context_id: Option<&'a str>,
    pub state: Option<TaskState>,
    pub page_size: usize,
    pub page_token: Option<u64>,
    pub history_length: Option<i32>,
    pub include_artifacts: bool,
}

pub(crate) fn status(state: TaskState, text: Option<String>, task: &Task) -> TaskStatus {
    let mut status = TaskStatus::new(state);
    status.timestamp = Some(now_rfc3339());
    if let Some(text) = text {
        let text = bounded(&text, MAX_STATUS_TEXT);
        let mut message = Message::new(new_id(), Role::Agent, vec![Part::text(text)]);
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        status.message = Some(message);
    }
    status
}

/// The size of `value` as JSON, without building it.
pub(crate) fn json_size(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing plain data to a counter cannot fail; a failure counts as no bytes.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn trim_history(task: &mut Task, history_length: Option<i32>) {
    if let Some(n) = history_length {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        let skip = task.history.len().saturating_sub(keep);
        task.history.drain(..skip);
    }
}

impl TaskTable {
    pub fn new(limits: TaskLimits, timeout: Duration) -> Self {
        Self {
            inner: Mutex::default(),
            limits,
            timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a new working task of `agent` owned by `owner`; returns a receiver of its updates
    /// (subscribed before any), or `Busy` when too many tasks are in flight.
    pub fn insert(
        &self,
        agent: &str,
        owner: &Owner,
        mut task: Task,
        request_id: String,
    ) -> Result<broadcast::Receiver<StreamResponse>, Busy> {
        let mut tables = self.lock();
        tables.expire(Instant::now());
        if tables.working.len() >= self.limits.max_in_flight {
            return Err(Busy {
                in_flight: tables.working.len(),
                tenant: None,
            });
        }
        let of_tenant = tables
            .working_by_tenant
            .get(&owner.tenant)
            .copied()
            .unwrap_or(0);
        if of_tenant >= self.limits.max_in_flight_per_tenant {
            return Err(Busy {
                in_flight: of_tenant,
                tenant: Some(owner.tenant.clone()),
            });
        }
        for message in &mut task.history {
            let size = json_size(message);
            if size > self.limits.per_task_bytes {
                let note = format!(
                    "[a message of {size} bytes, not kept: over the gateway's per-task budget of {} bytes]",
                    self.limits.per_task_bytes
                );
                message.parts = vec![Part::text(note)];
                message.metadata = None;
                message.extensions.clear();
            }
        }
        let bytes = json_size(&task.history);
        let (updates, rx) = broadcast::channel(64);
        let seq = tables.next_seq;
        tables.next_seq += 1;
        let id = task.id.clone();
        tables.by_request.insert(request_id.clone(), id.clone());
        tables
            .by_owner
            .entry((agent.to_owned(), owner.clone()))
            .or_default()
            .insert(seq, id.clone());
        tables.working.insert(seq, id.clone());
        *tables
            .working_by_tenant
            .entry(owner.tenant.clone())
            .or_default() += 1;
        tables.bytes += bytes;
        tables.tasks.insert(
            id,
            Entry {
                agent: agent.to_owned(),
                owner: owner.clone(),
                task,
                request_id,
                seq,
                finished: None,
                bytes,
                deadline: Instant::now() + self.timeout,
                updates,
            },
        );
        tables.enforce(&self.limits);
        Ok(rx)
    }

    /// The task, if `owner` started it on `agent`; `history_length` trims its history.
    pub fn get(
        &self,
        agent: &str,
        owner: &Owner,
        id: &str,
        history_length: Option<i32>,
    ) -> Option<Task> {
        let tables = self.lock();
        let entry = tables.owned(agent, owner, id)?;
        let mut task = entry.task.clone();
        trim_history(&mut task, history_length);
        Some(task)
    }

    /// A page of `owner`'s tasks on `agent`, newest first, bounded in count and bytes.
    pub fn list(&self, agent: &str, owner: &Owner, query: &ListQuery<'_>) -> Page {
        let tables = self.lock();
        let Some(index) = tables.by_owner.get(&(agent.to_owned(), owner.clone())) else {
            return Page {
                tasks: Vec::new(),
                next_page_token: String::new(),
                total_size: 0,
            };
        };
        let matches = |e: &&Entry| {
            query.context_id.is_none_or(|c| e.task.context_id == c)
                && query.state.is_none_or(|s| e.task.status.state == s)
        };
        let entries = index
            .range(..query.page_token.unwrap_or(u64::MAX))
            .rev()
            .filter_map(|(_, id)| tables.tasks.get(id))
            .filter(matches);
        let mut tasks = Vec::new();
        let mut bytes = 0;
        let mut next = String::new();
        for entry in entries {
            if tasks.len() == query.page_size {
                next = (entry.seq + 1).to_string();
                break;
            }
            let mut task = entry.task.clone();
            trim_history(&mut task, query.history_length);
            if !query.include_artifacts {
                task.artifacts.clear();
            }
            let size = json_size(&task);
            if !tasks.is_empty() && bytes + size > self.limits.page_bytes {
                next = (entry.seq + 1).to_string();
                break;
            }
            bytes += size;
            tasks.push(task);
        }
        let total_size = if query.context_id.is_none() && query.state.is_none() {
            index.len()
        } else {
            index
                .values()
                .filter_map(|id| tables.tasks.get(id))
                .filter(matches)
                .count()
        };
        Page {
            tasks,
            next_page_token: next,
            total_size,
        }
    }

    /// The task and a receiver of its later updates, if `owner` started it on `agent`.
    pub fn subscribe(
        &self,
        agent: &str,
        owner: &Owner,
        id: &str,
    ) -> Option<(Task, broadcast::Receiver<StreamResponse>)> {
        let tables = self.lock();
        let entry = tables.owned(agent, owner, id)?;
        Some((entry.task.clone(), entry.updates.subscribe()))
    }

    /// The task started by the request event `request_id`.
    pub fn by_request(&self, request_id: &str) -> Option<String> {
        self.lock().by_request.get(request_id).cloned()
    }

    /// Applies `outcome` to a task that has not finished, if `tenant` owns it and, when
    /// given, `source` is the agent it was sent to; returns whether it changed.
    pub fn apply_from(
        &self,
        id: &str,
        tenant: &str,
        source: Option<&str>,
        outcome: Outcome,
    ) -> bool {
        let mut tables = self.lock();
        let Some(entry) = tables.tasks.get(id) else {
            return false;
        };
        if entry.owner.tenant != tenant || source.is_some_and(|s| s != entry.agent) {
            tracing::warn!(
                task_id = %id,
                tenant,
                source = source.unwrap_or_default(),
                "an update for an A2A task from another tenant or agent, ignored"
            );
            return false;
        }
        tables.apply(id, outcome, &self.limits)
    }

    /// Applies `outcome` to a task the gateway itself settles (a failed publish).
    pub fn apply(&self, id: &str, outcome: Outcome) -> bool {
        self.lock().apply(id, outcome, &self.limits)
    }

    /// Cancels a task `owner` started on `agent` that has not finished: returns it and the id
    /// of the request event that started it; `Err` with its state if it has finished. A late
    /// reply is ignored.
    pub fn cancel(
        &self,
        agent: &str,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<(Task, String)>, TaskState> {
        let mut tables = self.lock();
        let Some((state, request_id)) = tables
            .owned(agent, owner, id)
            .map(|e| (e.task.status.state, e.request_id.clone()))
        else {
            return Ok(None);
        };
        if state.is_terminal() {
            return Err(state);
        }
        tables.finish(
            id,
            TaskState::Canceled,
            "canceled by the client; a late reply is ignored".into(),
        );
        Ok(tables.tasks.get(id).map(|e| (e.task.clone(), request_id)))
    }

    /// Fails the working tasks whose deadline has passed; returns how many.
    pub fn expire(&self) -> usize {
        self.lock().expire(Instant::now())
    }

    /// How many tasks are kept, and how many bytes they hold.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let tables = self.lock();
        (tables.tasks.len(), tables.bytes)
    }
}

impl Tables {
    fn owned(&self, agent: &str, owner: &Owner, id: &str) -> Option<&Entry> {
        self.tasks
            .get(id)
            .filter(|e| e.agent == agent && &e.owner == owner)
    }

    fn apply(&mut self, id: &str, outcome: Outcome, limits: &TaskLimits) -> bool {
        let Some(entry) = self.tasks.get_mut(id) else {
            return false;
        };
        if entry.task.status.state.is_terminal() {
            return false;
        }
        match outcome {
            Outcome::Completed(result) => {
                let part = match result {
                    Value::String(text) => Part::text(text),
                    other => Part::data(other),
                };
                let mut artifact = Artifact::new("result", vec![part]);
                artifact.name = Some("result".into());
                let size = json_size(&artifact);
                if entry.bytes + size > limits.per_task_bytes {
                    let error = format!(
                        "the result ({size} bytes) is over the gateway's per-task budget ({} bytes, {} used by the request); ask for less, or raise TaskLimits::per_task_bytes",
                        limits.per_task_bytes, entry.bytes
                    );
                    self.finish(id, TaskState::Failed, error);
                } else {
                    entry.task.artifacts.push(artifact.clone());
                    entry.bytes += size;
                    let event = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent::new(
                        &entry.task.id,
                        &entry.task.context_id,
                        artifact,
                    ));
                    // No receiver is fine: nobody is streaming this task.
                    let _ = entry.updates.send(event);
                    let done = status(TaskState::Completed, None, &entry.task);
                    self.bytes += size;
                    self.finish_with(id, done);
                }
            }
            Outcome::Failed(error) => self.finish(id, TaskState::Failed, error),
            Outcome::Rejected(reason) => self.finish(id, TaskState::Rejected, reason),
            Outcome::Progress(fraction, note) => {
                let pct = (fraction * 100.0).round();
                let text = match note {
                    Some(note) => format!("{pct}%: {note}"),
                    None => format!("{pct}%"),
                };
                entry.task.status = status(TaskState::Working, Some(text), &entry.task);
                let _ =
                    entry
                        .updates
                        .send(StreamResponse::StatusUpdate(TaskStatusUpdateEvent::new(
                            &entry.task.id,
                            &entry.task.context_id,
                            entry.task.status.clone(),
                        )));
            }
        }
        self.enforce(limits);
        true
    }

    fn finish(&mut self, id: &str, state: TaskState, text: String) {
        if let Some(entry) = self.tasks.get(id) {
            let status = status(state, Some(text), &entry.task);
            self.finish_with(id, status);
        }
    }

    /// Sets a terminal status, tells the subscribers, and moves the task to `finished`.
    fn finish_with(&mut self, id: &str, status: TaskStatus) {
        let key = self.next_seq;
        let Some(entry) = self.tasks.get_mut(id) else {
            return;
        };
        entry.task.status = status;
        let _ = entry
            .updates
            .send(StreamResponse::StatusUpdate(TaskStatusUpdateEvent::new(
                &entry.task.id,
                &entry.task.context_id,
                entry.task.status.clone(),
            )));
        if entry.finished.is_none() {
            entry.finished = Some(key);
            let seq = entry.seq;
            let tenant = entry.owner.tenant.clone();
            self.next_seq += 1;
            self.working.remove(&seq);
            self.finished.insert(key, id.to_owned());
            self.finished_by_tenant
                .entry(tenant.clone())
                .or_default()
                .insert(key);
            self.not_working(&tenant);
        }
    }

    fn not_working(&mut self, tenant: &str) {
        if let Some(n) = self.working_by_tenant.get_mut(tenant) {
            *n -= 1;
            if *n == 0 {
                self.working_by_tenant.remove(tenant);
            }
        }
    }

    /// Fails the working tasks past their deadline (the oldest first; creation order is
    /// deadline order).
    fn expire(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some((_, id)) = self.working.first_key_value() {
            let id = id.clone();
            match self.tasks.get(&id) {
                Some(e) if e.deadline > now => break,
                Some(_) => {
                    self.finish(
                        &id,
                        TaskState::Failed,
                        "no reply from the agent within the gateway's task timeout".into(),
                    );
                    expired += 1;
                }
                None => {
                    self.working.pop_first();
                }
            }
        }
        expired
    }

    /// Drops finished tasks while over the count or byte limits: the oldest of the tenant
    /// holding the most (of those holding as many, the one with the oldest); the oldest working tasks (failed first) when no finished task is left.
    fn enforce(&mut self, limits: &TaskLimits) {
        while self.tasks.len() > limits.max_tasks || self.bytes > limits.total_bytes {
            let largest = crate::util::heaviest(
                self.finished_by_tenant
                    .values()
                    .filter_map(|keys| keys.first().map(|oldest| (*oldest, keys.len(), *oldest))),
            );
            if let Some(id) = largest.and_then(|key| self.finished.get(&key).cloned()) {
                self.remove(&id);
            } else if let Some((_, id)) = self.working.first_key_value() {
                let id = id.clone();
                self.finish(
                    &id,
                    TaskState::Failed,
                    "evicted: the gateway holds as many tasks as it may".into(),
                );
            } else {
                break;
            }
        }
    }

    fn remove(&mut self, id: &str) {
        let Some(entry) = self.tasks.remove(id) else {
            return;
        };
        self.bytes -= entry.bytes;
        self.by_request.remove(&entry.request_id);
        match entry.finished {
            Some(key) => {
                self.finished.remove(&key);
                if let Some(keys) = self.finished_by_tenant.get_mut(&entry.owner.tenant) {
                    keys.remove(&key);
                    if keys.is_empty() {
                        self.finished_by_tenant.remove(&entry.owner.tenant);
                    }
                }
            }
            None => {
                self.working.remove(&entry.seq);
                self.not_working(&entry.owner.tenant);
            }
        }
        let index_key = (entry.agent, entry.owner);
        if let Some(index) = self.by_owner.get_mut(&index_key) {
            index.remove(&entry.seq);
            if index.is_empty() {
                self.by_owner.remove(&index_key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(tenant: &str) -> Owner {
        Owner {
            tenant: tenant.into(),
            principal: "p".into(),
        }
    }

    fn task(text: &str) -> Task {
        let mut t = Task::new(new_id(), "ctx", TaskStatus::new(TaskState::Working));
        t.history
            .push(Message::new("m", Role::User, vec![Part::text(text)]));
        t
    }

    fn table(limits: TaskLimits) -> TaskTable {
        TaskTable::new(limits, Duration::from_secs(3600))
    }

    #[test]
    fn views_are_per_owner() {
        let t = table(TaskLimits::default());
        let acme = owner("acme");
        let task = task("hi");
        let id = task.id.clone();
        t.insert("calc", &acme, task, "r1".into()).unwrap();
        assert!(t.get("calc", &acme, &id, None).is_some());
        assert!(t.get("calc", &owner("globex"), &id, None).is_none());
        let other_principal = Owner {
            tenant: "acme".into(),
            principal: "q".into(),
        };
        assert!(t.get("calc", &other_principal, &id, None).is_none());
        assert_eq!(t.cancel("calc", &owner("globex"), &id), Ok(None));
        // A reply from another tenant, or from another agent, changes nothing.
        assert!(!t.apply_from(&id, "globex", Some("calc"), Outcome::Completed(Value::Null)));
        assert!(!t.apply_from(&id, "acme", Some("evil"), Outcome::Completed(Value::Null)));
        assert!(t.apply_from(&id, "acme", Some("calc"), Outcome::Completed(Value::Null)));
    }

    #[test]
    fn a_tenant_filling_the_table_drops_its_own_results_not_anothers() {
        let limits = TaskLimits::default().max_tasks(10).max_in_flight(10);
        let (acme, globex) = (owner("acme"), owner("globex"));
        let finished = |t: &TaskTable, o: &Owner, i: usize| {
            let task = task("result");
            let id = task.id.clone();
            t.insert("a", o, task, format!("{}{i}", o.tenant)).unwrap();
            t.apply(&id, Outcome::Completed(Value::String("ok".into())));
            id
        };
        // globex's results before acme's flood, and after it.
        let t = table(limits);
        let mut kept: Vec<String> = (0..3).map(|i| finished(&t, &globex, i)).collect();
        for i in 0..100 {
            finished(&t, &acme, i);
            assert!(t.usage().0 <= 10);
        }
        // Two more: globex then holds as many as acme, never more.
        kept.extend((3..5).map(|i| finished(&t, &globex, i)));
        for id in &kept {
            assert!(t.get("a", &globex, id, None).is_some(), "globex lost {id}");
        }
        // Alone, a tenant keeps its newest.
        let t = table(limits);
        let ids: Vec<String> = (0..20).map(|i| finished(&t, &acme, i)).collect();
        assert!(t.get("a", &acme, &ids[19], None).is_some());
        assert!(t.get("a", &acme, &ids[0], None).is_none());
    }

    #[test]
    fn finished_tasks_are_evicted_oldest_first_and_bytes_are_bounded() {
        let limits = TaskLimits::default()
            .max_tasks(10)
            .per_task_bytes(1000)
            .total_bytes(5_000)
            .max_in_flight(5);
        let t = table(limits);
        let o = owner("acme");
        let mut ids = Vec::new();
        for i in 0..100 {
            let task = task(&"x".repeat(if i % 2 == 0 { 10_000 } else { 300 }));
            ids.push(task.id.clone());
            t.insert("a", &o, task, format!("r{i}")).unwrap();
            t.apply(&ids[i], Outcome::Completed(Value::String("ok".into())));
            let (count, bytes) = t.usage();
            assert!(
                count <= 10 && bytes <= 5_000,
                "{count} tasks, {bytes} bytes"
            );
        }
        assert!(t.get("a", &o, &ids[99], None).is_some());
        assert!(t.get("a", &o, &ids[0], None).is_none());
        // The oversized message is a note now.
        let kept = t.get("a", &o, &ids[98], None).unwrap();
        let note = serde_json::to_string(&kept.history[0]).unwrap();
        assert!(note.contains("not kept"), "{note}");
    }

    #[test]
    fn in_flight_is_capped_and_stale_tasks_expire() {
        let t = TaskTable::new(
            TaskLimits::default().max_in_flight(2),
            Duration::from_millis(0),
        );
        let o = owner("acme");
        let (a, b) = (task("a"), task("b"));
        let a_id = a.id.clone();
        t.insert("x", &o, a, "1".into()).unwrap();
        t.insert("x", &o, b, "2".into()).unwrap();
        // Both are past their (zero) deadline: the next insert fails them and goes in.
        t.insert("x", &o, task("c"), "3".into()).unwrap();
        let a = t.get("x", &o, &a_id, None).unwrap();
        assert_eq!(a.status.state, TaskState::Failed);
        let long = TaskTable::new(
            TaskLimits::default().max_in_flight(1),
            Duration::from_secs(60),
        );
        long.insert("x", &o, task("a"), "1".into()).unwrap();
        assert_eq!(
            long.insert("x", &o, task("b"), "2".into())
                .unwrap_err()
                .in_flight,
            1
        );
        // One tenant cannot take every slot; another still gets in.
        let shared = TaskTable::new(
            TaskLimits::default()
                .max_in_flight(10)
                .max_in_flight_per_tenant(2),
            Duration::from_secs(60),
        );
        let first = task("1");
        let first_id = first.id.clone();
        shared.insert("x", &o, first, "1".into()).unwrap();
        shared.insert("x", &o, task("2"), "2".into()).unwrap();
        let busy = shared.insert("x", &o, task("3"), "3".into()).unwrap_err();
        assert_eq!(busy.tenant.as_deref(), Some("acme"));
        shared
            .insert("x", &owner("globex"), task("4"), "4".into())
            .unwrap();
        // A finished task frees its tenant's slot.
        shared.apply(&first_id, Outcome::Failed("done".into()));
        shared.insert("x", &o, task("5"), "5".into()).unwrap();
    }

    #[test]
    fn results_over_budget_fail_the_task() {
        let t = table(TaskLimits::default().per_task_bytes(500));
        let o = owner("acme");
        let task = task("hi");
        let id = task.id.clone();
        t.insert("a", &o, task, "r".into()).unwrap();
        t.apply(&id, Outcome::Completed(Value::String("y".repeat(1000))));
        let got = t.get("a", &o, &id, None).unwrap();
        assert_eq!(got.status.state, TaskState::Failed);
        assert!(got.artifacts.is_empty());
    }

    #[test]
    fn pages_are_bounded_in_count_and_bytes() {
        let t = table(TaskLimits::default().page_bytes(3_000));
        let o = owner("acme");
        for i in 0..10 {
            t.insert("a", &o, task(&"z".repeat(1000)), i.to_string())
                .unwrap();
        }
        let mut query = ListQuery {
            context_id: None,
            state: None,
            page_size: 100,
            page_token: None,
            history_length: None,
            include_artifacts: true,
        };
        let mut seen = 0;
        loop {
            let page = t.list("a", &o, &query);
            assert!(page.tasks.len() <= 2, "{}", page.tasks.len());
            assert_eq!(page.total_size, 10);
            seen += page.tasks.len();
            if page.next_page_token.is_empty() {
                break;
            }
            query.page_token = Some(page.next_page_token.parse().unwrap());
        }
        assert_eq!(seen, 10);
        assert!(t.list("a", &owner("globex"), &query).tasks.is_empty());
    }
}
