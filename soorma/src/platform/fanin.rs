//! The fan-in coalescer: concurrent sub-task results of one parent task go into a few writes
//! (per batch, one results chunk per group and one revision-checked update of the parent), and
//! immutable records (delegation groups, the members of complete groups) are loaded once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use soorma_common::{ChunkResult, DelegationGroup, MemberPage, SubTaskInfo, TaskRecord};

use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::spi::state::{self, StateKey, StateStore, Versioned};
use crate::util::{concurrently, now_rfc3339};

/// Coalesces concurrent results of one parent task: while one write is in flight, later
/// results queue and go into the next one. Each batch costs one results chunk per group (more
/// only for results too large for one record) and one revision-checked update of the parent,
/// which sets the results' bits and lists the chunk. Within a process this removes the write
/// contention of a large fan-in; across processes the revision check still arbitrates.
pub(crate) struct FanIn {
    lanes: Mutex<HashMap<StateKey, Vec<MarkWaiter>>>,
    /// The members of complete groups (their results never change).
    pub(crate) complete: OnceCache<GroupKey, Vec<SubTaskInfo>>,
    /// Delegation group records (never changed once written), by key.
    pub(crate) groups: OnceCache<StateKey, DelegationGroup>,
    /// The further pages of large groups' records, by key.
    pub(crate) pages: OnceCache<StateKey, MemberPage>,
}

impl Default for FanIn {
    fn default() -> Self {
        Self {
            lanes: Mutex::default(),
            complete: OnceCache::new(COMPLETE_GROUPS_KEPT),
            groups: OnceCache::new(GROUP_RECORDS_KEPT),
            pages: OnceCache::new(GROUP_PAGES_KEPT),
        }
    }
}

/// (tenant, task id, group id)
pub(crate) type GroupKey = (String, String, String);

/// How many complete groups' members are kept loaded.
const COMPLETE_GROUPS_KEPT: usize = 256;
/// How many delegation group records are kept loaded (each holds its members' event types,
/// run-length encoded, 64 KiB at most: larger groups are paged).
const GROUP_RECORDS_KEPT: usize = 256;
/// How many further pages of large groups are kept loaded (64 KiB at most each).
const GROUP_PAGES_KEPT: usize = 64;
/// The encoded results one chunk holds at most, about (a single larger result gets a chunk
/// of its own: it arrived in one message, so it fits in one record).
const CHUNK_BYTES: usize = 256 * 1024;

/// Values loaded once and shared, for records that never change once written (bounded:
/// oldest evicted first; a failed load is not kept).
pub(crate) struct OnceCache<K, V> {
    kept: usize,
    cells: Mutex<CacheCells<K, V>>,
}

struct CacheCells<K, V> {
    cells: HashMap<K, Arc<tokio::sync::OnceCell<Arc<V>>>>,
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V> OnceCache<K, V> {
    /// A cache keeping at most `kept` values.
    pub(crate) fn new(kept: usize) -> Self {
        Self {
            kept,
            cells: Mutex::new(CacheCells {
                cells: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    /// The value of `key`: loaded by the first caller, shared with the rest.
    pub(crate) async fn get_or_load(
        &self,
        key: K,
        load: impl std::future::Future<Output = Result<V>>,
    ) -> Result<Arc<V>> {
        let cell = {
            let mut c = self.cells.lock().expect("fan-in cache lock");
            if let Some(cell) = c.cells.get(&key) {
                cell.clone()
            } else {
                let cell = Arc::new(tokio::sync::OnceCell::new());
                c.cells.insert(key.clone(), cell.clone());
                c.order.push_back(key.clone());
                cell
            }
        };
        let loaded = cell
            .get_or_try_init(|| async { load.await.map(Arc::new) })
            .await
            .cloned();
        let mut c = self.cells.lock().expect("fan-in cache lock");
        if loaded.is_err() {
            // Not found (a forged or stale id) or unreadable: not kept, so that unknown keys
            // do not push known ones out, and a later load tries again.
            if c.cells
                .get(&key)
                .is_some_and(|kept| Arc::ptr_eq(kept, &cell) && !kept.initialized())
            {
                c.cells.remove(&key);
                c.order.retain(|k| *k != key);
            }
        } else {
            // Only a value loaded makes room (loads in flight, which may fail, do not push
            // loaded values out; there are at most as many as callers waiting).
            while c.order.len() > self.kept {
                if let Some(old) = c.order.pop_front() {
                    c.cells.remove(&old);
                }
            }
        }
        drop(c);
        loaded
    }
}

struct MarkWaiter {
    mark: Mark,
    tx: tokio::sync::oneshot::Sender<std::result::Result<Marked, SharedError>>,
}

/// One sub-task result to record: its group record's key (the group's results chunks are
/// stored beside it) and the result.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub(crate) group: StateKey,
    pub(crate) result: ChunkResult,
    /// The id of the result event being recorded (recorded as the group's `completed_by`
    /// when it completes the group).
    pub(crate) event_id: String,
}

impl Mark {
    fn group_id(&self) -> &str {
        &self.group.key
    }
}

/// A mark written: the stored task after the write, and whether this mark is the one that
/// completed its group (true for exactly one mark per group, across every writer).
#[derive(Debug, Clone)]
pub(crate) struct Marked {
    /// The task as stored by the write, shared by every mark of that write: a parent record
    /// holds the task's whole request, so a copy per sub-task result would cost O(n) each,
    /// O(n²) for a fan-out of n.
    pub(crate) task: Arc<Versioned<TaskRecord>>,
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

/// A results chunk written for a batch: its id and the sequence numbers it holds.
struct Chunk {
    id: String,
    seqs: HashSet<u32>,
}

impl FanIn {
    /// Records `mark`'s result in the task at `key` (first result of a sub-task wins); returns
    /// the stored task after a write that includes it, and whether it completed its group.
    pub(crate) async fn mark(
        self: &Arc<Self>,
        store: Arc<dyn StateStore>,
        key: StateKey,
        mark: Mark,
    ) -> Result<Marked> {
        let seq = mark.result.seq;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let lead = {
            let mut lanes = self.lanes.lock().expect("group marks lock");
            let waiter = MarkWaiter { mark, tx };
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
                format!("record the result of sub-task {seq} in `{key}`"),
            )
        };
        match rx.await {
            Ok(Ok(stored)) => Ok(stored),
            Ok(Err(e)) => Err(failed().with_source(e).into()),
            Err(_) => Err(failed().with_source("the fan-in writer stopped").into()),
        }
    }

    async fn drain(self: Arc<Self>, store: Arc<dyn StateStore>, key: StateKey) {
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
            let marks: Vec<&Mark> = batch.iter().map(|w| &w.mark).collect();
            let result = write_batch(&store, &key, &marks)
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

/// Records a batch of results in the task at `key`: writes a results chunk per group for the
/// results not recorded yet, then, revision-checked, sets their bits and lists the chunks.
/// Retried on conflict (reusing the chunks written). Returns which mark completed its group
/// and the task as stored.
async fn write_batch(
    store: &Arc<dyn StateStore>,
    key: &StateKey,
    marks: &[&Mark],
) -> Result<(Vec<bool>, Versioned<TaskRecord>)> {
    let mut written: HashMap<String, Vec<Chunk>> = HashMap::new();
    let mut merges = Merges::new();
    for attempt in 0..state::MAX_ATTEMPTS {
        let Some(mut current) = state::load::<TaskRecord>(&**store, "task", key).await? else {
            return Err(Error::TaskNotFound(key.key.clone()));
        };
        let rec = &mut current.value;
        // The marks that set a bit (first result of each sub-task), and the one that
        // completed its group.
        let mut fresh = vec![false; marks.len()];
        let mut completed = vec![false; marks.len()];
        for (i, m) in marks.iter().enumerate() {
            let Some(group) = rec.groups.get_mut(m.group_id()) else {
                // A workflow run drops the group of an attempt that ended: a late or repeated
                // reply to it changes nothing.
                if rec.workflow.is_some() {
                    continue;
                }
                return Err(EngineError::new(
                    EngineErrorKind::Inconsistent,
                    format!(
                        "task `{}` has no delegation group `{}`",
                        rec.task_id,
                        m.group_id()
                    ),
                )
                .into());
            };
            let was_complete = group.is_complete();
            fresh[i] = group.mark_finished(m.result.seq);
            completed[i] = fresh[i] && !was_complete && group.is_complete();
            if completed[i] {
                group.completed_by = Some(m.event_id.clone());
            }
        }
        if !fresh.contains(&true) {
            // Every result was recorded already (a redelivery): nothing to write.
            return Ok((completed, current));
        }
        // The chunks hold every result fresh in this attempt (bits only ever get set, so on a
        // retry the results left fresh are among those of the chunks already written).
        let missing: Vec<&Mark> = marks
            .iter()
            .zip(&fresh)
            .filter(|(m, fresh)| {
                **fresh
                    && !written
                        .get(m.group_id())
                        .is_some_and(|cs| cs.iter().any(|c| c.seqs.contains(&m.result.seq)))
            })
            .map(|(m, _)| *m)
            .collect();
        for (group, chunk) in write_chunks(store, &missing).await? {
            written.entry(group).or_default().push(chunk);
        }
        // List the chunks that hold a result newly recorded.
        for (m, _) in marks.iter().zip(&fresh).filter(|(_, fresh)| **fresh) {
            let chunk = written
                .get(m.group_id())
                .and_then(|cs| cs.iter().find(|c| c.seqs.contains(&m.result.seq)));
            if let (Some(group), Some(chunk)) = (rec.groups.get_mut(m.group_id()), chunk)
                && !group.chunks.contains(&chunk.id)
            {
                // (Both are there: the group was checked and the chunk written above.)
                group.chunks.push(chunk.id.clone());
            }
        }
        // Keep the lists that grew short: a group whose results come one batch at a time
        // would otherwise list a chunk per result.
        let grown: HashMap<&str, &StateKey> = marks
            .iter()
            .zip(&fresh)
            .filter(|(_, fresh)| **fresh)
            .map(|(m, _)| (m.group_id(), &m.group))
            .collect();
        for (group_id, group_key) in grown {
            if let Some(group) = rec.groups.get_mut(group_id) {
                compact(store, group_key, &mut group.chunks, &mut merges).await;
            }
        }
        rec.updated_at = Some(now_rfc3339());
        let bytes = state::encode("task", rec)?;
        match store.update(key, bytes, current.revision).await {
            Ok(revision) => {
                current.revision = revision;
                return Ok((completed, current));
            }
            Err(Error::Conflict { .. }) => state::backoff(attempt).await,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict {
        key: key.to_string(),
    })
}

/// Writes the results of `marks` as chunks (one per group, split when large), concurrently;
/// returns each chunk's group and what it holds.
async fn write_chunks(
    store: &Arc<dyn StateStore>,
    marks: &[&Mark],
) -> Result<Vec<(String, Chunk)>> {
    let mut by_group: HashMap<&StateKey, Vec<&ChunkResult>> = HashMap::new();
    for m in marks {
        by_group.entry(&m.group).or_default().push(&m.result);
    }
    let mut chunks = Vec::new();
    for (group, results) in by_group {
        // Each result encoded once.
        let mut parts: Vec<(u32, Vec<u8>)> = Vec::with_capacity(results.len());
        for r in results {
            parts.push((r.seq, state::encode("sub-task result", r)?));
        }
        for (seqs, record) in pack(&parts) {
            let id = new_chunk_id(&chunk_prefix(record.len(), 0));
            let key = chunk_key(group, &id);
            chunks.push((group.key.clone(), Chunk { id, seqs }, key, record));
        }
    }
    let writes: Vec<(StateKey, Vec<u8>)> = chunks
        .iter_mut()
        .map(|(_, _, key, record)| (key.clone(), std::mem::take(record)))
        .collect();
    create_chunks(store, writes).await?;
    Ok(chunks
        .into_iter()
        .map(|(group, chunk, _, _)| (group, chunk))
        .collect())
}

/// How many chunk writes of one batch are in flight at once.
const CHUNK_WRITES_IN_FLIGHT: usize = 16;

/// Creates the chunk records `writes` (key, encoded record), [`CHUNK_WRITES_IN_FLIGHT`] at once.
async fn create_chunks(
    store: &Arc<dyn StateStore>,
    writes: Vec<(StateKey, Vec<u8>)>,
) -> Result<()> {
    let store = store.clone();
    concurrently(writes, CHUNK_WRITES_IN_FLIGHT, move |(key, record)| {
        let store = store.clone();
        async move { store.create(&key, record).await.map(drop) }
    })
    .await
    .map(drop)
}

/// Encoded results packed, in order, into chunk records (`{"results":[..]}`) of about
/// [`CHUNK_BYTES`] each: each record's sequence numbers and bytes.
fn pack(parts: &[(u32, Vec<u8>)]) -> Vec<(HashSet<u32>, Vec<u8>)> {
    let mut records = Vec::new();
    let mut start = 0;
    while start < parts.len() {
        let mut end = start + 1;
        let mut bytes = parts[start].1.len();
        while end < parts.len() && bytes + parts[end].1.len() < CHUNK_BYTES {
            bytes += parts[end].1.len() + 1;
            end += 1;
        }
        let mut record = Vec::with_capacity(bytes + 16);
        record.extend_from_slice(br#"{"results":["#);
        for (i, (_, part)) in parts[start..end].iter().enumerate() {
            if i > 0 {
                record.push(b',');
            }
            record.extend_from_slice(part);
        }
        record.extend_from_slice(b"]}");
        records.push((
            parts[start..end].iter().map(|(seq, _)| *seq).collect(),
            record,
        ));
        start = end;
    }
    records
}

/// A new chunk id: `prefix` (which says what the chunk may be merged with, see
/// [`chunk_prefix`]) and 16 random hex digits.
fn new_chunk_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", uuid::Uuid::new_v4().as_u64_pair().0)
}

/// Where chunk `id` of the group stored at `group` is stored.
fn chunk_key(group: &StateKey, id: &str) -> StateKey {
    StateKey::new(
        group.bucket,
        group.tenant.clone(),
        format!("{}-{id}", group.key),
    )
}

/// How many chunks of one level, listed last in a group, are merged into one chunk of the
/// next level.
const CHUNKS_MERGED: usize = 16;
/// The most chunks one merge reads (a longer run, listed before merges existed or grown while
/// a chunk could not be read, is merged this many at a time, oldest first).
const MAX_MERGED: usize = 64;
/// The most merges one update of the parent makes per group (a cascade up the levels; what is
/// left waits for the next batch).
const MAX_MERGES: usize = MAX_LEVEL as usize + 1;
/// The highest level: chunks of it are not merged further (16⁹ batches are never reached).
const MAX_LEVEL: u8 = 9;

/// The prefix of a new chunk's id holding `bytes` of results, of merge level `level`: `f` (full,
/// never merged) from half of [`CHUNK_BYTES`] on, else `r` for a batch's chunk (level 0) and
/// `m<level>` for a merge's.
fn chunk_prefix(bytes: usize, level: u8) -> String {
    match level {
        _ if bytes >= CHUNK_BYTES / 2 => "f".to_owned(),
        0 => "r".to_owned(),
        n => format!("m{n}"),
    }
}

/// The merge level of chunk `id` (see [`chunk_prefix`]); `None` for a full chunk, never merged.
fn chunk_level(id: &str) -> Option<u8> {
    let mut chars = id.chars();
    match chars.next()? {
        'r' => Some(0),
        'm' => chars
            .next()?
            .to_digit(10)
            .and_then(|n| u8::try_from(n).ok()),
        _ => None,
    }
}

/// The chunks a merge of a run of listed chunks wrote in their place, by the run (reused when
/// the parent update is retried).
type Merges = HashMap<Vec<String>, Vec<String>>;

/// Merges runs of [`CHUNKS_MERGED`] or more chunks of one level that end `chunks` (the list of
/// the group stored at `group`) into chunks of the next level, in place. A group's list thus
/// holds fewer than [`CHUNKS_MERGED`] chunks per level after its last full chunk, however
/// many batches its results came in. A merge that fails leaves the list as it is (tried again
/// with the next batch): recording results never depends on it.
async fn compact(
    store: &Arc<dyn StateStore>,
    group: &StateKey,
    chunks: &mut Vec<String>,
    merges: &mut Merges,
) {
    for _ in 0..MAX_MERGES {
        let Some((run, level)) = mergeable_tail(chunks) else {
            return;
        };
        let ids = chunks[run.clone()].to_vec();
        let merged = match merges.get(&ids) {
            Some(merged) => merged.clone(),
            None => match merge(store, group, &ids, level + 1).await {
                Ok(merged) => {
                    merges.insert(ids, merged.clone());
                    merged
                }
                Err(e) => {
                    tracing::warn!(
                        group = %group, chunks = ids.len(), error = %e,
                        "sub-task results chunks not merged (tried again with the next results)"
                    );
                    return;
                }
            },
        };
        chunks.splice(run, merged);
    }
}

/// The chunks to merge next: the first [`MAX_MERGED`] of the run of chunks of one level that
/// ends `chunks`, when that run is [`CHUNKS_MERGED`] long or longer and below [`MAX_LEVEL`];
/// and their level.
fn mergeable_tail(chunks: &[String]) -> Option<(std::ops::Range<usize>, u8)> {
    let level = chunk_level(chunks.last()?)?;
    let run = chunks
        .iter()
        .rev()
        .take_while(|c| chunk_level(c) == Some(level))
        .count();
    let start = chunks.len() - run;
    (run >= CHUNKS_MERGED && level < MAX_LEVEL)
        .then_some((start..start + run.min(MAX_MERGED), level))
}

/// Writes the results of the chunks `run` (in list order, the first result of each sub-task
/// only: the one readers take; each copied as stored) as new chunks of `level` (or full).
/// Returns their ids, in order.
async fn merge(
    store: &Arc<dyn StateStore>,
    group: &StateKey,
    run: &[String],
    level: u8,
) -> Result<Vec<String>> {
    let keys: Vec<StateKey> = run.iter().map(|id| chunk_key(group, id)).collect();
    let loaded = {
        let store = store.clone();
        concurrently(keys, CHUNK_WRITES_IN_FLIGHT, move |key: StateKey| {
            let store = store.clone();
            async move {
                let Some(stored) = store.get(&key).await? else {
                    return Err(EngineError::new(
                        EngineErrorKind::Inconsistent,
                        format!("listed results chunk `{key}` is missing"),
                    )
                    .into());
                };
                Ok((key, stored.value))
            }
        })
        .await?
    };
    /// A stored chunk, its results left as they are.
    #[derive(serde::Deserialize)]
    struct RawChunk<'a> {
        #[serde(borrow)]
        results: Vec<&'a serde_json::value::RawValue>,
    }
    /// The one field of a result a merge reads.
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u32,
    }
    let mut seen = HashSet::new();
    let mut parts = Vec::new();
    for (key, bytes) in &loaded {
        let corrupt = |source| Error::CorruptState {
            what: "sub-task results",
            key: key.to_string(),
            source,
        };
        let chunk: RawChunk<'_> = serde_json::from_slice(bytes).map_err(corrupt)?;
        for raw in chunk.results {
            let Seq { seq } = serde_json::from_str(raw.get()).map_err(corrupt)?;
            if seen.insert(seq) {
                parts.push((seq, raw.get().as_bytes().to_vec()));
            }
        }
    }
    let mut ids = Vec::new();
    let mut writes = Vec::new();
    for (_, record) in pack(&parts) {
        let id = new_chunk_id(&chunk_prefix(record.len(), level));
        writes.push((chunk_key(group, &id), record));
        ids.push(id);
    }
    create_chunks(store, writes).await?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use soorma_common::{ResultChunk, SubTaskGroup, SubTaskStatus};

    use super::*;
    use crate::engine::embedded::MemoryStore;
    use crate::spi::state::Revision;
    use crate::util::BoxFuture;

    /// A memory store counting its writes; its first `conflicts` updates fail with a conflict
    /// (as if another process had written first).
    #[derive(Default)]
    struct Counting {
        inner: MemoryStore,
        creates: AtomicUsize,
        updates: AtomicUsize,
        puts: AtomicUsize,
        conflicts: AtomicUsize,
    }

    impl Counting {
        fn writes(&self) -> (usize, usize, usize) {
            (
                self.creates.load(Ordering::SeqCst),
                self.updates.load(Ordering::SeqCst),
                self.puts.load(Ordering::SeqCst),
            )
        }
    }

    impl StateStore for Counting {
        fn get<'a>(
            &'a self,
            key: &'a StateKey,
        ) -> BoxFuture<'a, Result<Option<Versioned<Vec<u8>>>>> {
            self.inner.get(key)
        }
        fn create<'a>(
            &'a self,
            key: &'a StateKey,
            value: Vec<u8>,
        ) -> BoxFuture<'a, Result<Revision>> {
            self.creates.fetch_add(1, Ordering::SeqCst);
            self.inner.create(key, value)
        }
        fn update<'a>(
            &'a self,
            key: &'a StateKey,
            value: Vec<u8>,
            expected: Revision,
        ) -> BoxFuture<'a, Result<Revision>> {
            self.updates.fetch_add(1, Ordering::SeqCst);
            let lose = self
                .conflicts
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lose {
                return Box::pin(async move {
                    Err(Error::Conflict {
                        key: key.to_string(),
                    })
                });
            }
            self.inner.update(key, value, expected)
        }
        fn put<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            self.inner.put(key, value)
        }
        fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<()>> {
            self.inner.delete(key)
        }
        fn keys<'a>(
            &'a self,
            bucket: &'static str,
            tenant: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>>> {
            self.inner.keys(bucket, tenant)
        }
        fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Vec<String>>> {
            self.inner.tenants(bucket)
        }
    }

    fn task_key() -> StateKey {
        StateKey::new("tasks", "acme", "t")
    }

    /// A stored task `t` with a group `g` of `size`, its request `request_bytes` long.
    async fn task_with_group(store: &dyn StateStore, size: u32, request_bytes: usize) {
        let mut record = TaskRecord::new("t", "w", "e.requested");
        record.data = json!({"big": "x".repeat(request_bytes)});
        record
            .groups
            .insert("g".into(), SubTaskGroup::new("g", 0, size));
        store
            .create(&task_key(), serde_json::to_vec(&record).unwrap())
            .await
            .unwrap();
    }

    fn mark(seq: u32, value: serde_json::Value) -> Mark {
        Mark {
            group: StateKey::new("subtasks", "acme", "g"),
            result: ChunkResult::completed(seq, value),
            event_id: format!("reply-{seq}"),
        }
    }

    /// Records every mark concurrently (on one thread every mark queues before the writer
    /// runs, so all go into one write).
    async fn mark_all(
        fan_in: &Arc<FanIn>,
        store: &Arc<dyn StateStore>,
        marks: Vec<Mark>,
    ) -> Vec<Marked> {
        let tasks: Vec<_> = marks
            .into_iter()
            .map(|m| {
                let (fan_in, store) = (fan_in.clone(), store.clone());
                tokio::spawn(async move { fan_in.mark(store, task_key(), m).await })
            })
            .collect();
        let mut marked = Vec::new();
        for t in tasks {
            marked.push(t.await.unwrap().unwrap());
        }
        marked
    }

    /// The group's sub-tasks as a reader assembles them from the stored task and chunks.
    async fn stored_results(store: &dyn StateStore, size: u32) -> Vec<SubTaskInfo> {
        let task: TaskRecord = state::load(store, "task", &task_key())
            .await
            .unwrap()
            .unwrap()
            .value;
        let progress = &task.groups["g"];
        let (group, _) =
            DelegationGroup::paged("g", "t", 0, (0..size).map(|_| ("e", "r")), 64 * 1024);
        let mut chunks = Vec::new();
        for c in &progress.chunks {
            let key = StateKey::new("subtasks", "acme", group.chunk_key(c));
            chunks.push(
                state::load::<ResultChunk>(store, "chunk", &key)
                    .await
                    .unwrap()
                    .unwrap()
                    .value,
            );
        }
        group.sub_tasks(progress, &[group.first_page()], &chunks)
    }

    /// Marks that go into one write share the stored task: a fan-out of n does not copy its
    /// (request-sized) task n times.
    #[tokio::test]
    async fn marks_of_one_write_share_the_stored_task() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        task_with_group(&*store, 200, 100_000).await;
        let fan_in = Arc::new(FanIn::default());
        let marked = mark_all(
            &fan_in,
            &store,
            (0..200u32).map(|seq| mark(seq, json!(seq))).collect(),
        )
        .await;
        assert_eq!(marked.iter().filter(|m| m.completed_group).count(), 1);
        let mut copies: Vec<*const Versioned<TaskRecord>> =
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

    /// A drained batch of n results costs one results chunk and one parent update, not a write
    /// per result; readers find every result.
    #[tokio::test]
    async fn a_batch_of_results_is_one_chunk_write_and_one_parent_write() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn StateStore> = counting.clone();
        task_with_group(&*store, 500, 10).await;
        let before = counting.writes();
        let fan_in = Arc::new(FanIn::default());
        mark_all(
            &fan_in,
            &store,
            (0..500u32).map(|seq| mark(seq, json!(seq * 2))).collect(),
        )
        .await;
        let (creates, updates, puts) = counting.writes();
        assert_eq!(
            (creates - before.0, updates - before.1, puts - before.2),
            (1, 1, 0),
            "(chunk creates, parent updates, puts) for a batch of 500 results"
        );
        let results = stored_results(&*store, 500).await;
        assert!(
            results
                .iter()
                .all(|s| s.status == SubTaskStatus::Completed
                    && s.result == Some(json!(s.seq * 2)))
        );
    }

    /// First result wins: a redelivered result with another outcome, in a later batch or in
    /// the same one, changes nothing; a batch of only duplicates writes nothing.
    #[tokio::test]
    async fn a_result_recorded_twice_keeps_the_first_outcome() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn StateStore> = counting.clone();
        task_with_group(&*store, 3, 10).await;
        let fan_in = Arc::new(FanIn::default());
        let first = mark_all(&fan_in, &store, vec![mark(0, json!("first"))]).await;
        assert!(!first[0].completed_group);
        let writes = counting.writes();
        let again = mark_all(&fan_in, &store, vec![mark(0, json!("again"))]).await;
        assert!(!again[0].completed_group);
        assert_eq!(
            counting.writes(),
            writes,
            "a duplicate alone writes nothing"
        );
        let failed = Mark {
            group: StateKey::new("subtasks", "acme", "g"),
            result: ChunkResult::failed(1, "boom"),
            event_id: "reply-1-failed".into(),
        };
        let marked = mark_all(
            &fan_in,
            &store,
            vec![
                failed,
                mark(1, json!("late")),
                mark(0, json!("third")),
                mark(2, json!(2)),
            ],
        )
        .await;
        assert_eq!(
            marked.iter().map(|m| m.completed_group).collect::<Vec<_>>(),
            [false, false, false, true]
        );
        let results = stored_results(&*store, 3).await;
        assert_eq!(results[0].result, Some(json!("first")));
        assert_eq!(results[1].status, SubTaskStatus::Failed);
        assert_eq!(results[1].error.as_deref(), Some("boom"));
        assert_eq!(results[1].result, None);
        assert_eq!(results[2].result, Some(json!(2)));
    }

    /// A parent update that loses a race is retried with the chunk already written (not a new
    /// one per attempt).
    #[tokio::test]
    async fn a_retried_parent_update_reuses_its_chunk() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn StateStore> = counting.clone();
        task_with_group(&*store, 10, 10).await;
        counting.conflicts.store(3, Ordering::SeqCst);
        let before = counting.writes();
        let fan_in = Arc::new(FanIn::default());
        mark_all(
            &fan_in,
            &store,
            (0..10u32).map(|seq| mark(seq, json!(seq))).collect(),
        )
        .await;
        let (creates, updates, _) = counting.writes();
        assert_eq!((creates - before.0, updates - before.1), (1, 4));
        let task: TaskRecord = state::load(&*store, "task", &task_key())
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(task.groups["g"].chunks.len(), 1);
        assert!(task.groups["g"].is_complete());
    }

    /// Results too large for one record are split over several chunks, all listed.
    #[tokio::test]
    async fn large_results_are_split_over_chunks() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        task_with_group(&*store, 8, 10).await;
        let fan_in = Arc::new(FanIn::default());
        let big = "y".repeat(CHUNK_BYTES / 3);
        mark_all(
            &fan_in,
            &store,
            (0..8u32).map(|seq| mark(seq, json!(big))).collect(),
        )
        .await;
        let task: TaskRecord = state::load(&*store, "task", &task_key())
            .await
            .unwrap()
            .unwrap()
            .value;
        assert!(
            task.groups["g"].chunks.len() >= 3,
            "{:?}",
            task.groups["g"].chunks
        );
        let results = stored_results(&*store, 8).await;
        assert!(results.iter().all(|s| s.result == Some(json!(big))));
    }

    /// The chunk list of a group whose results come one batch at a time stays short: runs of
    /// chunks of one level are merged into one of the next, and readers find every result.
    #[tokio::test]
    async fn results_recorded_one_batch_at_a_time_keep_the_chunk_list_short() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let size = 3_000;
        task_with_group(&*store, size, 10).await;
        let fan_in = Arc::new(FanIn::default());
        let mut longest = 0;
        for seq in 0..size {
            let marked = fan_in
                .mark(store.clone(), task_key(), mark(seq, json!(seq * 3)))
                .await
                .unwrap();
            longest = longest.max(marked.task.value.groups["g"].chunks.len());
        }
        // 3,000 batches: fewer than 16 chunks per level, levels 0 to 2.
        assert!(longest < 3 * CHUNKS_MERGED, "{longest} chunks listed");
        let task: TaskRecord = state::load(&*store, "task", &task_key())
            .await
            .unwrap()
            .unwrap()
            .value;
        let levels: Vec<Option<u8>> = task.groups["g"]
            .chunks
            .iter()
            .map(|c| chunk_level(c))
            .collect();
        assert!(levels.contains(&Some(2)), "{levels:?}");
        assert!(task.groups["g"].is_complete());
        let results = stored_results(&*store, size).await;
        assert_eq!(results.len(), size as usize);
        for s in &results {
            assert_eq!(s.status, SubTaskStatus::Completed, "{s:?}");
            assert_eq!(s.result, Some(json!(s.seq * 3)), "{s:?}");
        }
    }

    /// Stores chunk `id` of group `g` holding `results`.
    async fn stored_chunk(store: &Arc<dyn StateStore>, id: &str, results: Vec<ChunkResult>) {
        let key = chunk_key(&StateKey::new("subtasks", "acme", "g"), id);
        let record = serde_json::to_vec(&ResultChunk { results }).unwrap();
        store.create(&key, record).await.unwrap();
    }

    /// The ids and results of the chunks `chunks` of group `g`, in order.
    async fn listed_results(
        store: &Arc<dyn StateStore>,
        chunks: &[String],
    ) -> Vec<(String, Vec<ChunkResult>)> {
        let mut out = Vec::new();
        for id in chunks {
            let key = chunk_key(&StateKey::new("subtasks", "acme", "g"), id);
            let chunk: ResultChunk = state::load(&**store, "chunk", &key)
                .await
                .unwrap()
                .unwrap()
                .value;
            out.push((id.clone(), chunk.results));
        }
        out
    }

    /// A merge keeps each sub-task's result from the first chunk of the run that has it (the
    /// one readers take), copied as stored; only the chunks ending the list, from the first of
    /// a run of 16 of one level, are merged.
    #[tokio::test]
    async fn a_merge_keeps_the_first_listed_result_in_place_of_its_run() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let group = StateKey::new("subtasks", "acme", "g");
        // A level-1 chunk before the run holds sub-task 0 first: merging the run keeps its
        // own copy of sub-task 0 but readers still take the earlier one.
        stored_chunk(
            &store,
            "m1000",
            vec![ChunkResult::completed(0, json!("before"))],
        )
        .await;
        let mut chunks = vec!["m1000".to_owned()];
        for i in 0..CHUNKS_MERGED as u32 {
            let id = format!("r{i:016x}");
            // A float that a round trip through a number could change in its last digit.
            let mut results = vec![ChunkResult::completed(i, json!(0.1 + f64::from(i) / 3.0))];
            if i > 0 {
                results.push(ChunkResult::failed(0, format!("late {i}")));
            }
            stored_chunk(&store, &id, results).await;
            chunks.push(id);
        }
        let run: Vec<String> = chunks[1..].to_vec();
        let before = listed_results(&store, &run).await;
        compact(&store, &group, &mut chunks, &mut Merges::new()).await;
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert_eq!(chunks[0], "m1000");
        assert_eq!(chunk_level(&chunks[1]), Some(1), "{chunks:?}");
        let after = listed_results(&store, &chunks[1..]).await;
        let merged = &after[0].1;
        let first: Vec<&ChunkResult> = before.iter().map(|(_, r)| &r[0]).collect();
        assert_eq!(
            merged.iter().collect::<Vec<_>>(),
            first,
            "first of each, in order"
        );
        assert_eq!(merged[0].status, SubTaskStatus::Completed);
        // Readers take the result of the chunk listed before the merged one.
        let mut progress = SubTaskGroup::new("g", 0, CHUNKS_MERGED as u32);
        for seq in 0..CHUNKS_MERGED as u32 {
            progress.mark_finished(seq);
        }
        let listed: Vec<ResultChunk> = listed_results(&store, &chunks)
            .await
            .into_iter()
            .map(|(_, results)| ResultChunk { results })
            .collect();
        let (g, _) = DelegationGroup::paged("g", "t", 0, (0..16).map(|_| ("e", "r")), 64 * 1024);
        let subs = g.sub_tasks(&progress, &[g.first_page()], &listed);
        assert_eq!(subs[0].result, Some(json!("before")));
        assert_eq!(subs[5].result, Some(json!(0.1 + 5.0 / 3.0)));
    }

    /// Chunks of half a record or more are full: never merged, neither when a batch writes
    /// them nor when a merge does; a run of smaller chunks merges past them.
    #[tokio::test]
    async fn full_chunks_are_never_merged() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        task_with_group(&*store, 40, 10).await;
        let fan_in = Arc::new(FanIn::default());
        let big = "y".repeat(CHUNK_BYTES / 2);
        for seq in 0..20 {
            fan_in
                .mark(store.clone(), task_key(), mark(seq, json!(big)))
                .await
                .unwrap();
        }
        let task: TaskRecord = state::load(&*store, "task", &task_key())
            .await
            .unwrap()
            .unwrap()
            .value;
        let listed = &task.groups["g"].chunks;
        assert_eq!(listed.len(), 20, "{listed:?}");
        assert!(listed.iter().all(|c| c.starts_with('f')), "{listed:?}");
        // 16 chunks of a third of a record each merge into full chunks only.
        let group = StateKey::new("subtasks", "acme", "g");
        let third = "z".repeat(CHUNK_BYTES / 3);
        let mut chunks = listed.clone();
        for i in 0..CHUNKS_MERGED as u32 {
            let id = format!("r{i:016x}");
            stored_chunk(
                &store,
                &id,
                vec![ChunkResult::completed(20 + i, json!(third))],
            )
            .await;
            chunks.push(id);
        }
        compact(&store, &group, &mut chunks, &mut Merges::new()).await;
        assert_eq!(chunks.len(), 20 + CHUNKS_MERGED / 2, "{chunks:?}");
        assert!(
            chunks.iter().all(|c| chunk_level(c).is_none()),
            "{chunks:?}"
        );
    }

    /// A run longer than one merge reads (a list from before merges) is merged 64 at a time,
    /// oldest first, a few merges per update.
    #[tokio::test]
    async fn a_long_run_is_merged_a_bounded_piece_at_a_time() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let group = StateKey::new("subtasks", "acme", "g");
        let mut chunks = Vec::new();
        for i in 0..2_000u32 {
            let id = format!("r{i:016x}");
            stored_chunk(&store, &id, vec![ChunkResult::completed(i, json!(i))]).await;
            chunks.push(id);
        }
        compact(&store, &group, &mut chunks, &mut Merges::new()).await;
        // MAX_MERGES merges of 64 each, the first ones in front.
        assert_eq!(
            chunks.len(),
            2_000 - MAX_MERGES * (MAX_MERGED - 1),
            "{}",
            chunks.len()
        );
        assert!(
            chunks[..MAX_MERGES]
                .iter()
                .all(|c| chunk_level(c) == Some(1))
        );
        let results = listed_results(&store, &chunks).await;
        let seqs: Vec<u32> = results
            .iter()
            .flat_map(|(_, r)| r.iter().map(|r| r.seq))
            .collect();
        assert_eq!(seqs, (0..2_000).collect::<Vec<_>>());
    }

    /// A parent update that loses a race after merging reuses the merge's chunks (no second
    /// merge of the same run).
    #[tokio::test]
    async fn a_retried_parent_update_reuses_its_merge() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn StateStore> = counting.clone();
        task_with_group(&*store, 40, 10).await;
        let fan_in = Arc::new(FanIn::default());
        for seq in 0..(CHUNKS_MERGED - 1) as u32 {
            fan_in
                .mark(store.clone(), task_key(), mark(seq, json!(seq)))
                .await
                .unwrap();
        }
        let before = counting.writes();
        counting.conflicts.store(2, Ordering::SeqCst);
        let marked = fan_in
            .mark(store.clone(), task_key(), mark(30, json!(30)))
            .await
            .unwrap();
        let (creates, updates, _) = counting.writes();
        // One batch chunk and one merged chunk; three updates (two lost).
        assert_eq!((creates - before.0, updates - before.1), (2, 3));
        let listed = &marked.task.value.groups["g"].chunks;
        assert_eq!(listed.len(), 1, "{listed:?}");
        let results = stored_results(&*store, 40).await;
        assert_eq!(results[30].result, Some(json!(30)));
        assert_eq!(results[3].result, Some(json!(3)));
    }

    /// A merge that cannot read its chunks (one listed is missing) leaves the list as it is,
    /// and the results are still recorded.
    #[tokio::test]
    async fn a_failed_merge_leaves_the_list_and_records_the_result() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let mut record = TaskRecord::new("t", "w", "e.requested");
        let mut group = SubTaskGroup::new("g", 0, 100);
        for i in 0..(CHUNKS_MERGED - 1) as u32 {
            let id = format!("r{i:016x}");
            if i > 0 {
                stored_chunk(&store, &id, vec![ChunkResult::completed(i, json!(i))]).await;
            }
            group.mark_finished(i);
            group.chunks.push(id);
        }
        record.groups.insert("g".into(), group);
        store
            .create(&task_key(), serde_json::to_vec(&record).unwrap())
            .await
            .unwrap();
        let fan_in = Arc::new(FanIn::default());
        let marked = fan_in
            .mark(store.clone(), task_key(), mark(50, json!("kept")))
            .await
            .unwrap();
        let stored = &marked.task.value.groups["g"];
        assert_eq!(stored.chunks.len(), CHUNKS_MERGED);
        assert!(stored.is_finished(50));
    }

    /// A record that is not found is not kept: a later load finds it once it is there.
    #[tokio::test]
    async fn a_failed_load_is_not_cached() {
        let cache: OnceCache<u32, u32> = OnceCache::new(2);
        let missing = cache
            .get_or_load(1, async { Err(Error::UnknownSubTask("x".into())) })
            .await;
        assert!(missing.is_err());
        assert_eq!(*cache.get_or_load(1, async { Ok(5) }).await.unwrap(), 5);
        assert_eq!(*cache.get_or_load(1, async { Ok(6) }).await.unwrap(), 5);
        for k in 2..10 {
            cache.get_or_load(k, async move { Ok(k) }).await.unwrap();
        }
        let kept = cache.cells.lock().unwrap().cells.len();
        assert_eq!(kept, 2);
    }

    /// Loads in flight that fail (forged ids) do not push loaded values out.
    #[tokio::test]
    async fn failing_loads_in_flight_leave_loaded_values_cached() {
        let cache: OnceCache<u32, u32> = OnceCache::new(2);
        for k in [1, 2] {
            cache.get_or_load(k, async move { Ok(k) }).await.unwrap();
        }
        let gate = tokio::sync::Notify::new();
        let forged = |k: u32| {
            let gate = &gate;
            cache.get_or_load(k, async move {
                gate.notified().await;
                Err(Error::UnknownSubTask(k.to_string()))
            })
        };
        let all = async { tokio::join!(forged(10), forged(11), forged(12)) };
        tokio::pin!(all);
        // Every forged load is in flight (waiting on the gate) before any fails.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), &mut all);
        assert!(waiting.await.is_err());
        gate.notify_waiters();
        let (a, b, c) = all.await;
        assert!(a.is_err() && b.is_err() && c.is_err());
        for k in [1, 2] {
            let again = cache
                .get_or_load(k, async { panic!("{k} was pushed out") })
                .await;
            assert_eq!(*again.unwrap(), k);
        }
    }
}
