//! A view of one state bucket of embedded records (knowledge documents, episodes): the records
//! of every tenant and a vector index per tenant, rebuilt from the store and kept current by
//! watching it, so every instance answers from the same records.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::codec::decode_vector;
use super::index::{Filter, IndexConfig, VectorIndex};
use crate::error::{Error, Result};
use crate::spi::state::{Revision, StateChange, StateStore};

/// A stored record that contributes vectors to the index.
pub(crate) trait Indexed: DeserializeOwned + Send + Sync + 'static {
    /// The model of its vectors, if it has any.
    fn model(&self) -> Option<&str>;
    /// Its vectors (base64), in chunk order.
    fn vectors(&self) -> Vec<&str>;
    /// Forgets its vectors (kept in the index instead), keeping where its chunks lie.
    fn drop_vectors(&mut self);
}

/// One vector of the index: which record and which of its chunks.
#[derive(Debug)]
pub(crate) struct Slot<R> {
    pub(crate) chunk: usize,
    pub(crate) record: Arc<R>,
}

/// How many vectors a search looks at to estimate how many its filter accepts.
const FILTER_SAMPLE: usize = 256;

/// One tenant's records and vectors.
pub(crate) struct TenantView<R> {
    /// Record key → record (ordered: episodic keys sort by agent, user and time).
    pub(crate) records: BTreeMap<Arc<str>, Arc<R>>,
    /// Record key → the revision it was read at.
    revisions: HashMap<Arc<str>, Revision>,
    /// Vector key → what it embeds.
    pub(crate) slots: HashMap<u64, Slot<R>>,
    /// Record key → its vectors' keys.
    by_record: HashMap<Arc<str>, Vec<u64>>,
    index: Option<VectorIndex>,
    next_slot: u64,
    /// Vectors read while the view loads, indexed together when it is current.
    pending: Vec<(u64, Vec<f32>)>,
}

impl<R> Default for TenantView<R> {
    fn default() -> Self {
        Self {
            records: BTreeMap::new(),
            revisions: HashMap::new(),
            slots: HashMap::new(),
            by_record: HashMap::new(),
            index: None,
            next_slot: 0,
            pending: Vec::new(),
        }
    }
}

impl<R: Indexed> TenantView<R> {
    /// The index's best `k` matches among the vectors `keep` accepts: exact when few pass
    /// (estimated from a sample, then counted), by the HNSW graph with the filter otherwise.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        exact_below: usize,
        keep: &(dyn Fn(usize, &R) -> bool + Sync),
    ) -> Result<Vec<(usize, Arc<R>, f32)>> {
        let Some(index) = &self.index else {
            return Ok(Vec::new());
        };
        let accepts = |slot: &Slot<R>| keep(slot.chunk, &slot.record);
        let total = self.slots.len();
        let sampled = self.slots.values().take(FILTER_SAMPLE);
        let (seen, passed) = sampled.fold((0_usize, 0_usize), |(seen, passed), slot| {
            (seen + 1, passed + usize::from(accepts(slot)))
        });
        // Few pass (by the sample, with a margin): count them, and search those exactly.
        let few = total <= exact_below || passed * total <= exact_below * seen.max(1) * 2;
        let found = if few {
            let passing: Vec<u64> = self
                .slots
                .iter()
                .filter(|(_, slot)| accepts(slot))
                .map(|(id, _)| *id)
                .collect();
            if passing.len() <= exact_below || passing.len() * 4 < total {
                index.search(query, k, Filter::Keys(&passing))?
            } else {
                let allowed: std::collections::HashSet<u64> = passing.into_iter().collect();
                let predicate = move |id: u64| allowed.contains(&id);
                index.search(query, k, Filter::Predicate(&predicate))?
            }
        } else {
            let predicate = |id: u64| self.slots.get(&id).is_some_and(accepts);
            index.search(query, k, Filter::Predicate(&predicate))?
        };
        Ok(found
            .into_iter()
            .filter_map(|(id, score)| {
                let slot = self.slots.get(&id)?;
                Some((slot.chunk, slot.record.clone(), score))
            })
            .collect())
    }

    /// The revision a record was read at (0 if unknown).
    pub(crate) fn revision(&self, key: &str) -> Revision {
        self.revisions.get(key).copied().unwrap_or(0)
    }

    fn remove(&mut self, key: &str) {
        self.records.remove(key);
        self.revisions.remove(key);
        if let Some(ids) = self.by_record.remove(key) {
            for id in ids {
                self.slots.remove(&id);
                if let Some(index) = &self.index
                    && let Err(e) = index.remove(id)
                {
                    tracing::warn!(error = %e, "could not remove a vector from the memory index");
                }
            }
        }
    }
}

/// What the view was built for: the model whose vectors it indexes.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub(crate) name: String,
    pub(crate) dimensions: usize,
}

/// The view of one bucket.
pub(crate) struct View<R> {
    pub(crate) bucket: &'static str,
    model: Option<Model>,
    index_config: IndexConfig,
    tenants: RwLock<HashMap<String, TenantView<R>>>,
    /// The last revision applied from the watch.
    applied: tokio::sync::watch::Sender<Revision>,
    /// Whether the records that existed when the watch started have been applied.
    current: tokio::sync::watch::Sender<bool>,
    /// Why the store cannot be watched, if it cannot.
    failed: std::sync::Mutex<Option<String>>,
}

impl<R: Indexed> View<R> {
    pub(crate) fn new(
        bucket: &'static str,
        model: Option<Model>,
        index_config: IndexConfig,
    ) -> Self {
        Self {
            bucket,
            model,
            index_config,
            tenants: RwLock::default(),
            applied: tokio::sync::watch::channel(0).0,
            current: tokio::sync::watch::channel(false).0,
            failed: std::sync::Mutex::new(None),
        }
    }

    /// Runs `f` on a tenant's view (an empty one when the tenant has no records).
    pub(crate) fn read<T>(&self, tenant: &str, f: impl FnOnce(&TenantView<R>) -> T) -> T {
        let tenants = self.tenants.read().unwrap_or_else(|e| e.into_inner());
        match tenants.get(tenant) {
            Some(view) => f(view),
            None => f(&TenantView::default()),
        }
    }

    /// Runs `f` on every tenant's view.
    pub(crate) fn each<T>(&self, mut f: impl FnMut(&str, &TenantView<R>) -> Vec<T>) -> Vec<T> {
        let tenants = self.tenants.read().unwrap_or_else(|e| e.into_inner());
        tenants
            .iter()
            .flat_map(|(tenant, view)| f(tenant, view))
            .collect()
    }

    /// How many records a tenant holds.
    pub(crate) fn count(&self, tenant: &str) -> usize {
        self.read(tenant, |v| v.records.len())
    }

    /// Waits until the records that existed when the watch started are applied.
    pub(crate) async fn ready(&self, within: Duration) -> Result<()> {
        let mut current = self.current.subscribe();
        if let Some(why) = self
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(Error::Config(why));
        }
        tokio::time::timeout(within, current.wait_for(|c| *c))
            .await
            .map_err(|_| Error::Timeout {
                after: within,
                what: format!("the memory view of `{}` to load", self.bucket),
            })?
            .map_err(|_| Error::Closed)?;
        Ok(())
    }

    /// Waits until the watch has applied `revision` (a write of this process).
    pub(crate) async fn applied(&self, revision: Revision, within: Duration) -> Result<()> {
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(within, applied.wait_for(|r| *r >= revision))
            .await
            .map_err(|_| Error::Timeout {
                after: within,
                what: format!(
                    "the memory view of `{}` to apply revision {revision}",
                    self.bucket
                ),
            })?
            .map_err(|_| Error::Closed)?;
        Ok(())
    }

    /// Forgets a record now (its deletion was written; the watch confirms it later).
    pub(crate) fn forget(&self, tenant: &str, key: &str) {
        let mut tenants = self.tenants.write().unwrap_or_else(|e| e.into_inner());
        if let Some(view) = tenants.get_mut(tenant) {
            view.remove(key);
        }
    }

    fn apply(&self, change: StateChange) {
        match change {
            StateChange::Put {
                tenant,
                key,
                value,
                revision,
            } => {
                match serde_json::from_slice::<R>(&value) {
                    Ok(record) => self.put(tenant, key, record, revision),
                    Err(e) => {
                        tracing::warn!(bucket = self.bucket, %tenant, %key, error = %e, "skipping a memory record that cannot be decoded");
                        self.forget(&tenant, &key);
                    }
                }
                self.applied.send_if_modified(|r| {
                    let newer = revision > *r;
                    *r = (*r).max(revision);
                    newer
                });
            }
            StateChange::Delete {
                tenant,
                key,
                revision,
            } => {
                self.forget(&tenant, &key);
                self.applied.send_if_modified(|r| {
                    let newer = revision > *r;
                    *r = (*r).max(revision);
                    newer
                });
            }
            StateChange::Current => {
                self.index_pending();
                self.current.send_replace(true);
            }
            StateChange::Reset => self.clear(),
        }
    }

    /// Indexes the vectors read while loading, one batch per tenant.
    fn index_pending(&self) {
        let mut tenants = self.tenants.write().unwrap_or_else(|e| e.into_inner());
        for (tenant, view) in tenants.iter_mut() {
            let pending = std::mem::take(&mut view.pending);
            let Some(index) = &view.index else { continue };
            // Vectors of records deleted meanwhile are left out.
            let batch: Vec<(u64, &[f32])> = pending
                .iter()
                .filter(|(id, _)| view.slots.contains_key(id))
                .map(|(id, v)| (*id, v.as_slice()))
                .collect();
            if let Err(e) = index.insert_many(&batch) {
                // One bad vector (or the index's cap) must not cost the rest: one by one.
                tracing::warn!(bucket = self.bucket, %tenant, error = %e, "indexing the vectors one by one");
                for (id, vector) in &batch {
                    if !index.contains(*id)
                        && let Err(e) = index.insert(*id, vector)
                    {
                        tracing::warn!(bucket = self.bucket, %tenant, error = %e, "a vector could not be indexed");
                    }
                }
                view.slots.retain(|id, _| index.contains(*id));
            }
        }
    }

    /// Forgets everything: the records follow again (a reset, a new watch), and until they
    /// are all read the view is not current (reads wait).
    fn clear(&self) {
        self.current.send_replace(false);
        self.tenants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    fn put(&self, tenant: String, key: String, mut record: R, revision: Revision) {
        let vectors: Vec<Vec<f32>> = match (&self.model, record.model()) {
            (Some(model), Some(name)) if name == model.name => {
                let decoded: Option<Vec<Vec<f32>>> = record
                    .vectors()
                    .into_iter()
                    .map(|v| decode_vector(v, model.dimensions))
                    .collect();
                match decoded {
                    Some(v) => v,
                    None => {
                        tracing::warn!(bucket = self.bucket, %tenant, %key, "a memory record's vectors are malformed; it is kept without them");
                        Vec::new()
                    }
                }
            }
            (Some(model), Some(name)) => {
                tracing::debug!(bucket = self.bucket, %tenant, %key, record_model = name, model = %model.name, "a memory record embedded by another model is not indexed");
                Vec::new()
            }
            _ => Vec::new(),
        };
        // The index holds the vectors now; the view keeps the rest of the record.
        record.drop_vectors();
        let mut tenants = self.tenants.write().unwrap_or_else(|e| e.into_inner());
        let view = tenants.entry(tenant).or_default();
        view.remove(&key);
        let key: Arc<str> = Arc::from(key);
        if !vectors.is_empty()
            && view.index.is_none()
            && let Some(model) = &self.model
        {
            match VectorIndex::new(model.dimensions, &self.index_config) {
                Ok(index) => view.index = Some(index),
                Err(e) => tracing::warn!(error = %e, "could not create a memory index"),
            }
        }
        let mut ids = Vec::with_capacity(vectors.len());
        let record = Arc::new(record);
        let loading = !*self.current.borrow();
        if let Some(index) = &view.index {
            for (chunk, vector) in vectors.into_iter().enumerate() {
                let id = view.next_slot;
                view.next_slot += 1;
                let indexed = if loading {
                    // Indexed in one batch when the view is current (much faster).
                    view.pending.push((id, vector));
                    Ok(())
                } else {
                    index.insert(id, &vector)
                };
                match indexed {
                    Ok(()) => {
                        view.slots.insert(
                            id,
                            Slot {
                                chunk,
                                record: record.clone(),
                            },
                        );
                        ids.push(id);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, key = %key, "could not index a memory record's vector");
                    }
                }
            }
        }
        view.by_record.insert(key.clone(), ids);
        view.revisions.insert(key.clone(), revision);
        view.records.insert(key, record);
    }
}

/// Keeps `view` current from `store`'s watch of its bucket until the view is dropped: a new
/// watch after a failure starts from the bucket's records again.
pub(crate) async fn follow<R: Indexed>(view: Weak<View<R>>, store: Arc<dyn StateStore>) {
    let Some(bucket) = view.upgrade().map(|v| v.bucket) else {
        return;
    };
    let mut failures = 0_u32;
    loop {
        match store.watch(bucket).await {
            Ok(mut watch) => {
                let mut first = true;
                while let Some(change) = watch.next().await {
                    let Some(view) = view.upgrade() else { return };
                    match change {
                        Ok(change) => {
                            if first {
                                // A new watch replays the bucket: start from nothing.
                                view.clear();
                                first = false;
                            }
                            failures = 0;
                            view.apply(change);
                        }
                        Err(e) => {
                            tracing::warn!(bucket, error = %e, "the memory watch failed; watching again");
                            break;
                        }
                    }
                }
            }
            Err(e) if !e.is_retryable() => {
                // A store that cannot watch: say so to whoever waits for the view.
                tracing::error!(bucket, error = %e, "cannot watch a memory bucket");
                if let Some(view) = view.upgrade() {
                    *view.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("memory cannot watch state bucket `{bucket}`: {e}"));
                    // Wake the waiters; `ready` reads the failure.
                    view.current.send_replace(true);
                }
                return;
            }
            Err(e) => {
                tracing::warn!(bucket, error = %e, "cannot watch a memory bucket; trying again")
            }
        }
        if view.strong_count() == 0 {
            return;
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(50)))).await;
    }
}
