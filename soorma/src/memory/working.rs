//! Working memory: key/value records scoped to a plan, a session or a task, revision-checked,
//! with a time to live.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use soorma_common::memory::WorkingRecord;

use super::codec::{expiry, now_ms};
use super::{Memory, MemoryError};
use crate::error::{Error, Result};
use crate::spi::state::{self as state_spi, Revision, StateKey, Versioned};

/// The bucket of working memory.
pub(crate) const WORKING_BUCKET: &str = "memory_working";

/// The longest key or scope id, in bytes.
const MAX_KEY_LEN: usize = 256;

/// What a working memory belongs to.
///
/// ```
/// use soorma::memory::Scope;
/// assert_eq!(Scope::plan("p-1").to_string(), "plan p-1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// A plan (a planner's goal execution).
    Plan(String),
    /// A session (a conversation).
    Session(String),
    /// A task (a worker's unit of work).
    Task(String),
}

impl Scope {
    /// A plan's scope.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Scope::plan("p"), soorma::memory::Scope::Plan("p".into()));
    /// ```
    pub fn plan(id: impl Into<String>) -> Self {
        Scope::Plan(id.into())
    }

    /// A session's scope.
    ///
    /// ```
    /// let s = soorma::memory::Scope::session("chat-7");
    /// ```
    pub fn session(id: impl Into<String>) -> Self {
        Scope::Session(id.into())
    }

    /// A task's scope.
    ///
    /// ```
    /// let s = soorma::memory::Scope::task("task-1");
    /// ```
    pub fn task(id: impl Into<String>) -> Self {
        Scope::Task(id.into())
    }

    fn parts(&self) -> (&'static str, &str) {
        match self {
            Scope::Plan(id) => ("plan", id),
            Scope::Session(id) => ("session", id),
            Scope::Task(id) => ("task", id),
        }
    }

    /// The record-key prefix of this scope: `<kind>:<id length>:<id>:`, so that no scope's
    /// keys are a prefix of another's.
    fn prefix(&self) -> String {
        let (kind, id) = self.parts();
        format!("{kind}:{}:{id}:", id.len())
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, id) = self.parts();
        write!(f, "{kind} {id}")
    }
}

/// Checks a key or scope id: 1 to 256 bytes without control characters.
fn check_key(what: &str, key: &str) -> Result<()> {
    super::codec::check_text(&format!("working-memory {what}"), key, MAX_KEY_LEN)
}

/// The working memory of one scope in one tenant: JSON values by key, revision-checked, each
/// with an optional time to live.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{Memory, Scope};
///
/// let memory = Memory::new(&soorma::Platform::embedded()).await?;
/// let plan = memory.tenant("acme")?.working(Scope::plan("p-1"))?;
/// plan.set("budget", &120).await?;
/// plan.update("budget", |b: Option<u32>| Some(b.unwrap_or(0) - 20)).await?;
/// assert_eq!(plan.get::<u32>("budget").await?, Some(100));
/// assert_eq!(plan.keys().await?, ["budget"]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WorkingMemory {
    pub(crate) memory: Memory,
    pub(crate) tenant: String,
    pub(crate) scope: Scope,
    pub(crate) user: Option<String>,
}

impl std::fmt::Debug for WorkingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkingMemory")
            .field("tenant", &self.tenant)
            .field("scope", &self.scope)
            .finish()
    }
}

impl WorkingMemory {
    pub(crate) fn new(
        memory: Memory,
        tenant: String,
        scope: Scope,
        user: Option<String>,
    ) -> Result<Self> {
        check_key("scope id", scope.parts().1)?;
        Ok(Self {
            memory,
            tenant,
            scope,
            user,
        })
    }

    /// The scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::task("t1"))?;
    /// assert_eq!(wm.scope(), &soorma::memory::Scope::task("t1"));
    /// # Ok(()) }
    /// ```
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn key(&self, key: &str) -> Result<StateKey> {
        check_key("key", key)?;
        Ok(StateKey::new(
            WORKING_BUCKET,
            self.tenant.clone(),
            format!("{}{key}", self.scope.prefix()),
        ))
    }

    /// Reads a stored record, deleting it when it has expired.
    async fn load(&self, key: &StateKey) -> Result<Option<Versioned<WorkingRecord>>> {
        let store = self.memory.inner.store();
        let Some(record) = state_spi::load::<WorkingRecord>(store, "working memory", key).await?
        else {
            return Ok(None);
        };
        if record.value.expires_at.is_some_and(|at| at <= now_ms()) {
            // Expired: gone for readers now, and from the store unless rewritten meanwhile.
            match store.delete_if(key, record.revision).await {
                Ok(()) | Err(Error::Conflict { .. }) => {}
                Err(e) => {
                    tracing::debug!(%key, error = %e, "could not delete an expired working-memory value")
                }
            }
            return Ok(None);
        }
        Ok(Some(record))
    }

    fn encode<T: Serialize>(&self, value: &T, ttl: Option<Duration>) -> Result<Vec<u8>> {
        let config = &self.memory.inner.config;
        let value =
            serde_json::to_value(value).map_err(|e| Error::serialize("working-memory value", e))?;
        let record = WorkingRecord {
            value,
            expires_at: expiry(now_ms(), ttl.or(config.working_ttl)),
            user_id: self.user.clone(),
        };
        let bytes = state_spi::encode("working memory", &record)?;
        if bytes.len() > config.max_value_bytes {
            return Err(MemoryError::TooLarge {
                what: "working-memory value",
                len: bytes.len(),
                max: config.max_value_bytes,
            }
            .into());
        }
        Ok(bytes)
    }

    fn decode<T: DeserializeOwned>(key: &StateKey, record: WorkingRecord) -> Result<T> {
        serde_json::from_value(record.value).map_err(|source| Error::CorruptState {
            what: "working-memory value",
            key: key.to_string(),
            source,
        })
    }

    /// The value of `key`, if set and not expired.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::session("s1"))?;
    /// assert_eq!(wm.get::<String>("name").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        Ok(self.get_versioned(key).await?.map(|v| v.value))
    }

    /// The value of `key` with its revision, for [`compare_and_set`](Self::compare_and_set).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// let rev = wm.set("step", &1).await?;
    /// assert_eq!(wm.get_versioned::<u32>("step").await?.unwrap().revision, rev);
    /// # Ok(()) }
    /// ```
    pub async fn get_versioned<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<Versioned<T>>> {
        let k = self.key(key)?;
        match self.load(&k).await? {
            Some(v) => Ok(Some(Versioned {
                value: Self::decode(&k, v.value)?,
                revision: v.revision,
            })),
            None => Ok(None),
        }
    }

    /// Sets `key` (with the memory's default time to live); its new revision.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// wm.set("draft", &serde_json::json!({"title": "Q3"})).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set<T: Serialize>(&self, key: &str, value: &T) -> Result<Revision> {
        let k = self.key(key)?;
        let bytes = self.encode(value, None)?;
        self.memory.inner.store().put(&k, bytes).await
    }

    /// Sets `key` to expire after `ttl`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::session("s"))?;
    /// wm.set_with_ttl("otp", &"123456", std::time::Duration::from_millis(20)).await?;
    /// tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    /// assert_eq!(wm.get::<String>("otp").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn set_with_ttl<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        ttl: Duration,
    ) -> Result<Revision> {
        let k = self.key(key)?;
        let bytes = self.encode(value, Some(ttl))?;
        self.memory.inner.store().put(&k, bytes).await
    }

    /// Sets `key` only if its revision is still `expected` (`None`: only if unset);
    /// [`Error::Conflict`] otherwise.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// let r1 = wm.compare_and_set("owner", &"ann", None).await?;
    /// assert!(wm.compare_and_set("owner", &"bob", None).await.is_err()); // already set
    /// wm.compare_and_set("owner", &"bob", Some(r1)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn compare_and_set<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        expected: Option<Revision>,
    ) -> Result<Revision> {
        let k = self.key(key)?;
        let bytes = self.encode(value, None)?;
        let store = self.memory.inner.store();
        match expected {
            Some(revision) => store.update(&k, bytes, revision).await,
            None => match self.load(&k).await? {
                // An expired value counts as unset.
                None => store.create(&k, bytes).await,
                Some(_) => Err(Error::Conflict { key: k.to_string() }),
            },
        }
    }

    /// Reads, changes and writes `key` with a revision check, again on a lost race; `f` gets
    /// the current value (`None` if unset) and returns the new one (`None` deletes). Returns
    /// the value written.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// let n = wm.update("visits", |n: Option<u64>| Some(n.unwrap_or(0) + 1)).await?;
    /// assert_eq!(n, Some(1));
    /// # Ok(()) }
    /// ```
    pub async fn update<T, F>(&self, key: &str, mut f: F) -> Result<Option<T>>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> Option<T>,
    {
        let k = self.key(key)?;
        let store = self.memory.inner.store();
        for attempt in 0..state_spi::MAX_ATTEMPTS {
            let current = self.load(&k).await?;
            let revision = current.as_ref().map(|c| c.revision);
            let value = match current {
                Some(c) => Some(Self::decode::<T>(&k, c.value)?),
                None => None,
            };
            let next = f(value);
            let written = match (&next, revision) {
                (Some(v), Some(r)) => store.update(&k, self.encode(v, None)?, r).await.map(|_| ()),
                (Some(v), None) => store.create(&k, self.encode(v, None)?).await.map(|_| ()),
                (None, Some(r)) => store.delete_if(&k, r).await,
                (None, None) => Ok(()),
            };
            match written {
                Ok(()) => return Ok(next),
                Err(Error::Conflict { .. }) => state_spi::backoff(attempt).await,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict { key: k.to_string() })
    }

    /// Deletes `key` (no error if unset).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// wm.set("tmp", &1).await?;
    /// wm.delete("tmp").await?;
    /// assert_eq!(wm.get::<u32>("tmp").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, key: &str) -> Result<()> {
        let k = self.key(key)?;
        self.memory.inner.store().delete(&k).await
    }

    /// The keys set in this scope, sorted (expired ones included until read or swept).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let acme = memory.tenant("acme")?;
    /// acme.working(soorma::memory::Scope::plan("p1"))?.set("a", &1).await?;
    /// acme.working(soorma::memory::Scope::plan("p10"))?.set("b", &2).await?;
    /// assert_eq!(acme.working(soorma::memory::Scope::plan("p1"))?.keys().await?, ["a"]);
    /// # Ok(()) }
    /// ```
    pub async fn keys(&self) -> Result<Vec<String>> {
        let prefix = self.scope.prefix();
        Ok(self
            .memory
            .inner
            .store()
            .keys(WORKING_BUCKET, &self.tenant)
            .await?
            .into_iter()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
            .collect())
    }

    /// Deletes every key of this scope (when its plan, session or task is done).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::plan("p"))?;
    /// wm.set("a", &1).await?;
    /// assert_eq!(wm.clear().await?, 1);
    /// assert!(wm.keys().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn clear(&self) -> Result<usize> {
        let keys = self.keys().await?;
        for key in &keys {
            self.delete(key).await?;
        }
        Ok(keys.len())
    }
}
