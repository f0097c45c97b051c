//! The in-process vector index of semantic and episodic memory: an HNSW graph (usearch) over
//! unit-length vectors, searched by cosine similarity, with exact (brute-force) search for small
//! indexes and small filtered sets.
//!
//! The vectors are kept twice: in `f32` in an arena of ours (contiguous, for exact scans and
//! exact scores), and in `f16` in usearch's graph (half the memory traffic of its walks). The
//! graph's candidates are rescored from the arena, so every similarity returned is exact.
//! Memory is about `n · (6·d + 8·connectivity + ~100)` bytes for `n` vectors of `d` dimensions.
//!
//! Concurrency: usearch's base-layer search reads neighbour lists without locking them, so a
//! search is not safe while a vector is added; searches share a read lock, inserts and removals
//! take the write lock. usearch also needs one of its per-thread contexts for every search or
//! add in flight (it fails instead of waiting when none is free): a small semaphore hands them
//! out.

use std::any::Any;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::MemoryError;
use crate::error::{Error, Result};

/// usearch marks removed entries with this key: it cannot be stored.
const RESERVED_KEY: u64 = u64::MAX;
/// The capacity reserved when the index is created; it then doubles as needed.
const INITIAL_CAPACITY: usize = 64;
/// How usearch stores its copies of the vectors.
const QUANTIZATION: ScalarKind = ScalarKind::F16;
/// Keys a predicate is tried on to estimate how many pass.
const FILTER_SAMPLE: usize = 256;
/// A filtered search takes the unfiltered graph search's nearest when at least this share of
/// keys pass (`.0 / .1`), `OVERSAMPLE` times as many as needed for `k` to pass, at most
/// `MAX_OVERSAMPLE`. (At 10 % passing, 4 times gave a recall@10 of 0.96, where usearch's
/// filtered search has 0.98; at 50 %, 3 times gives 0.995.)
const OVERSAMPLE_ABOVE: (usize, usize) = (3, 10);
const OVERSAMPLE: usize = 3;
const MAX_OVERSAMPLE: usize = 4096;
/// The largest graph degree and expansion [`IndexConfig`] accepts.
const MAX_CONNECTIVITY: usize = 256;
const MAX_EXPANSION: usize = 1 << 16;

/// How memory's vector index is built and searched: an HNSW graph (approximate
/// nearest-neighbour search) over the embeddings, with exact search while the index is small.
///
/// The defaults suit sentence embeddings (384 to 1,536 dimensions) up to a few hundred thousand
/// vectors per index. On 100,000 vectors of 384 dimensions (the `memory` benchmark of the
/// `soorma-tests` crate, on 2 cores): a search for the 10 nearest takes about 1 ms and finds
/// over 99 % of the true 10 nearest, where comparing every vector takes 10 to 12 ms; an insert
/// takes about 0.4 ms (indexing all 100,000 vectors, 20 to 40 s); the index takes about 2.6 kB
/// per vector (the vectors in `f32` for exact scores and scans, in `f16` in the graph, and the
/// graph's links).
///
/// ```
/// use soorma::memory::IndexConfig;
///
/// let config = IndexConfig::default()
///     .with_expansion_search(128) // higher recall, slower searches
///     .with_max_vectors(50_000);
/// assert_eq!(config.expansion_search, 128);
/// assert_eq!(config.connectivity, IndexConfig::default().connectivity);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexConfig {
    /// Below this many vectors, every search is exact (brute force: each vector is compared with
    /// the query), which is fast at that size (about 1 ms at 384 dimensions) and finds the
    /// true nearest; so is a filtered search when fewer than this many vectors are estimated
    /// to pass its filter. Default 10,000.
    pub exact_below: usize,
    /// The number of neighbours each vector is linked to in the graph (HNSW's `M`; the base
    /// layer links twice as many). More: better recall, more memory (about 8 bytes per vector
    /// for each unit) and slower inserts. Between 2 and 256; default 16.
    pub connectivity: usize,
    /// How many candidates an insert considers when linking a new vector (HNSW's
    /// `ef_construction`). More: a better graph (recall), slower inserts and index builds.
    /// Between 1 and 65,536; default 64.
    pub expansion_add: usize,
    /// How many candidates a search keeps while walking the graph (HNSW's `ef`; at least the
    /// number of results asked for). More: better recall, slower searches. Between 1 and
    /// 65,536; default 96.
    pub expansion_search: usize,
    /// The most vectors the index holds; inserting more fails with
    /// [`MemoryError::Quota`]. Default 1,000,000 (about 2.6 GB at 384 dimensions).
    pub max_vectors: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            exact_below: 10_000,
            connectivity: 16,
            expansion_add: 64,
            expansion_search: 96,
            max_vectors: 1_000_000,
        }
    }
}

impl IndexConfig {
    /// Sets [`exact_below`](Self::exact_below): searches are exact below this many vectors.
    ///
    /// ```
    /// let config = soorma::memory::IndexConfig::default().with_exact_below(0); // always HNSW
    /// assert_eq!(config.exact_below, 0);
    /// ```
    pub fn with_exact_below(mut self, vectors: usize) -> Self {
        self.exact_below = vectors;
        self
    }

    /// Sets [`connectivity`](Self::connectivity), the graph's degree (2 to 256).
    ///
    /// ```
    /// let config = soorma::memory::IndexConfig::default().with_connectivity(32);
    /// assert_eq!(config.connectivity, 32);
    /// ```
    pub fn with_connectivity(mut self, connectivity: usize) -> Self {
        self.connectivity = connectivity;
        self
    }

    /// Sets [`expansion_add`](Self::expansion_add), the candidates an insert considers.
    ///
    /// ```
    /// let config = soorma::memory::IndexConfig::default().with_expansion_add(256);
    /// assert_eq!(config.expansion_add, 256);
    /// ```
    pub fn with_expansion_add(mut self, expansion: usize) -> Self {
        self.expansion_add = expansion;
        self
    }

    /// Sets [`expansion_search`](Self::expansion_search), the candidates a search keeps.
    ///
    /// ```
    /// let config = soorma::memory::IndexConfig::default().with_expansion_search(32);
    /// assert_eq!(config.expansion_search, 32);
    /// ```
    pub fn with_expansion_search(mut self, expansion: usize) -> Self {
        self.expansion_search = expansion;
        self
    }

    /// Sets [`max_vectors`](Self::max_vectors), the most vectors the index holds.
    ///
    /// ```
    /// let config = soorma::memory::IndexConfig::default().with_max_vectors(10_000);
    /// assert_eq!(config.max_vectors, 10_000);
    /// ```
    pub fn with_max_vectors(mut self, vectors: usize) -> Self {
        self.max_vectors = vectors;
        self
    }

    fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if !(2..=MAX_CONNECTIVITY).contains(&self.connectivity) {
            problems.push(format!(
                "connectivity must be between 2 and {MAX_CONNECTIVITY}, not {}",
                self.connectivity
            ));
        }
        for (name, value) in [
            ("expansion_add", self.expansion_add),
            ("expansion_search", self.expansion_search),
        ] {
            if !(1..=MAX_EXPANSION).contains(&value) {
                problems.push(format!(
                    "{name} must be between 1 and {MAX_EXPANSION}, not {value}"
                ));
            }
        }
        // usearch addresses vectors with 32-bit slots.
        if self.max_vectors >= u32::MAX as usize {
            problems.push(format!(
                "max_vectors must be below {}, not {}",
                u32::MAX,
                self.max_vectors
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "invalid index config: {}",
                problems.join("; ")
            )))
        }
    }
}

/// Which vectors a search may return.
#[derive(Clone, Copy)]
pub(crate) enum Filter<'a> {
    /// Any vector.
    All,
    /// Only these keys (absent ones and repeats are ignored). The search is exact: each of
    /// these vectors is compared with the query (for small sets, a few thousand at most).
    Keys(&'a [u64]),
    /// Only keys for which the predicate holds. The share passing is estimated from a sample
    /// of the keys: when fewer than [`IndexConfig::exact_below`] vectors pass, the search
    /// compares all those (the predicate is called on every key); when 30 % or more do, it
    /// filters the graph's nearest (three times as many as needed for `k` to pass); otherwise,
    /// or if too few of those pass, it walks the graph skipping the keys failing the predicate
    /// (usearch's filtered search).
    Predicate(&'a (dyn Fn(u64) -> bool + Sync)),
}

impl std::fmt::Debug for Filter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::All => f.write_str("All"),
            Filter::Keys(keys) => write!(f, "Keys({} keys)", keys.len()),
            Filter::Predicate(_) => f.write_str("Predicate(..)"),
        }
    }
}

/// An HNSW index of unit-length vectors keyed by `u64`, searched by cosine similarity. Internally
/// synchronized: searches run concurrently, inserts and removals one at a time.
pub(crate) struct VectorIndex {
    dimensions: usize,
    config: IndexConfig,
    /// usearch's per-thread contexts: how many searches or adds may run at once.
    threads: usize,
    contexts: Semaphore,
    inner: RwLock<Inner>,
}

struct Inner {
    dimensions: usize,
    /// The graph, over `f16` copies of the vectors.
    index: Index,
    /// The vectors: slot `s` at `arena[s * dimensions..][..dimensions]`, its key `keys[s]`.
    /// Removal moves the last slot into the freed one.
    arena: Vec<f32>,
    keys: Vec<u64>,
    slots: HashMap<u64, usize>,
    /// Removed entries whose graph nodes usearch reuses for the next adds.
    tombstones: usize,
}

impl VectorIndex {
    /// An empty index of `dimensions`-long vectors.
    pub(crate) fn new(dimensions: usize, config: &IndexConfig) -> Result<Self> {
        config.validate()?;
        if dimensions == 0 || dimensions > MAX_EXPANSION {
            return Err(Error::InvalidArgument(format!(
                "an index's vectors need between 1 and {MAX_EXPANSION} dimensions, not {dimensions}"
            )));
        }
        let options = IndexOptions {
            dimensions,
            // Inner product: for unit vectors, `1 - cosine` without computing norms.
            metric: MetricKind::IP,
            quantization: QUANTIZATION,
            connectivity: config.connectivity,
            expansion_add: config.expansion_add,
            expansion_search: config.expansion_search,
            multi: false,
        };
        let index = Index::new(&options).map_err(|e| usearch_error("create", e))?;
        let threads = std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .clamp(2, 64);
        index
            .reserve_capacity_and_threads(INITIAL_CAPACITY.min(config.max_vectors.max(1)), threads)
            .map_err(|e| usearch_error("reserve", e))?;
        Ok(VectorIndex {
            dimensions,
            config: config.clone(),
            threads,
            contexts: Semaphore::new(threads),
            inner: RwLock::new(Inner {
                dimensions,
                index,
                arena: Vec::new(),
                keys: Vec::new(),
                slots: HashMap::new(),
                tombstones: 0,
            }),
        })
    }

    /// The length of the index's vectors.
    #[allow(dead_code)] // (not needed by the collections so far)
    pub(crate) fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The number of vectors held.
    pub(crate) fn len(&self) -> usize {
        self.read().keys.len()
    }

    /// Whether the index holds no vector.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` has a vector.
    #[allow(dead_code)] // (not needed by the collections so far)
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.read().slots.contains_key(&key)
    }

    /// The vector stored under `key` (unit length).
    #[allow(dead_code)] // (not needed by the collections so far)
    pub(crate) fn get(&self, key: u64) -> Option<Vec<f32>> {
        let inner = self.read();
        let slot = *inner.slots.get(&key)?;
        Some(inner.vector(slot).to_vec())
    }

    /// Stores `vector` under `key`, replacing the key's previous vector. The vector is
    /// normalized if it is not of unit length already.
    ///
    /// Fails with [`Error::InvalidArgument`] for a vector of the wrong length, with a NaN or
    /// infinite number, or zero; for key `u64::MAX` (usearch's mark of removed entries); and with
    /// [`MemoryError::Quota`] when the index is full.
    pub(crate) fn insert(&self, key: u64, vector: &[f32]) -> Result<()> {
        check_key(key)?;
        let vector = self.unit(vector, "an indexed vector")?;
        let mut inner = self.write();
        let slot = inner.slots.get(&key).copied();
        match slot {
            Some(_) => inner.unlink(key)?,
            None => {
                self.check_room(&inner, 1)?;
                self.grow(&mut inner, 1)?;
            }
        }
        // The write lock excludes every other use of usearch's contexts.
        let added = inner.index.add(key, &vector);
        inner.store(key, slot, &vector, added.is_ok());
        added.map_err(|e| usearch_error("add", e))
    }

    /// Stores many vectors at once (a rebuild), replacing those of keys already present; the
    /// last of repeated keys wins. All are checked before any is stored; the graph is then
    /// built on several threads (searches wait meanwhile).
    pub(crate) fn insert_many(&self, items: &[(u64, &[f32])]) -> Result<()> {
        // The last vector of each key.
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(items.len());
        for (i, (key, _)) in items.iter().enumerate() {
            check_key(*key)?;
            last.insert(*key, i);
        }
        let mut batch: Vec<(u64, Cow<'_, [f32]>)> = Vec::with_capacity(last.len());
        for (i, (key, vector)) in items.iter().enumerate() {
            if last.get(key) == Some(&i) {
                batch.push((*key, self.unit(vector, "an indexed vector")?));
            }
        }
        drop(last);
        let mut inner = self.write();
        let slots: Vec<Option<usize>> = batch
            .iter()
            .map(|(key, _)| inner.slots.get(key).copied())
            .collect();
        let new = slots.iter().filter(|slot| slot.is_none()).count();
        self.check_room(&inner, new)?;
        self.grow(&mut inner, new)?;
        for ((key, _), slot) in batch.iter().zip(&slots) {
            if slot.is_some() {
                inner.unlink(*key)?;
            }
        }
        let added = self.add_parallel(&inner.index, &batch);
        inner.arena.reserve(new * self.dimensions);
        let mut failure = None;
        // Slots of replaced keys stay where they are as long as nothing is dropped: drop the
        // failed ones last.
        let mut failed = Vec::new();
        for (((key, vector), slot), result) in batch.iter().zip(slots).zip(added) {
            match (result, slot) {
                (Ok(()), slot) => inner.store(*key, slot, vector, true),
                (Err(e), Some(_)) => {
                    failed.push(*key);
                    failure = Some(e);
                }
                (Err(e), None) => failure = Some(e),
            }
        }
        for key in failed {
            inner.drop_slot(key);
        }
        match failure {
            None => Ok(()),
            Some(e) => Err(Error::other(format!("vector index: add failed: {e}"))),
        }
    }

    /// Adds `batch` to usearch on up to `threads` threads: each one's outcome.
    fn add_parallel(
        &self,
        index: &Index,
        batch: &[(u64, Cow<'_, [f32]>)],
    ) -> Vec<std::result::Result<(), String>> {
        let workers = self.threads.min(batch.len().div_ceil(256)).max(1);
        let next = AtomicUsize::new(0);
        let results: Vec<Mutex<Option<std::result::Result<(), String>>>> =
            batch.iter().map(|_| Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((key, vector)) = batch.get(i) else {
                            break;
                        };
                        let result = index.add(*key, vector).map_err(|e| e.to_string());
                        *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                    }
                });
            }
        });
        results
            .into_iter()
            .map(|r| {
                r.into_inner()
                    .unwrap_or_else(PoisonError::into_inner)
                    .unwrap_or_else(|| Err("not added".to_owned()))
            })
            .collect()
    }

    /// Removes `key`'s vector; `false` if it had none.
    pub(crate) fn remove(&self, key: u64) -> Result<bool> {
        let mut inner = self.write();
        if !inner.slots.contains_key(&key) {
            return Ok(false);
        }
        inner.unlink(key)?;
        inner.drop_slot(key);
        Ok(true)
    }

    /// The `k` vectors most similar to `query` among those `filter` allows, as (key, cosine
    /// similarity), most similar first. Approximate (HNSW) once the index holds
    /// [`IndexConfig::exact_below`] vectors, except for [`Filter::Keys`].
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Filter<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        self.search_with(query, k, filter, false)
    }

    /// Like [`search`](Self::search), but always exact: every allowed vector is compared with the
    /// query.
    pub(crate) fn exact_search(
        &self,
        query: &[f32],
        k: usize,
        filter: Filter<'_>,
    ) -> Result<Vec<(u64, f32)>> {
        self.search_with(query, k, filter, true)
    }

    fn search_with(
        &self,
        query: &[f32],
        k: usize,
        filter: Filter<'_>,
        exact: bool,
    ) -> Result<Vec<(u64, f32)>> {
        let query = self.unit(query, "a query vector")?;
        let inner = self.read();
        let n = inner.keys.len();
        if k == 0 || n == 0 {
            return Ok(Vec::new());
        }
        let exact = exact || n < self.config.exact_below;
        match filter {
            Filter::Keys(keys) => {
                let slots = dedup(keys).filter_map(|key| inner.slots.get(&key).copied());
                Ok(inner.scan(&query, k, slots))
            }
            Filter::All if exact => Ok(inner.scan(&query, k, 0..n)),
            Filter::All => {
                // The graph's scores are of `f16` copies: ask for a few more, rescore them.
                let wanted = (2 * k).min(k.max(self.config.expansion_search));
                let found = self.graph_search(&inner, &query, wanted, None)?;
                Ok(inner.rescore(&query, k, found.keys.into_iter()))
            }
            Filter::Predicate(predicate) => {
                let passing = |slot: &usize| predicate(inner.keys[*slot]);
                if exact {
                    return Ok(inner.scan(&query, k, (0..n).filter(passing)));
                }
                // The share of keys passing, from a sample spread over the slots.
                // (A slot at a pseudo-random place in each stretch of `step`: not in step with
                // a periodic pattern of keys.)
                let step = n.div_ceil(FILTER_SAMPLE);
                let (mut seen, mut passed) = (0, 0);
                for start in (0..n).step_by(step) {
                    let jitter = (start as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
                    let slot = start + jitter as usize % step.min(n - start);
                    seen += 1;
                    passed += usize::from(passing(&slot));
                }
                // Few pass: compare them all.
                if passed * n < self.config.exact_below * seen || passed < 2 {
                    #[cfg(test)]
                    tests::PATHS[0].fetch_add(1, Ordering::Relaxed);
                    return Ok(inner.scan(&query, k, (0..n).filter(passing)));
                }
                // Most pass: the graph's nearest, enough of them that `k` likely pass.
                if passed * OVERSAMPLE_ABOVE.1 >= seen * OVERSAMPLE_ABOVE.0 {
                    let wanted = (k * OVERSAMPLE * seen).div_ceil(passed) + k;
                    if wanted <= MAX_OVERSAMPLE {
                        let found = self.graph_search(&inner, &query, wanted, None)?;
                        let exhausted = found.keys.len() < wanted;
                        let keys: Vec<u64> =
                            found.keys.into_iter().filter(|k| predicate(*k)).collect();
                        if keys.len() >= k || exhausted {
                            #[cfg(test)]
                            tests::PATHS[1].fetch_add(1, Ordering::Relaxed);
                            return Ok(inner.rescore(&query, k, keys.into_iter()));
                        }
                    }
                }
                // Otherwise (or if too few of the nearest passed): the graph search skipping the
                // keys failing the predicate. Its cost grows as the share passing shrinks (about
                // 5 ms at 10 % of 100,000 vectors of 384 dimensions, as long as comparing the
                // 10,000 passing ones), so it is left for large indexes.
                #[cfg(test)]
                tests::PATHS[2].fetch_add(1, Ordering::Relaxed);
                let wanted = (2 * k).min(k.max(self.config.expansion_search));
                let found = self.graph_search(&inner, &query, wanted, Some(predicate))?;
                Ok(inner.rescore(&query, k, found.keys.into_iter()))
            }
        }
    }

    /// usearch's approximate search, filtered by `predicate` if any.
    fn graph_search(
        &self,
        inner: &Inner,
        query: &[f32],
        wanted: usize,
        predicate: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> Result<usearch::ffi::Matches> {
        let Some(predicate) = predicate else {
            let _context = self.contexts.acquire();
            return inner
                .index
                .search(query, wanted)
                .map_err(|e| usearch_error("search", e));
        };
        // A panic in the predicate must not cross usearch's C++ frames: catch it and resume it
        // once the search is over.
        let panic: RefCell<Option<Box<dyn Any + Send>>> = RefCell::new(None);
        let allow = |key: u64| {
            if panic.borrow().is_some() {
                return false;
            }
            match catch_unwind(AssertUnwindSafe(|| predicate(key))) {
                Ok(allowed) => allowed,
                Err(payload) => {
                    *panic.borrow_mut() = Some(payload);
                    false
                }
            }
        };
        let found = {
            let _context = self.contexts.acquire();
            inner.index.filtered_search(query, wanted, allow)
        };
        if let Some(payload) = panic.into_inner() {
            resume_unwind(payload);
        }
        found.map_err(|e| usearch_error("filtered search", e))
    }

    /// `vector` checked and of unit length (a normalized copy if it was not).
    fn unit<'v>(&self, vector: &'v [f32], what: &str) -> Result<Cow<'v, [f32]>> {
        if vector.len() != self.dimensions {
            return Err(Error::InvalidArgument(format!(
                "{what} has {} dimensions, the index's have {}",
                vector.len(),
                self.dimensions
            )));
        }
        if let Some(i) = vector.iter().position(|x| !x.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "{what} holds {} at position {i}",
                vector[i]
            )));
        }
        let norm = dot(vector, vector).sqrt();
        if !norm.is_normal() {
            return Err(Error::InvalidArgument(format!(
                "{what} is zero (or too small to have a direction)"
            )));
        }
        if (norm - 1.0).abs() <= 1e-4 {
            return Ok(Cow::Borrowed(vector));
        }
        Ok(Cow::Owned(vector.iter().map(|x| x / norm).collect()))
    }

    fn check_room(&self, inner: &Inner, new: usize) -> Result<()> {
        if inner.keys.len() + new > self.config.max_vectors {
            return Err(MemoryError::Quota {
                tenant: String::new(),
                what: "vectors in the index",
                count: self.config.max_vectors,
            }
            .into());
        }
        Ok(())
    }

    /// Makes room in usearch for `new` more vectors: doubling its capacity when it is full
    /// (removed entries' nodes are reused first).
    fn grow(&self, inner: &mut Inner, new: usize) -> Result<()> {
        let needed = inner.keys.len() + inner.tombstones.max(new);
        let capacity = inner.index.capacity();
        if needed <= capacity {
            return Ok(());
        }
        let target = needed
            .max(capacity.saturating_mul(2))
            .min(self.config.max_vectors + inner.tombstones)
            .max(needed);
        inner
            .index
            .reserve_capacity_and_threads(target, self.threads)
            .map_err(|e| usearch_error("reserve", e))
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorIndex")
            .field("dimensions", &self.dimensions)
            .field("len", &self.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn vector(&self, slot: usize) -> &[f32] {
        &self.arena[slot * self.dimensions..][..self.dimensions]
    }

    /// The `k` most similar to `query` among `slots`, by comparing each.
    fn scan(&self, query: &[f32], k: usize, slots: impl Iterator<Item = usize>) -> Vec<(u64, f32)> {
        let mut top = TopK::new(k);
        for slot in slots {
            top.push(self.keys[slot], dot(query, self.vector(slot)));
        }
        top.into_sorted()
    }

    /// The `k` most similar to `query` among `keys` (the graph's candidates), scored exactly.
    fn rescore(&self, query: &[f32], k: usize, keys: impl Iterator<Item = u64>) -> Vec<(u64, f32)> {
        self.scan(
            query,
            k,
            keys.filter_map(|key| self.slots.get(&key).copied()),
        )
    }

    /// Removes a present key from the graph (its node is reused by the next add).
    fn unlink(&mut self, key: u64) -> Result<()> {
        let removed = self
            .index
            .remove(key)
            .map_err(|e| usearch_error("remove", e))?;
        self.tombstones += removed;
        Ok(())
    }

    /// Records `key`'s vector after its add to the graph: in its slot if it had one (or, if the
    /// add failed, dropping it), in a new slot otherwise.
    fn store(&mut self, key: u64, slot: Option<usize>, vector: &[f32], added: bool) {
        match (slot, added) {
            (Some(slot), true) => {
                let d = self.dimensions;
                self.arena[slot * d..][..d].copy_from_slice(vector);
            }
            (Some(_), false) => self.drop_slot(key),
            (None, true) => {
                self.slots.insert(key, self.keys.len());
                self.keys.push(key);
                self.arena.extend_from_slice(vector);
            }
            (None, false) => {}
        }
        if added {
            self.tombstones = self.tombstones.saturating_sub(1);
        }
    }

    /// Forgets `key`'s slot: the last slot moves into it.
    fn drop_slot(&mut self, key: u64) {
        let Some(slot) = self.slots.remove(&key) else {
            return;
        };
        let d = self.dimensions;
        let last = self.keys.len() - 1;
        if slot != last {
            self.arena.copy_within(last * d..(last + 1) * d, slot * d);
            let moved = self.keys[last];
            self.keys[slot] = moved;
            self.slots.insert(moved, slot);
        }
        self.keys.pop();
        self.arena.truncate(last * d);
    }
}

/// `keys` without repeats (in order).
fn dedup(keys: &[u64]) -> impl Iterator<Item = u64> + '_ {
    let mut seen = HashSet::with_capacity(keys.len());
    keys.iter().copied().filter(move |key| seen.insert(*key))
}

fn check_key(key: u64) -> Result<()> {
    if key == RESERVED_KEY {
        return Err(Error::InvalidArgument(
            "vector index key u64::MAX is reserved".to_owned(),
        ));
    }
    Ok(())
}

fn usearch_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::other(format!("vector index: {what} failed: {e}"))
}

/// The dot product (eight lanes, which the compiler vectorizes).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0_f32; 8];
    let (a_chunks, a_rest) = a.as_chunks::<8>();
    let (b_chunks, b_rest) = b.as_chunks::<8>();
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let rest: f32 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + rest
}

/// The `k` best (key, similarity) pairs seen.
struct TopK {
    k: usize,
    items: Vec<(u64, f32)>,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK {
            k,
            items: Vec::with_capacity(k.min(1024) * 2),
        }
    }

    fn push(&mut self, key: u64, similarity: f32) {
        self.items.push((key, similarity));
        // Trim to the best k once twice as many are held: linear time overall.
        if self.items.len() >= self.k.saturating_mul(2).max(64) {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.items.len() > self.k {
            self.items.select_nth_unstable_by(self.k - 1, better);
            self.items.truncate(self.k);
        }
    }

    fn into_sorted(mut self) -> Vec<(u64, f32)> {
        self.trim();
        self.items.sort_unstable_by(better);
        self.items
    }
}

/// More similar first; ties by key.
fn better(a: &(u64, f32), b: &(u64, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// A counting semaphore: usearch's per-thread contexts.
struct Semaphore {
    free: Mutex<usize>,
    released: Condvar,
}

struct Permit<'a>(&'a Semaphore);

impl Semaphore {
    fn new(permits: usize) -> Self {
        Semaphore {
            free: Mutex::new(permits),
            released: Condvar::new(),
        }
    }

    fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .released
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.released.notify_one();
    }
}

/// The vector index, for the `memory` benchmark of the `soorma-tests` crate. Not public API.
#[doc(hidden)]
pub mod bench {
    use super::{Filter, IndexConfig};
    use crate::error::Result;

    /// A `VectorIndex`.
    #[derive(Debug)]
    pub struct VectorIndex(super::VectorIndex);

    impl VectorIndex {
        pub fn new(dimensions: usize, config: &IndexConfig) -> Result<Self> {
            super::VectorIndex::new(dimensions, config).map(VectorIndex)
        }
        pub fn insert(&self, key: u64, vector: &[f32]) -> Result<()> {
            self.0.insert(key, vector)
        }
        pub fn insert_many(&self, items: &[(u64, &[f32])]) -> Result<()> {
            self.0.insert_many(items)
        }
        pub fn remove(&self, key: u64) -> Result<bool> {
            self.0.remove(key)
        }
        pub fn len(&self) -> usize {
            self.0.len()
        }
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        /// `Filter::All`, or `Filter::Predicate(predicate)`.
        pub fn search(
            &self,
            query: &[f32],
            k: usize,
            predicate: Option<&(dyn Fn(u64) -> bool + Sync)>,
        ) -> Result<Vec<(u64, f32)>> {
            self.0
                .search(query, k, predicate.map_or(Filter::All, Filter::Predicate))
        }
        pub fn exact_search(
            &self,
            query: &[f32],
            k: usize,
            predicate: Option<&(dyn Fn(u64) -> bool + Sync)>,
        ) -> Result<Vec<(u64, f32)>> {
            self.0
                .exact_search(query, k, predicate.map_or(Filter::All, Filter::Predicate))
        }
        /// usearch's filtered graph search alone (what `Filter::Predicate` falls back to).
        pub fn graph_search_filtered(
            &self,
            query: &[f32],
            k: usize,
            predicate: &(dyn Fn(u64) -> bool + Sync),
        ) -> Result<Vec<(u64, f32)>> {
            let query = self.0.unit(query, "a query vector")?;
            let inner = self.0.read();
            let found = self.0.graph_search(&inner, &query, k, Some(predicate))?;
            Ok(inner.rescore(&query, k, found.keys.into_iter()))
        }
        /// `Filter::Keys(keys)`.
        pub fn search_keys(
            &self,
            query: &[f32],
            k: usize,
            keys: &[u64],
        ) -> Result<Vec<(u64, f32)>> {
            self.0.search(query, k, Filter::Keys(keys))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many filtered searches went each way: exact, the graph's nearest filtered, the
    /// graph's filtered walk.
    pub(super) static PATHS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

    fn paths() -> [usize; 3] {
        PATHS.each_ref().map(|p| p.load(Ordering::Relaxed))
    }

    /// xorshift64*: a tiny deterministic generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn uniform(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }

        /// Standard normal (Box–Muller).
        fn gaussian(&mut self) -> f32 {
            let u = self.uniform().max(f32::MIN_POSITIVE);
            let v = self.uniform();
            (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        }

        fn unit(&mut self, d: usize) -> Vec<f32> {
            let mut v: Vec<f32> = (0..d).map(|_| self.gaussian()).collect();
            crate::memory::normalize(&mut v);
            v
        }
    }

    /// `n` vectors around `clusters` random centres.
    fn clustered(rng: &mut Rng, n: usize, d: usize, clusters: usize) -> Vec<Vec<f32>> {
        let centres: Vec<Vec<f32>> = (0..clusters).map(|_| rng.unit(d)).collect();
        (0..n)
            .map(|_| {
                let centre = rng.next() as usize % clusters;
                noisy(rng, &centres[centre])
            })
            .collect()
    }

    fn noisy(rng: &mut Rng, centre: &[f32]) -> Vec<f32> {
        let scale = 1.0 / (centre.len() as f32).sqrt();
        let mut v: Vec<f32> = centre.iter().map(|c| c + rng.gaussian() * scale).collect();
        crate::memory::normalize(&mut v);
        v
    }

    /// A query near a random one of `data`.
    fn query(rng: &mut Rng, data: &[Vec<f32>]) -> Vec<f32> {
        let i = rng.next() as usize % data.len();
        noisy(rng, &data[i])
    }

    fn keys(results: &[(u64, f32)]) -> Vec<u64> {
        results.iter().map(|(k, _)| *k).collect()
    }

    fn config() -> IndexConfig {
        IndexConfig::default()
    }

    #[test]
    fn exact_and_ann_agree_on_small_sets() {
        let mut rng = Rng(7);
        let data = clustered(&mut rng, 500, 32, 10);
        let exact = VectorIndex::new(32, &config()).unwrap();
        let ann = VectorIndex::new(32, &config().with_exact_below(0)).unwrap();
        for (i, v) in data.iter().enumerate() {
            exact.insert(i as u64, v).unwrap();
            ann.insert(i as u64, v).unwrap();
        }
        assert_eq!(exact.len(), 500);
        let mut agree = 0;
        for _ in 0..50 {
            let q = query(&mut rng, &data);
            let e = exact.search(&q, 10, Filter::All).unwrap();
            let a = ann.search(&q, 10, Filter::All).unwrap();
            // Below `exact_below`, search is exact.
            assert_eq!(e, exact.exact_search(&q, 10, Filter::All).unwrap());
            let all = exact.read().keys.clone();
            let brute = exact.exact_search(&q, 10, Filter::Keys(&all)).unwrap();
            assert_eq!(keys(&e), keys(&brute));
            assert_eq!(a.len(), 10);
            assert!(a.windows(2).all(|w| w[0].1 >= w[1].1), "{a:?}");
            agree += keys(&a).iter().filter(|k| keys(&e).contains(k)).count();
            // Similarities are the dot products.
            let (key, sim) = a[0];
            let d = dot(&q, &data[key as usize]);
            assert!((sim - d).abs() < 1e-4, "{sim} vs {d}");
        }
        assert!(agree >= 490, "{agree} of 500");
    }

    #[test]
    fn recall_at_10_on_clustered_vectors() {
        // 20,000 vectors (fewer in debug than the benchmark's 100,000, same shape).
        let (n, d, queries) = (20_000, 384, 100);
        let mut rng = Rng(42);
        let data = clustered(&mut rng, n, d, 200);
        let index = VectorIndex::new(d, &config()).unwrap();
        let items: Vec<(u64, &[f32])> = data
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, v.as_slice()))
            .collect();
        index.insert_many(&items).unwrap();
        assert_eq!((index.len(), index.dimensions()), (n, d));
        let mut found = 0;
        for _ in 0..queries {
            let q = query(&mut rng, &data);
            let truth = keys(&index.exact_search(&q, 10, Filter::All).unwrap());
            let got = keys(&index.search(&q, 10, Filter::All).unwrap());
            found += got.iter().filter(|k| truth.contains(k)).count();
        }
        let recall = found as f64 / (queries * 10) as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    #[test]
    fn insert_replaces_a_keys_vector() {
        let mut rng = Rng(3);
        let index = VectorIndex::new(16, &config().with_exact_below(0)).unwrap();
        for i in 0..100 {
            index.insert(i, &rng.unit(16)).unwrap();
        }
        let old = index.get(5).unwrap();
        let new = rng.unit(16);
        index.insert(5, &new).unwrap();
        assert_eq!(index.len(), 100);
        assert_eq!(index.get(5).unwrap(), new);
        let hits = index.search(&new, 1, Filter::All).unwrap();
        assert_eq!(hits[0].0, 5);
        assert!(hits[0].1 > 0.999, "{hits:?}");
        let hits = index.exact_search(&old, 100, Filter::All).unwrap();
        assert_eq!(hits.len(), 100);
        let sim = hits.iter().find(|(k, _)| *k == 5).unwrap().1;
        assert!((sim - dot(&old, &new)).abs() < 1e-4);
        // insert_many replaces too, the last of repeated keys winning.
        let (a, b) = (rng.unit(16), rng.unit(16));
        index.insert_many(&[(5, &a), (200, &a), (5, &b)]).unwrap();
        assert_eq!(index.len(), 101);
        assert_eq!(index.get(5).unwrap(), b);
        assert_eq!(index.get(200).unwrap(), a);
    }

    #[test]
    fn unnormalized_vectors_are_normalized() {
        let index = VectorIndex::new(2, &config()).unwrap();
        index.insert(1, &[3.0, 4.0]).unwrap();
        assert_eq!(index.get(1).unwrap(), [0.6, 0.8]);
        let hits = index.search(&[0.0, 10.0], 1, Filter::All).unwrap();
        assert!((hits[0].1 - 0.8).abs() < 1e-6, "{hits:?}");
    }

    #[test]
    fn removed_keys_are_never_returned() {
        let mut rng = Rng(11);
        for exact_below in [0, usize::MAX] {
            let index = VectorIndex::new(16, &config().with_exact_below(exact_below)).unwrap();
            let data: Vec<Vec<f32>> = (0..300).map(|_| rng.unit(16)).collect();
            for (i, v) in data.iter().enumerate() {
                index.insert(i as u64, v).unwrap();
            }
            for i in (0..300).step_by(2) {
                assert!(index.remove(i).unwrap());
            }
            assert!(!index.remove(0).unwrap());
            assert!(!index.remove(1_000).unwrap());
            assert_eq!(index.len(), 150);
            assert!(!index.contains(0) && index.contains(1));
            assert_eq!(index.get(0), None);
            for v in data.iter().take(40) {
                for filter in [
                    Filter::All,
                    Filter::Keys(&[0, 1, 2, 3]),
                    Filter::Predicate(&|k| k < 100),
                ] {
                    for hits in [
                        index.search(v, 20, filter).unwrap(),
                        index.exact_search(v, 20, filter).unwrap(),
                    ] {
                        assert!(hits.iter().all(|(k, _)| k % 2 == 1), "{filter:?} {hits:?}");
                    }
                }
            }
            assert_eq!(
                index
                    .exact_search(&data[0], 1000, Filter::All)
                    .unwrap()
                    .len(),
                150
            );
            // Removed then inserted again: found again, removal's nodes reused.
            for i in (0..300).step_by(2) {
                index.insert(i, &data[i as usize]).unwrap();
            }
            assert_eq!(index.len(), 300);
            for (i, v) in data.iter().enumerate().step_by(7) {
                let hits = index.search(v, 1, Filter::All).unwrap();
                assert_eq!(hits[0].0, i as u64);
            }
            assert_eq!(index.read().tombstones, 0);
        }
    }

    #[test]
    fn filters_return_only_allowed_keys() {
        let mut rng = Rng(5);
        let (n, d, clusters) = (3_000, 32, 30);
        let centres: Vec<Vec<f32>> = (0..clusters).map(|_| rng.unit(d)).collect();
        // Key `i` is of cluster `i % clusters`.
        let data: Vec<Vec<f32>> = (0..n)
            .map(|i| noisy(&mut rng, &centres[i % clusters]))
            .collect();
        // Independent of the cluster.
        let tenth = |k: u64| (k / clusters as u64) % 10 == 3;
        let half = |k: u64| (k / clusters as u64).is_multiple_of(2);
        // Passes half the clusters: a query near the others has no passing neighbour.
        let far = |k: u64| k % clusters as u64 >= 15;
        let allowed: Vec<u64> = (0..n as u64).filter(|k| tenth(*k)).collect();
        // 1,000: few pass `tenth`, compared exactly; 100: many pass each, through the graph (its
        // nearest, filtered, for `half`; its filtered walk for `tenth`, and for `far`, whose
        // nearest all fail).
        for exact_below in [1_000, 100] {
            let index = VectorIndex::new(d, &config().with_exact_below(exact_below)).unwrap();
            for (i, v) in data.iter().enumerate() {
                index.insert(i as u64, v).unwrap();
            }
            let predicates: [(&(dyn Fn(u64) -> bool + Sync), &str); 3] =
                [(&tenth, "10 %"), (&half, "50 %"), (&far, "far clusters")];
            for (predicate, name) in predicates {
                let before = paths();
                let mut found = 0;
                for i in 0..30 {
                    // Near a cluster `far` fails.
                    let q = noisy(&mut rng, &centres[i % 15]);
                    let filter = Filter::Predicate(predicate);
                    let truth = index.exact_search(&q, 10, filter).unwrap();
                    assert_eq!(truth.len(), 10);
                    assert!(truth.iter().all(|(k, _)| predicate(*k)));
                    if name == "10 %" {
                        let by_keys = index.search(&q, 10, Filter::Keys(&allowed)).unwrap();
                        assert_eq!(by_keys, truth);
                    }
                    let hits = index.search(&q, 10, filter).unwrap();
                    assert!(hits.iter().all(|(k, _)| predicate(*k)), "{name}: {hits:?}");
                    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "{hits:?}");
                    found += keys(&hits)
                        .iter()
                        .filter(|k| keys(&truth).contains(k))
                        .count();
                }
                assert!(
                    found >= 285,
                    "{name}, exact below {exact_below}: recall {found} of 300"
                );
                // Most took the way expected.
                let after = paths();
                let way = match (exact_below, name) {
                    (1_000, "10 %") => 0,
                    (_, "50 %") => 1,
                    _ => 2,
                };
                assert!(
                    after[way] >= before[way] + 20,
                    "{name} {exact_below}: {before:?} {after:?}"
                );
            }
            // Keys: absent keys and repeats are ignored.
            let hits = index
                .search(&data[0], 10, Filter::Keys(&[7, 7, 99_999, 8]))
                .unwrap();
            assert_eq!(hits.len(), 2);
            assert_ne!(hits[0].0, hits[1].0);
            let none = index.search(&data[0], 10, Filter::Keys(&[])).unwrap();
            assert!(none.is_empty());
            let none = index
                .search(&data[0], 10, Filter::Predicate(&|_| false))
                .unwrap();
            assert!(none.is_empty());
            let one = index
                .search(&data[0], 10, Filter::Predicate(&|k| k == 17))
                .unwrap();
            assert_eq!(keys(&one), [17]);
        }
    }

    #[test]
    fn bad_input_is_rejected() {
        let index = VectorIndex::new(4, &config()).unwrap();
        let invalid = |r: Result<()>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(index.insert(1, &[1.0, 0.0, 0.0])));
        assert!(invalid(index.insert(1, &[1.0, f32::NAN, 0.0, 0.0])));
        assert!(invalid(index.insert(1, &[1.0, f32::INFINITY, 0.0, 0.0])));
        assert!(invalid(index.insert(1, &[0.0; 4])));
        assert!(invalid(index.insert(u64::MAX, &[1.0, 0.0, 0.0, 0.0])));
        assert!(invalid(
            index.insert_many(&[(1, &[1.0, 0.0, 0.0, 0.0]), (2, &[1.0])])
        ));
        assert_eq!(index.len(), 0);
        index.insert(1, &[1.0, 0.0, 0.0, 0.0]).unwrap();
        for q in [&[1.0, 0.0][..], &[f32::NAN, 0.0, 0.0, 0.0], &[0.0; 4]] {
            assert!(matches!(
                index.search(q, 1, Filter::All),
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(
            index
                .search(&[1.0, 0.0, 0.0, 0.0], 0, Filter::All)
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            VectorIndex::new(0, &config()),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            VectorIndex::new(4, &config().with_connectivity(1)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            VectorIndex::new(4, &config().with_expansion_search(0)),
            Err(Error::InvalidArgument(_))
        ));
        // An empty index.
        let empty = VectorIndex::new(4, &config().with_exact_below(0)).unwrap();
        assert!(
            empty
                .search(&[1.0, 0.0, 0.0, 0.0], 5, Filter::All)
                .unwrap()
                .is_empty()
        );
        assert!(empty.is_empty());
    }

    #[test]
    fn max_vectors_is_enforced() {
        let mut rng = Rng(9);
        let index = VectorIndex::new(8, &config().with_max_vectors(3)).unwrap();
        for i in 0..3 {
            index.insert(i, &rng.unit(8)).unwrap();
        }
        let err = index.insert(3, &rng.unit(8)).unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<MemoryError>(),
                Some(MemoryError::Quota { count: 3, .. })
            ),
            "{err}"
        );
        let v = rng.unit(8);
        assert!(index.insert_many(&[(3, &v), (4, &v)]).is_err());
        // Replacing needs no room; removing makes some.
        index.insert(2, &rng.unit(8)).unwrap();
        assert!(index.remove(0).unwrap());
        index.insert(3, &rng.unit(8)).unwrap();
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn capacity_grows_past_several_reserves() {
        let mut rng = Rng(13);
        let index = VectorIndex::new(8, &config().with_exact_below(0)).unwrap();
        let data: Vec<Vec<f32>> = (0..2_000).map(|_| rng.unit(8)).collect();
        let mut capacities = HashSet::new();
        for (i, v) in data.iter().enumerate() {
            index.insert(i as u64, v).unwrap();
            capacities.insert(index.read().index.capacity());
        }
        // 64, 128, … 2,048.
        assert!(capacities.len() >= 5, "{capacities:?}");
        assert_eq!(index.len(), 2_000);
        for (i, v) in data.iter().enumerate().step_by(97) {
            assert_eq!(index.search(v, 1, Filter::All).unwrap()[0].0, i as u64);
        }
        // A batch past the capacity.
        let more: Vec<Vec<f32>> = (0..5_000).map(|_| rng.unit(8)).collect();
        let items: Vec<(u64, &[f32])> = more
            .iter()
            .enumerate()
            .map(|(i, v)| (10_000 + i as u64, v.as_slice()))
            .collect();
        index.insert_many(&items).unwrap();
        assert_eq!(index.len(), 7_000);
        assert_eq!(
            index.search(&more[17], 1, Filter::All).unwrap()[0].0,
            10_017
        );
    }

    #[test]
    fn concurrent_searches_and_inserts() {
        let mut rng = Rng(17);
        let d = 16;
        let index = VectorIndex::new(d, &config().with_exact_below(0)).unwrap();
        let data: Vec<Vec<f32>> = (0..4_000).map(|_| rng.unit(d)).collect();
        for (i, v) in data.iter().enumerate().take(1_000) {
            index.insert(i as u64, v).unwrap();
        }
        // More searching threads than usearch has contexts.
        let searchers = index.threads * 3;
        std::thread::scope(|s| {
            s.spawn(|| {
                for (i, v) in data.iter().enumerate().skip(1_000) {
                    index.insert(i as u64, v).unwrap();
                    if i % 3 == 0 {
                        index.remove(i as u64 - 500).unwrap();
                    }
                }
            });
            for t in 0..searchers {
                let (index, data) = (&index, &data);
                s.spawn(move || {
                    for (j, q) in data.iter().enumerate().skip(t).step_by(searchers).take(300) {
                        let filter = match j % 3 {
                            0 => Filter::All,
                            1 => Filter::Predicate(&|k| k % 2 == 0),
                            _ => Filter::Keys(&[1, 2, 3, 4, 5]),
                        };
                        let hits = index.search(q, 5, filter).unwrap();
                        assert!(!hits.is_empty());
                    }
                });
            }
        });
        assert_eq!(
            index.len(),
            4_000 - (1_000..4_000).filter(|i| i % 3 == 0).count()
        );
    }

    #[test]
    fn a_panicking_predicate_panics_the_caller_only() {
        let mut rng = Rng(19);
        let index = VectorIndex::new(8, &config().with_exact_below(0)).unwrap();
        for i in 0..100 {
            index.insert(i, &rng.unit(8)).unwrap();
        }
        let q = rng.unit(8);
        let result = catch_unwind(AssertUnwindSafe(|| {
            index.search(&q, 5, Filter::Predicate(&|_| panic!("predicate")))
        }));
        assert!(result.is_err());
        // Called by usearch (C++): caught there, resumed here.
        let result = catch_unwind(AssertUnwindSafe(|| {
            let inner = index.read();
            index.graph_search(&inner, &q, 5, Some(&|k| k < 90 || panic!("predicate")))
        }));
        assert!(result.is_err());
        // The index still works.
        assert_eq!(index.search(&q, 5, Filter::All).unwrap().len(), 5);
        let found = index
            .search(&q, 5, Filter::Predicate(&|k| k % 3 == 0))
            .unwrap();
        assert_eq!(found.len(), 5);
    }
}
