//! The gateway's A2A tasks: one per message sent, updated from the agent's reply and progress.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;
use soorma_common::a2a::{
    Artifact, Message, Part, Role, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus, TaskStatusUpdateEvent,
};
use tokio::sync::broadcast;

use crate::util::{new_id, now_rfc3339};

/// How many finished tasks are kept for `GetTask` before the oldest are dropped.
pub(crate) const KEEP_FINISHED: usize = 10_000;

struct Entry {
    agent: String,
    task: Task,
    request_id: String,
    created: Instant,
    updates: broadcast::Sender<StreamResponse>,
}

/// Every task the gateway started, by id.
#[derive(Default)]
pub(crate) struct TaskTable {
    inner: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    tasks: HashMap<String, Entry>,
    by_request: HashMap<String, String>,
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

pub(crate) fn status(state: TaskState, text: Option<String>, task: &Task) -> TaskStatus {
    let mut status = TaskStatus::new(state);
    status.timestamp = Some(now_rfc3339());
    if let Some(text) = text {
        let mut message = Message::new(new_id(), Role::Agent, vec![Part::text(text)]);
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        status.message = Some(message);
    }
    status
}

impl TaskTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a new task of `agent`; returns a receiver of its updates (subscribed before any).
    pub fn insert(
        &self,
        agent: &str,
        task: Task,
        request_id: String,
    ) -> broadcast::Receiver<StreamResponse> {
        let (updates, rx) = broadcast::channel(64);
        let mut tables = self.lock();
        if tables.tasks.len() >= KEEP_FINISHED {
            prune(&mut tables);
        }
        tables
            .by_request
            .insert(request_id.clone(), task.id.clone());
        tables.tasks.insert(
            task.id.clone(),
            Entry {
                agent: agent.to_owned(),
                task,
                request_id,
                created: Instant::now(),
                updates,
            },
        );
        rx
    }

    /// The task, if it belongs to `agent`; `history_length` trims its history.
    pub fn get(&self, agent: &str, id: &str, history_length: Option<i32>) -> Option<Task> {
        let tables = self.lock();
        let entry = tables.tasks.get(id).filter(|e| e.agent == agent)?;
        let mut task = entry.task.clone();
        if let Some(n) = history_length {
            let keep = usize::try_from(n.max(0)).unwrap_or(0);
            let skip = task.history.len().saturating_sub(keep);
            task.history.drain(..skip);
        }
        Some(task)
    }

    /// The tasks of `agent`, newest first, optionally of one context and state.
    pub fn list(
        &self,
        agent: &str,
        context_id: Option<&str>,
        state: Option<TaskState>,
        limit: usize,
    ) -> Vec<Task> {
        let tables = self.lock();
        let mut found: Vec<&Entry> = tables
            .tasks
            .values()
            .filter(|e| e.agent == agent)
            .filter(|e| context_id.is_none_or(|c| e.task.context_id == c))
            .filter(|e| state.is_none_or(|s| e.task.status.state == s))
            .collect();
        found.sort_by_key(|e| std::cmp::Reverse(e.created));
        found
            .into_iter()
            .take(limit)
            .map(|e| e.task.clone())
            .collect()
    }

    /// The task and a receiver of its later updates, if it belongs to `agent`.
    pub fn subscribe(
        &self,
        agent: &str,
        id: &str,
    ) -> Option<(Task, broadcast::Receiver<StreamResponse>)> {
        let tables = self.lock();
        let entry = tables.tasks.get(id).filter(|e| e.agent == agent)?;
        Some((entry.task.clone(), entry.updates.subscribe()))
    }

    /// Whether a task with this id exists.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().tasks.contains_key(id)
    }

    /// The task started by the request event `request_id`.
    pub fn by_request(&self, request_id: &str) -> Option<String> {
        self.lock().by_request.get(request_id).cloned()
    }

    /// Applies `outcome` to a task that has not finished; returns whether it changed.
    pub fn apply(&self, id: &str, outcome: Outcome) -> bool {
        let mut tables = self.lock();
        let Some(entry) = tables.tasks.get_mut(id) else {
            return false;
        };
        if entry.task.status.state.is_terminal() {
            return false;
        }
        let task = &mut entry.task;
        let mut events = Vec::new();
        match outcome {
            Outcome::Completed(result) => {
                let part = match result {
                    Value::String(text) => Part::text(text),
                    other => Part::data(other),
                };
                let mut artifact = Artifact::new("result", vec![part]);
                artifact.name = Some("result".into());
                task.artifacts.push(artifact.clone());
                events.push(StreamResponse::ArtifactUpdate(
                    TaskArtifactUpdateEvent::new(&task.id, &task.context_id, artifact),
                ));
                task.status = status(TaskState::Completed, None, task);
            }
            Outcome::Failed(error) => task.status = status(TaskState::Failed, Some(error), task),
            Outcome::Rejected(reason) => {
                task.status = status(TaskState::Rejected, Some(reason), task)
            }
            Outcome::Progress(fraction, note) => {
                let pct = (fraction * 100.0).round();
                let text = match note {
                    Some(note) => format!("{pct}%: {note}"),
                    None => format!("{pct}%"),
                };
                task.status = status(TaskState::Working, Some(text), task);
            }
        }
        events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent::new(
            &task.id,
            &task.context_id,
            task.status.clone(),
        )));
        for event in events {
            // No receiver is fine: nobody is streaming this task.
            let _ = entry.updates.send(event);
        }
        true
    }

    /// Cancels a task that has not finished; `Err` with its state if it has.
    pub fn cancel(&self, agent: &str, id: &str) -> Result<Option<Task>, TaskState> {
        let mut tables = self.lock();
        let Some(entry) = tables.tasks.get_mut(id).filter(|e| e.agent == agent) else {
            return Ok(None);
        };
        let task = &mut entry.task;
        if task.status.state.is_terminal() {
            return Err(task.status.state);
        }
        task.status = status(
            TaskState::Canceled,
            Some("canceled by the client; a late reply is ignored".into()),
            task,
        );
        let _ = entry
            .updates
            .send(StreamResponse::StatusUpdate(TaskStatusUpdateEvent::new(
                &task.id,
                &task.context_id,
                task.status.clone(),
            )));
        Ok(Some(task.clone()))
    }
}

/// Drops the oldest finished tasks, keeping at most half of [`KEEP_FINISHED`].
fn prune(tables: &mut Tables) {
    let mut finished: Vec<(Instant, String, String)> = tables
        .tasks
        .values()
        .filter(|e| e.task.status.state.is_terminal())
        .map(|e| (e.created, e.task.id.clone(), e.request_id.clone()))
        .collect();
    finished.sort();
    let excess = tables.tasks.len().saturating_sub(KEEP_FINISHED / 2);
    for (_, id, request) in finished.into_iter().take(excess) {
        tables.tasks.remove(&id);
        tables.by_request.remove(&request);
    }
}
