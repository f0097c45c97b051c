//! The state store: revision-checked key/value records, scoped by tenant.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::util::BoxFuture;

/// A record's revision; every write yields a new, larger one.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::state::{Revision, StateKey, StateStore};
///
/// let store = soorma::embedded::MemoryStore::new();
/// let key = StateKey::new("notes", "acme", "n1");
/// let first: Revision = store.put(&key, b"draft".to_vec()).await?;
/// let second: Revision = store.put(&key, b"final".to_vec()).await?;
/// assert!(second > first);
/// # Ok(()) }
/// ```
pub type Revision = u64;

/// Where a record lives: bucket, tenant and key. Tenants never see each other's records.
///
/// ```
/// use soorma::state::StateKey;
/// let key = StateKey::new("tasks", "acme", "task-1");
/// assert_eq!(key.to_string(), "tasks/acme/task-1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct StateKey {
    /// The bucket (`tasks`, `subtasks`, `plans`, ...).
    pub bucket: &'static str,
    /// The tenant.
    pub tenant: String,
    /// The record key within the bucket and tenant.
    pub key: String,
}

impl StateKey {
    /// A key.
    ///
    /// ```
    /// # use soorma::state::StateKey;
    /// assert_eq!(StateKey::new("b", "t", "k").bucket, "b");
    /// ```
    pub fn new(bucket: &'static str, tenant: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            bucket,
            tenant: tenant.into(),
            key: key.into(),
        }
    }
}

impl fmt::Display for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.bucket, self.tenant, self.key)
    }
}

/// A stored value with its revision.
///
/// ```
/// use soorma::state::Versioned;
/// let v = Versioned { value: 5, revision: 1 };
/// assert_eq!(v.revision, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// Its revision.
    pub revision: Revision,
}

/// A change to a bucket's records, as a [`StateWatch`] reports it.
///
/// ```
/// use soorma::state::StateChange;
/// let change = StateChange::Delete { tenant: "acme".into(), key: "n1".into(), revision: 7 };
/// assert!(matches!(change, StateChange::Delete { revision: 7, .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateChange {
    /// A record was written (or, before [`Current`](Self::Current), exists).
    Put {
        /// The record's tenant.
        tenant: String,
        /// The record's key.
        key: String,
        /// Its value.
        value: Vec<u8>,
        /// Its revision.
        revision: Revision,
    },
    /// A record was deleted.
    Delete {
        /// The record's tenant.
        tenant: String,
        /// The record's key.
        key: String,
        /// The revision of the deletion.
        revision: Revision,
    },
    /// Every record that existed when the watch started (or restarted) has been reported;
    /// what follows happened since.
    Current,
    /// The watch fell behind and missed changes: drop what was built from it; the bucket's
    /// records follow again, then [`Current`](Self::Current).
    Reset,
}

/// The changes to one bucket, all tenants: first its records, then
/// [`StateChange::Current`], then every write and deletion as it happens.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::state::{StateChange, StateKey, StateStore};
///
/// let store = soorma::embedded::MemoryStore::new();
/// store.put(&StateKey::new("notes", "acme", "n1"), b"one".to_vec()).await?;
/// let mut watch = store.watch("notes").await?;
/// assert!(matches!(watch.next().await, Some(Ok(StateChange::Put { .. }))));
/// assert_eq!(watch.next().await.unwrap()?, StateChange::Current);
/// store.delete(&StateKey::new("notes", "acme", "n1")).await?;
/// assert!(matches!(watch.next().await, Some(Ok(StateChange::Delete { .. }))));
/// # Ok(()) }
/// ```
pub trait StateWatch: Send {
    /// The next change; `None` when the store is gone.
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StateChange>>>;
}

/// A platform's key/value store with revision-checked writes.
///
/// `create` fails with [`Error::Conflict`] when the key exists; `update` fails with
/// [`Error::Conflict`] when the stored revision is not `expected`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::state::StateKey;
///
/// let platform = soorma::Platform::embedded();
/// let store = platform.state();
/// let key = StateKey::new("profiles", "acme", "ann");
/// let rev = store.create(&key, br#"{"plan":"free"}"#.to_vec()).await?;
/// store.update(&key, br#"{"plan":"pro"}"#.to_vec(), rev).await?;
/// // A writer still holding the old revision loses.
/// let stale = store.update(&key, br#"{"plan":"team"}"#.to_vec(), rev).await;
/// assert!(matches!(stale, Err(soorma::Error::Conflict { .. })));
/// # Ok(()) }
/// ```
pub trait StateStore: Send + Sync + 'static {
    /// Reads a record.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("notes", "acme", "n1");
    /// assert!(store.get(&key).await?.is_none());
    /// let rev = store.put(&key, b"hello".to_vec()).await?;
    /// let stored = store.get(&key).await?.unwrap();
    /// assert_eq!((stored.value.as_slice(), stored.revision), (&b"hello"[..], rev));
    /// # Ok(()) }
    /// ```
    fn get<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<Option<Versioned<Vec<u8>>>>>;
    /// Creates a record that must not exist yet.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("locks", "acme", "nightly-report");
    /// store.create(&key, b"worker-1".to_vec()).await?;
    /// let second = store.create(&key, b"worker-2".to_vec()).await;
    /// assert!(matches!(second, Err(soorma::Error::Conflict { .. }))); // first one wins
    /// # Ok(()) }
    /// ```
    fn create<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>>;
    /// Replaces a record if its revision is still `expected`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("counters", "acme", "visits");
    /// let r1 = store.create(&key, b"1".to_vec()).await?;
    /// let r2 = store.update(&key, b"2".to_vec(), r1).await?;
    /// assert!(store.update(&key, b"2".to_vec(), r1).await.is_err()); // stale revision
    /// assert_eq!(store.get(&key).await?.unwrap().revision, r2);
    /// # Ok(()) }
    /// ```
    fn update<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Revision,
    ) -> BoxFuture<'a, Result<Revision>>;
    /// Writes a record unconditionally.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("cache", "acme", "homepage");
    /// store.put(&key, b"v1".to_vec()).await?;
    /// store.put(&key, b"v2".to_vec()).await?; // no revision check
    /// assert_eq!(store.get(&key).await?.unwrap().value, b"v2");
    /// # Ok(()) }
    /// ```
    fn put<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>>;
    /// Deletes a record (no error if absent).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("cache", "acme", "homepage");
    /// store.put(&key, b"v1".to_vec()).await?;
    /// store.delete(&key).await?;
    /// store.delete(&key).await?; // already gone: still fine
    /// assert!(store.get(&key).await?.is_none());
    /// # Ok(()) }
    /// ```
    fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<()>>;
    /// Deletes a record only if its revision is still `expected`; [`Error::Conflict`] when it
    /// is not (or the record is gone). The default reads, compares and deletes, which a write
    /// between the two can slip past: engines override it with an atomic one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let key = StateKey::new("leases", "acme", "job-1");
    /// let r1 = store.put(&key, b"worker-1".to_vec()).await?;
    /// let r2 = store.put(&key, b"worker-2".to_vec()).await?; // taken over
    /// assert!(store.delete_if(&key, r1).await.is_err()); // worker-1's release loses
    /// store.delete_if(&key, r2).await?;
    /// assert!(store.get(&key).await?.is_none());
    /// # Ok(()) }
    /// ```
    fn delete_if<'a>(&'a self, key: &'a StateKey, expected: Revision) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match self.get(key).await? {
                Some(v) if v.revision == expected => self.delete(key).await,
                _ => Err(Error::Conflict {
                    key: key.to_string(),
                }),
            }
        })
    }
    /// Lists the keys of a bucket for one tenant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// for (tenant, key) in [("acme", "b"), ("acme", "a"), ("globex", "c")] {
    ///     store.put(&StateKey::new("notes", tenant, key), Vec::new()).await?;
    /// }
    /// assert_eq!(store.keys("notes", "acme").await?, ["a", "b"]);
    /// # Ok(()) }
    /// ```
    fn keys<'a>(
        &'a self,
        bucket: &'static str,
        tenant: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>>;
    /// Lists the tenants with records in a bucket, sorted (for platform services that work
    /// across tenants, such as recovering durable timers). A tenant whose records were all
    /// deleted may still be listed; its [`keys`](Self::keys) are then empty.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// for (tenant, key) in [("globex", "a"), ("acme", "b"), ("acme", "c")] {
    ///     store.put(&StateKey::new("notes", tenant, key), Vec::new()).await?;
    /// }
    /// assert_eq!(store.tenants("notes").await?, ["acme", "globex"]);
    /// assert!(store.tenants("empty").await?.is_empty());
    /// # Ok(()) }
    /// ```
    fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Vec<String>>>;
    /// Watches a bucket, all tenants (see [`StateWatch`]): for services that keep a view of a
    /// bucket current, such as memory's vector index. Stores that cannot watch answer
    /// [`Error::InvalidArgument`] (the default).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::state::{StateChange, StateKey, StateStore};
    ///
    /// let store = soorma::embedded::MemoryStore::new();
    /// let mut watch = store.watch("notes").await?;
    /// assert_eq!(watch.next().await.unwrap()?, StateChange::Current); // nothing stored yet
    /// store.put(&StateKey::new("notes", "acme", "n1"), b"hi".to_vec()).await?;
    /// match watch.next().await.unwrap()? {
    ///     StateChange::Put { tenant, key, value, .. } => {
    ///         assert_eq!((tenant.as_str(), key.as_str(), value.as_slice()), ("acme", "n1", &b"hi"[..]));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    fn watch<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Box<dyn StateWatch>>> {
        Box::pin(async move {
            Err(Error::InvalidArgument(format!(
                "this state store cannot watch bucket `{bucket}`"
            )))
        })
    }
}

/// What an update closure decided.
#[derive(Debug)]
pub(crate) enum Change<R> {
    /// Write the modified value.
    Write(R),
    /// Leave the record as it is.
    Keep(R),
}

/// How many times a revision-checked update is tried before it gives up with a conflict.
pub(crate) const MAX_ATTEMPTS: u32 = 10_000;

pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::serialize(what, e))
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    key: &StateKey,
    bytes: &[u8],
) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| Error::CorruptState {
        what,
        key: key.to_string(),
        source,
    })
}

/// Reads a typed record.
pub(crate) async fn load<T: DeserializeOwned>(
    store: &dyn StateStore,
    what: &'static str,
    key: &StateKey,
) -> Result<Option<Versioned<T>>> {
    match store.get(key).await? {
        Some(v) => Ok(Some(Versioned {
            value: decode(what, key, &v.value)?,
            revision: v.revision,
        })),
        None => Ok(None),
    }
}

/// Read-modify-write with revision check, retried on conflict until it applies.
///
/// Returns the closure's answer and the record as stored afterwards.
pub(crate) async fn update_with<T, R>(
    store: &dyn StateStore,
    what: &'static str,
    key: &StateKey,
    missing: impl Fn() -> Error,
    mut f: impl FnMut(&mut T) -> Result<Change<R>>,
) -> Result<(R, Versioned<T>)>
where
    T: Serialize + DeserializeOwned,
{
    for attempt in 0..MAX_ATTEMPTS {
        let Some(mut current) = load::<T>(store, what, key).await? else {
            return Err(missing());
        };
        match f(&mut current.value)? {
            Change::Keep(r) => return Ok((r, current)),
            Change::Write(r) => {
                let bytes = encode(what, &current.value)?;
                match store.update(key, bytes, current.revision).await {
                    Ok(revision) => {
                        current.revision = revision;
                        return Ok((r, current));
                    }
                    Err(Error::Conflict { .. }) => backoff(attempt).await,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Err(Error::Conflict {
        key: key.to_string(),
    })
}

/// Waits before attempt `attempt` of a revision-checked update that lost a race.
pub(crate) async fn backoff(attempt: u32) {
    if attempt < 8 {
        tokio::task::yield_now().await;
    } else {
        // Spread contenders out: 50µs .. 5ms, varied per attempt.
        let micros = 50
            + u64::from(attempt.wrapping_mul(2_654_435_761) % 50) * (u64::from(attempt.min(100)));
        tokio::time::sleep(Duration::from_micros(micros.min(5_000))).await;
    }
}
