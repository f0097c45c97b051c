use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::spi::state::{Revision, StateChange, StateKey, StateStore, StateWatch, Versioned};
use crate::spi::tenant::validate_tenant;
use crate::util::BoxFuture;

/// One bucket of one tenant: key → (value, revision).
type Space = HashMap<String, (Vec<u8>, Revision)>;

/// How many changes a watcher may fall behind before it is reset (and re-reads the bucket).
const WATCH_BACKLOG: usize = 4096;

#[derive(Default)]
struct Inner {
    /// (bucket, tenant) → its records.
    spaces: HashMap<(&'static str, String), Space>,
    last_revision: Revision,
    /// The watched buckets' change feeds.
    watchers: HashMap<&'static str, tokio::sync::broadcast::Sender<StateChange>>,
}

impl Inner {
    /// Tells the bucket's watchers, if any, about a change (under the store's lock, so they see
    /// changes in revision order).
    fn notify(&mut self, bucket: &'static str, change: impl FnOnce() -> StateChange) {
        if let Some(feed) = self.watchers.get(bucket) {
            if feed.receiver_count() == 0 {
                self.watchers.remove(bucket);
            } else {
                let _ = feed.send(change());
            }
        }
    }

    /// Whether the bucket has watchers (so that writes copy their values for them).
    fn watched(&self, bucket: &'static str) -> bool {
        self.watchers.contains_key(bucket)
    }

    /// Tells the bucket's watchers about a write (`value` is the copy made for them).
    fn notify_put(&mut self, key: &StateKey, value: Option<Vec<u8>>, revision: Revision) {
        if let Some(value) = value {
            self.notify(key.bucket, || StateChange::Put {
                tenant: key.tenant.clone(),
                key: key.key.clone(),
                value,
                revision,
            });
        }
    }

    /// The bucket's records as changes, then `Current`; and a receiver of what follows.
    fn snapshot(
        &mut self,
        bucket: &'static str,
    ) -> (
        std::collections::VecDeque<StateChange>,
        tokio::sync::broadcast::Receiver<StateChange>,
    ) {
        let rx = self
            .watchers
            .entry(bucket)
            .or_insert_with(|| tokio::sync::broadcast::channel(WATCH_BACKLOG).0)
            .subscribe();
        let mut changes: std::collections::VecDeque<StateChange> = self
            .spaces
            .iter()
            .filter(|((b, _), _)| *b == bucket)
            .flat_map(|((_, tenant), records)| {
                records
                    .iter()
                    .map(move |(key, (value, revision))| StateChange::Put {
                        tenant: tenant.clone(),
                        key: key.clone(),
                        value: value.clone(),
                        revision: *revision,
                    })
            })
            .collect();
        changes.make_contiguous().sort_by_key(|c| match c {
            StateChange::Put { revision, .. } => *revision,
            _ => 0,
        });
        changes.push_back(StateChange::Current);
        (changes, rx)
    }
}

/// A watch on one bucket of a [`MemoryStore`].
struct Watch {
    store: MemoryStore,
    bucket: &'static str,
    pending: std::collections::VecDeque<StateChange>,
    rx: tokio::sync::broadcast::Receiver<StateChange>,
}

impl StateWatch for Watch {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StateChange>>> {
        Box::pin(async move {
            if let Some(change) = self.pending.pop_front() {
                return Some(Ok(change));
            }
            match self.rx.recv().await {
                Ok(change) => Some(Ok(change)),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        bucket = self.bucket,
                        missed,
                        "state watcher fell behind; re-reading the bucket"
                    );
                    let (mut changes, rx) = self.store.with(|inner| inner.snapshot(self.bucket));
                    self.rx = rx;
                    changes.push_front(StateChange::Reset);
                    self.pending = changes;
                    self.pending.pop_front().map(Ok)
                }
            }
        })
    }
}

/// The in-memory state store: revision-checked, scoped by tenant.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::embedded::MemoryStore;
/// use soorma::state::{StateKey, StateStore};
///
/// let store = MemoryStore::new();
/// let key = StateKey::new("tasks", "acme", "t1");
/// let r1 = store.create(&key, b"v1".to_vec()).await?;
/// let r2 = store.update(&key, b"v2".to_vec(), r1).await?;
/// assert!(store.update(&key, b"v3".to_vec(), r1).await.is_err()); // stale revision
/// assert_eq!(store.get(&key).await?.unwrap().revision, r2);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::StateStore;
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// assert!(store.keys("tasks", "acme").await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().expect("state lock"))
    }
}

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

/// The space of `key`'s tenant (a tenant id NATS would reject is rejected here too).
fn space(key: &StateKey) -> Result<(&'static str, String)> {
    validate_tenant(&key.tenant)?;
    Ok((key.bucket, key.tenant.clone()))
}

impl StateStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<Option<Versioned<Vec<u8>>>>> {
        ready(space(key).map(|space| {
            self.with(|inner| {
                inner
                    .spaces
                    .get(&space)
                    .and_then(|s| s.get(&key.key))
                    .map(|(v, r)| Versioned {
                        value: v.clone(),
                        revision: *r,
                    })
            })
        }))
    }

    fn create<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>> {
        ready(space(key).and_then(|space| {
            self.with(|inner| {
                let revision = inner.last_revision + 1;
                if inner
                    .spaces
                    .get(&space)
                    .is_some_and(|e| e.contains_key(&key.key))
                {
                    return Err(Error::Conflict {
                        key: key.to_string(),
                    });
                }
                let copy = inner.watched(key.bucket).then(|| value.clone());
                let entries = inner.spaces.entry(space).or_default();
                entries.insert(key.key.clone(), (value, revision));
                inner.last_revision = revision;
                inner.notify_put(key, copy, revision);
                Ok(revision)
            })
        }))
    }

    fn update<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Revision,
    ) -> BoxFuture<'a, Result<Revision>> {
        ready(space(key).and_then(|space| {
            self.with(|inner| {
                let revision = inner.last_revision + 1;
                let copy = inner.watched(key.bucket).then(|| value.clone());
                match inner
                    .spaces
                    .get_mut(&space)
                    .and_then(|s| s.get_mut(&key.key))
                {
                    Some(entry) if entry.1 == expected => {
                        *entry = (value, revision);
                        inner.last_revision = revision;
                        inner.notify_put(key, copy, revision);
                        Ok(revision)
                    }
                    _ => Err(Error::Conflict {
                        key: key.to_string(),
                    }),
                }
            })
        }))
    }

    fn put<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>> {
        ready(space(key).and_then(|space| {
            self.with(|inner| {
                let revision = inner.last_revision + 1;
                let copy = inner.watched(key.bucket).then(|| value.clone());
                inner
                    .spaces
                    .entry(space)
                    .or_default()
                    .insert(key.key.clone(), (value, revision));
                inner.last_revision = revision;
                inner.notify_put(key, copy, revision);
                Ok(revision)
            })
        }))
    }

    fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<()>> {
        ready(space(key).map(|space| {
            self.with(|inner| {
                let removed = inner
                    .spaces
                    .get_mut(&space)
                    .and_then(|s| s.remove(&key.key));
                if removed.is_some() {
                    inner.last_revision += 1;
                    let revision = inner.last_revision;
                    inner.notify(key.bucket, || StateChange::Delete {
                        tenant: key.tenant.clone(),
                        key: key.key.clone(),
                        revision,
                    });
                }
            })
        }))
    }

    fn delete_if<'a>(&'a self, key: &'a StateKey, expected: Revision) -> BoxFuture<'a, Result<()>> {
        ready(space(key).and_then(|space| {
            self.with(|inner| {
                let current = inner
                    .spaces
                    .get(&space)
                    .and_then(|s| s.get(&key.key))
                    .map(|(_, r)| *r);
                if current != Some(expected) {
                    return Err(Error::Conflict {
                        key: key.to_string(),
                    });
                }
                if let Some(s) = inner.spaces.get_mut(&space) {
                    s.remove(&key.key);
                }
                inner.last_revision += 1;
                let revision = inner.last_revision;
                inner.notify(key.bucket, || StateChange::Delete {
                    tenant: key.tenant.clone(),
                    key: key.key.clone(),
                    revision,
                });
                Ok(())
            })
        }))
    }

    fn keys<'a>(
        &'a self,
        bucket: &'static str,
        tenant: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        if let Err(e) = validate_tenant(tenant) {
            return ready(Err(e));
        }
        let mut keys: Vec<String> = self.with(|inner| {
            inner
                .spaces
                .get(&(bucket, tenant.to_owned()))
                .map(|s| s.keys().cloned().collect())
                .unwrap_or_default()
        });
        keys.sort();
        ready(Ok(keys))
    }

    fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Vec<String>>> {
        let mut tenants: Vec<String> = self.with(|inner| {
            inner
                .spaces
                .iter()
                .filter(|((b, _), records)| *b == bucket && !records.is_empty())
                .map(|((_, tenant), _)| tenant.clone())
                .collect()
        });
        tenants.sort();
        ready(Ok(tenants))
    }

    fn watch<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Box<dyn StateWatch>>> {
        let (pending, rx) = self.with(|inner| inner.snapshot(bucket));
        ready(Ok(Box::new(Watch {
            store: self.clone(),
            bucket,
            pending,
            rx,
        }) as Box<dyn StateWatch>))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(watch: &mut Box<dyn StateWatch>) -> StateChange {
        tokio::time::timeout(std::time::Duration::from_secs(1), watch.next())
            .await
            .expect("a change")
            .expect("the store is alive")
            .expect("no error")
    }

    #[tokio::test]
    async fn a_watch_reports_records_then_current_then_changes_in_order() {
        let store = MemoryStore::new();
        let key = |t: &str, k: &str| StateKey::new("notes", t, k);
        store.put(&key("acme", "a"), b"1".to_vec()).await.unwrap();
        store.put(&key("globex", "b"), b"2".to_vec()).await.unwrap();
        store
            .put(&StateKey::new("other", "acme", "x"), Vec::new())
            .await
            .unwrap();
        let mut watch = store.watch("notes").await.unwrap();
        let snapshot = [next(&mut watch).await, next(&mut watch).await];
        assert!(
            matches!(&snapshot[0], StateChange::Put { tenant, key, .. } if tenant == "acme" && key == "a")
        );
        assert!(
            matches!(&snapshot[1], StateChange::Put { tenant, key, .. } if tenant == "globex" && key == "b")
        );
        assert_eq!(next(&mut watch).await, StateChange::Current);
        let r = store
            .create(&key("acme", "c"), b"3".to_vec())
            .await
            .unwrap();
        store
            .update(&key("acme", "c"), b"4".to_vec(), r)
            .await
            .unwrap();
        store
            .put(&StateKey::new("other", "acme", "y"), Vec::new())
            .await
            .unwrap(); // not watched
        store.delete(&key("acme", "a")).await.unwrap();
        store.delete(&key("acme", "never")).await.unwrap(); // nothing deleted: nothing reported
        let r = store
            .get(&key("acme", "c"))
            .await
            .unwrap()
            .unwrap()
            .revision;
        store.delete_if(&key("acme", "c"), r).await.unwrap();
        let mut last = 0;
        let mut seen = Vec::new();
        for _ in 0..4 {
            match next(&mut watch).await {
                StateChange::Put {
                    key,
                    value,
                    revision,
                    ..
                } => {
                    assert!(revision > last);
                    last = revision;
                    seen.push(format!("put {key} {}", String::from_utf8(value).unwrap()));
                }
                StateChange::Delete { key, revision, .. } => {
                    assert!(revision > last);
                    last = revision;
                    seen.push(format!("delete {key}"));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, ["put c 3", "put c 4", "delete a", "delete c"]);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), watch.next())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_is_reset_and_reads_the_bucket_again() {
        let store = MemoryStore::new();
        let mut watch = store.watch("notes").await.unwrap();
        assert_eq!(next(&mut watch).await, StateChange::Current);
        let n = WATCH_BACKLOG + 100;
        for i in 0..n {
            store
                .put(&StateKey::new("notes", "acme", format!("k{i}")), vec![1])
                .await
                .unwrap();
        }
        assert_eq!(next(&mut watch).await, StateChange::Reset);
        let mut keys = std::collections::HashSet::new();
        loop {
            match next(&mut watch).await {
                StateChange::Put { key, .. } => assert!(keys.insert(key)),
                StateChange::Current => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(keys.len(), n);
        // Caught up: the next change is the next write.
        store
            .put(&StateKey::new("notes", "acme", "after"), vec![2])
            .await
            .unwrap();
        assert!(matches!(next(&mut watch).await, StateChange::Put { key, .. } if key == "after"));
    }

    #[tokio::test]
    async fn writes_stop_copying_values_once_no_one_watches() {
        let store = MemoryStore::new();
        let watch = store.watch("notes").await.unwrap();
        drop(watch);
        store
            .put(&StateKey::new("notes", "acme", "k"), vec![1])
            .await
            .unwrap();
        assert!(store.with(|inner| inner.watchers.is_empty()));
    }

    #[tokio::test]
    async fn create_update_conflicts_and_tenant_scoping() {
        let store = MemoryStore::new();
        let a = StateKey::new("tasks", "tenant-a", "t1");
        let b = StateKey::new("tasks", "tenant-b", "t1");
        let r1 = store.create(&a, b"a".to_vec()).await.unwrap();
        assert!(matches!(
            store.create(&a, b"x".to_vec()).await,
            Err(Error::Conflict { .. })
        ));
        assert!(
            store.get(&b).await.unwrap().is_none(),
            "tenant b must not see tenant a"
        );
        assert_eq!(
            store.keys("tasks", "tenant-b").await.unwrap(),
            Vec::<String>::new()
        );
        let r2 = store.update(&a, b"a2".to_vec(), r1).await.unwrap();
        assert!(r2 > r1);
        assert!(matches!(
            store.update(&a, b"a3".to_vec(), r1).await,
            Err(Error::Conflict { .. })
        ));
        assert!(matches!(
            store.update(&b, b"b".to_vec(), r2).await,
            Err(Error::Conflict { .. })
        ));
        store.delete(&a).await.unwrap();
        assert!(store.get(&a).await.unwrap().is_none());
    }
}
