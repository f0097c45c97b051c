//! The fan-in coalescer: concurrent "this sub-task has a result" marks on one parent task go
//! into a few revision-checked writes, and the members of a complete group are loaded once.

use std::sync::Arc;

use soorma_common::{SubTaskInfo, TaskRecord};

use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::spi::state::{self, Change, StateKey};
use crate::util::now_rfc3339;

/// Coalesces concurrent "this sub-task has a result" marks on one parent task into a few
/// revision-checked writes: while one write is in flight, later marks queue and go into the
/// next one. Within a process this removes the write contention of a large fan-in; across
/// processes the revision check still arbitrates.
#[derive(Default)]
pub(crate) struct FanIn {
    lanes: std::sync::Mutex<std::collections::HashMap<StateKey, Vec<MarkWaiter>>>,
    complete: std::sync::Mutex<CompleteGroups>,
}

/// (tenant, task id, group id)
pub(crate) type GroupKey = (String, String, String);
type GroupCell = Arc<tokio::sync::OnceCell<Arc<Vec<SubTaskInfo>>>>;

/// The members of recently completed groups, loaded once (bounded, oldest evicted first).
#[derive(Default)]
struct CompleteGroups {
    cells: std::collections::HashMap<GroupKey, GroupCell>,
    order: std::collections::VecDeque<GroupKey>,
}

const COMPLETE_GROUPS_KEPT: usize = 256;

struct MarkWaiter {
    group: String,
    seq: u32,
    tx: tokio::sync::oneshot::Sender<std::result::Result<Marked, SharedError>>,
}

/// A mark written: the stored task after the write, and whether this mark is the one that
/// completed its group (true for exactly one mark per group, across every writer).
#[derive(Debug, Clone)]
pub(crate) struct Marked {
    /// The task as stored by the write, shared by every mark of that write: a parent record
    /// holds the task's whole request, so a copy per sub-task result would cost O(n) each,
    /// O(n²) for a fan-out of n.
    pub(crate) task: Arc<state::Versioned<TaskRecord>>,
    pub(crate) completed_group: bool,
}

/// The error of one coalesced write, reported to every mark it included.
#[derive(Debug, Clone)]
struct SharedError(Arc<Error>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The error itself, so that it decides whether retrying may succeed.
        Some(&*self.0)
    }
}

impl FanIn {
    /// Marks sub-task `seq` of `group` finished in the task at `key`; returns the stored task
    /// after a write that includes the mark, and whether this mark completed the group.
    pub(crate) async fn mark(
        self: &Arc<Self>,
        store: Arc<dyn crate::spi::state::StateStore>,
        key: StateKey,
        group: String,
        seq: u32,
    ) -> Result<Marked> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let lead = {
            let mut lanes = self.lanes.lock().expect("group marks lock");
            let waiter = MarkWaiter { group, seq, tx };
            match lanes.get_mut(&key) {
                Some(waiters) => {
                    waiters.push(waiter);
                    false
                }
                None => {
                    lanes.insert(key.clone(), vec![waiter]);
                    true
                }
            }
        };
        if lead {
            // A task of its own, so that no caller's cancellation can strand the queue.
            tokio::spawn(self.clone().drain(store, key.clone()));
        }
        let failed = || {
            EngineError::new(
                EngineErrorKind::StateWrite,
                format!("mark sub-task {seq} finished in `{key}`"),
            )
        };
        match rx.await {
            Ok(Ok(stored)) => Ok(stored),
            Ok(Err(e)) => Err(failed().with_source(e).into()),
            Err(_) => Err(failed().with_source("the fan-in writer stopped").into()),
        }
    }

    /// The members of a complete group, loaded by the first caller and shared with the rest.
    pub(crate) async fn complete_group(
        &self,
        key: GroupKey,
        load: impl std::future::Future<Output = Result<Vec<SubTaskInfo>>>,
    ) -> Result<Arc<Vec<SubTaskInfo>>> {
        let cell = {
            let mut complete = self.complete.lock().expect("complete groups lock");
            if let Some(cell) = complete.cells.get(&key) {
                cell.clone()
            } else {
                let cell = GroupCell::default();
                complete.cells.insert(key.clone(), cell.clone());
                complete.order.push_back(key);
                while complete.order.len() > COMPLETE_GROUPS_KEPT {
                    if let Some(old) = complete.order.pop_front() {
                        complete.cells.remove(&old);
                    }
                }
                cell
            }
        };
        cell.get_or_try_init(|| async { load.await.map(Arc::new) })
            .await
            .cloned()
    }

    async fn drain(self: Arc<Self>, store: Arc<dyn crate::spi::state::StateStore>, key: StateKey) {
        loop {
            let batch = {
                let mut lanes = self.lanes.lock().expect("group marks lock");
                let waiters = lanes.entry(key.clone()).or_default();
                if waiters.is_empty() {
                    lanes.remove(&key);
                    return;
                }
                std::mem::take(waiters)
            };
            let now = now_rfc3339();
            // Which waiter's mark completed its group in the write that succeeds (recomputed
            // on every attempt of the revision-checked update).
            let result = state::update_with(
                &*store,
                "task",
                &key,
                || Error::TaskNotFound(key.key.clone()),
                |rec: &mut TaskRecord| {
                    let mut completed = vec![false; batch.len()];
                    let mut changed = false;
                    for (i, w) in batch.iter().enumerate() {
                        let group = rec.groups.get_mut(&w.group).ok_or_else(|| {
                            EngineError::new(
                                EngineErrorKind::Inconsistent,
                                format!(
                                    "task `{}` has no delegation group `{}`",
                                    rec.task_id, w.group
                                ),
                            )
                        })?;
                        let was_complete = group.is_complete();
                        let marked = group.mark_finished(w.seq);
                        changed |= marked;
                        completed[i] = marked && !was_complete && group.is_complete();
                    }
                    if changed {
                        rec.updated_at = Some(now.clone());
                        Ok(Change::Write(completed))
                    } else {
                        Ok(Change::Keep(completed))
                    }
                },
            )
            .await
            .map(|(completed, stored)| (completed, Arc::new(stored)))
            .map_err(|e| SharedError(Arc::new(e)));
            for (i, w) in batch.into_iter().enumerate() {
                let marked = result.as_ref().map(|(completed, stored)| Marked {
                    task: stored.clone(),
                    completed_group: completed[i],
                });
                let _ = w.tx.send(marked.map_err(Clone::clone));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use soorma_common::SubTaskGroup;

    use super::*;
    use crate::engine::embedded::MemoryStore;
    use crate::spi::state::StateStore;

    /// Marks that go into one write share the stored task: a fan-out of n does not copy its
    /// (request-sized) task n times. On one thread every mark queues before the writer runs,
    /// so all go into one write.
    #[tokio::test]
    async fn marks_of_one_write_share_the_stored_task() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let key = StateKey::new("tasks", "acme", "t");
        let mut record = TaskRecord::new("t", "w", "e.requested");
        record.data = serde_json::json!({"big": "x".repeat(100_000)});
        record
            .groups
            .insert("g".into(), SubTaskGroup::new("g", 0, 200));
        store
            .create(&key, serde_json::to_vec(&record).unwrap())
            .await
            .unwrap();
        let fan_in = Arc::new(FanIn::default());
        let marks: Vec<_> = (0..200u32)
            .map(|seq| {
                let (fan_in, store, key) = (fan_in.clone(), store.clone(), key.clone());
                tokio::spawn(async move { fan_in.mark(store, key, "g".into(), seq).await })
            })
            .collect();
        let mut marked = Vec::new();
        for m in marks {
            marked.push(m.await.unwrap().unwrap());
        }
        assert_eq!(marked.iter().filter(|m| m.completed_group).count(), 1);
        let mut copies: Vec<*const state::Versioned<TaskRecord>> =
            marked.iter().map(|m| Arc::as_ptr(&m.task)).collect();
        copies.sort();
        copies.dedup();
        assert_eq!(
            copies.len(),
            1,
            "copies of the task for {} marks",
            marked.len()
        );
    }
}
