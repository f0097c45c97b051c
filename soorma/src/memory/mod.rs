//! Memory for agents (feature `memory`): working memory (key/value scoped to a plan, a session
//! or a task), semantic memory (knowledge to retrieve by meaning) and episodic memory (what an
//! agent and a user said and did), all kept in the platform's state store.
//!
//! The store holds every record, vectors included; each [`Memory`] rebuilds its vector
//! indexes from the store when it starts and keeps them current by watching it, so every
//! instance on the same platform answers the same. Every handle is scoped to one tenant;
//! public knowledge is written by the operator and read by tenants that ask for it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
//! use soorma::memory::{Document, Interaction, LexicalEmbedder, Memory, Query, Scope};
//!
//! let platform = soorma::Platform::embedded();
//! // A real model in production: `embed::LocalEmbedder` (feature `embed-local`) or an
//! // embeddings service (`embed::OpenAiEmbedder`, feature `llm`).
//! let memory = Memory::builder(&platform).embedder(LexicalEmbedder::new(256)).build().await?;
//! let acme = memory.tenant("acme")?.for_user("ann");
//!
//! acme.working(Scope::plan("p-1"))?.set("step", &"collect").await?;
//! acme.knowledge().upsert(Document::new("Refunds are paid within 5 days.").id("refunds")).await?;
//! acme.episodes("support")?.append(Interaction::user("Where is my refund?")).await?;
//!
//! let hits = acme.knowledge().query(Query::new("refunds paid").k(1)).await?;
//! assert_eq!(hits[0].id, "refunds");
//! # Ok(()) }
//! ```

mod codec;
pub mod embed;
mod episodic;
mod error;
mod index;
mod semantic;
mod view;
mod working;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use soorma_common::memory::{EpisodeRecord, KnowledgeRecord, Visibility, WorkingRecord};

pub use embed::{Embedder, LexicalEmbedder, normalize};
pub use episodic::{EpisodeHit, Episodes, Interaction};
pub use error::MemoryError;
pub use index::IndexConfig;
/// The vector index, for the `memory` benchmark of `soorma-tests`. Not public API.
#[doc(hidden)]
pub use index::bench as __bench;
pub use semantic::{Document, Hit, Knowledge, Query, UpsertOutcome, Upserted};
pub use soorma_common::memory as records;
pub use working::{Scope, WorkingMemory};

use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::runtime::extract::{FromHandlerInput, HandlerInput};
use crate::spi::state::{self as state_spi, StateKey, StateStore};
use crate::spi::tenant::validate_tenant;
use codec::now_ms;
use episodic::EPISODES_BUCKET;
use semantic::{KNOWLEDGE_BUCKET, PUBLIC_BUCKET};
use view::{Model, View};
use working::WORKING_BUCKET;

/// The most working-memory records one retention pass reads.
const SWEEP_WORKING_READS: usize = 10_000;

/// The tenant of public knowledge, in its own bucket (no tenant can write there).
pub(crate) const PUBLIC_SPACE: &str = "public";

/// How long records are kept.
///
/// ```
/// use std::time::Duration;
/// use soorma::memory::Retention;
/// let r = Retention::new().max_age(Duration::from_secs(30 * 86_400)).max_items(10_000);
/// assert_eq!(r.max_items, Some(10_000));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Records expire this long after they are written.
    pub max_age: Option<Duration>,
    /// At most this many records (per tenant and namespace for knowledge, per agent and user
    /// for episodes); the oldest go first.
    pub max_items: Option<usize>,
}

impl Retention {
    /// Keep everything.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Retention::new().max_age, None);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Records expire `age` after they are written.
    ///
    /// ```
    /// let r = soorma::memory::Retention::new().max_age(std::time::Duration::from_secs(60));
    /// ```
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// At most `n` records; the oldest go first.
    ///
    /// ```
    /// let r = soorma::memory::Retention::new().max_items(100);
    /// ```
    pub fn max_items(mut self, n: usize) -> Self {
        self.max_items = Some(n);
        self
    }
}

/// Limits and policies of a [`Memory`].
///
/// ```
/// use std::time::Duration;
/// use soorma::memory::{MemoryConfig, Retention};
/// let config = MemoryConfig::default()
///     .with_retention("news", Retention::new().max_age(Duration::from_secs(7 * 86_400)))
///     .with_episode_retention(Retention::new().max_items(1_000))
///     .with_working_ttl(Duration::from_secs(86_400));
/// assert_eq!(config.chunk_chars, 1000);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// The longest chunk of a document, in characters (the model reads about 256 tokens).
    pub chunk_chars: usize,
    /// The largest document text (and query text), in bytes.
    pub max_document_bytes: usize,
    /// The most knowledge documents a tenant may hold.
    pub max_documents_per_tenant: usize,
    /// The most episodes a tenant may hold.
    pub max_episodes_per_tenant: usize,
    /// The largest working-memory value, serialized, in bytes.
    pub max_value_bytes: usize,
    /// The most hits a query may ask for.
    pub max_k: usize,
    /// Retention of knowledge per namespace (namespaces not listed keep everything).
    pub retention: HashMap<String, Retention>,
    /// Retention of episodes (per agent and user).
    pub episode_retention: Retention,
    /// The time to live of working-memory values set without one (`None`: no expiry).
    pub working_ttl: Option<Duration>,
    /// How often expired and surplus records are deleted (`None`: only by [`Memory::sweep`]).
    pub sweep_interval: Option<Duration>,
    /// How long reads and writes wait for this instance's index to show a write.
    pub ready_timeout: Duration,
    /// How long starting a memory may take to load its indexes from the store.
    pub load_timeout: Duration,
    /// The vector index's parameters.
    pub index: IndexConfig,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            chunk_chars: 1000,
            max_document_bytes: 256 * 1024,
            max_documents_per_tenant: 100_000,
            max_episodes_per_tenant: 1_000_000,
            max_value_bytes: 256 * 1024,
            max_k: 100,
            retention: HashMap::new(),
            episode_retention: Retention::default(),
            working_ttl: None,
            sweep_interval: Some(Duration::from_secs(60)),
            ready_timeout: Duration::from_secs(30),
            load_timeout: Duration::from_secs(600),
            index: IndexConfig::default(),
        }
    }
}

impl MemoryConfig {
    /// Sets the retention of a knowledge namespace.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default()
    ///     .with_retention("scratch", soorma::memory::Retention::new().max_items(10));
    /// ```
    pub fn with_retention(mut self, namespace: impl Into<String>, retention: Retention) -> Self {
        self.retention.insert(namespace.into(), retention);
        self
    }

    /// Sets the retention of episodes.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default()
    ///     .with_episode_retention(soorma::memory::Retention::new().max_items(500));
    /// ```
    pub fn with_episode_retention(mut self, retention: Retention) -> Self {
        self.episode_retention = retention;
        self
    }

    /// Sets the default time to live of working-memory values.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default().with_working_ttl(std::time::Duration::from_secs(3600));
    /// ```
    pub fn with_working_ttl(mut self, ttl: Duration) -> Self {
        self.working_ttl = Some(ttl);
        self
    }

    /// Sets how often retention runs (`None`: only when [`Memory::sweep`] is called).
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default().with_sweep_interval(None);
    /// ```
    pub fn with_sweep_interval(mut self, every: Option<Duration>) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Sets the longest chunk, in characters.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default().with_chunk_chars(500);
    /// ```
    pub fn with_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = chars;
        self
    }

    /// Sets the per-tenant quotas: knowledge documents and episodes.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default().with_quotas(1_000, 10_000);
    /// ```
    pub fn with_quotas(mut self, documents: usize, episodes: usize) -> Self {
        self.max_documents_per_tenant = documents;
        self.max_episodes_per_tenant = episodes;
        self
    }

    /// Sets the vector index's parameters.
    ///
    /// ```
    /// let c = soorma::memory::MemoryConfig::default().with_index(soorma::memory::IndexConfig::default());
    /// ```
    pub fn with_index(mut self, index: IndexConfig) -> Self {
        self.index = index;
        self
    }

    pub(crate) fn retention_of(&self, namespace: &str) -> Retention {
        self.retention.get(namespace).cloned().unwrap_or_default()
    }
}

pub(crate) struct Inner {
    platform: Platform,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) config: MemoryConfig,
    pub(crate) knowledge: Arc<View<KnowledgeRecord>>,
    pub(crate) public: Arc<View<KnowledgeRecord>>,
    pub(crate) episodes: Arc<View<EpisodeRecord>>,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            task.abort();
        }
    }
}

impl Inner {
    pub(crate) fn store(&self) -> &dyn StateStore {
        &**self.platform.state()
    }

    pub(crate) fn embedder(&self, what: &'static str) -> Result<Arc<dyn Embedder>> {
        self.embedder
            .clone()
            .ok_or_else(|| MemoryError::NoEmbedder { what }.into())
    }

    /// Deletes a record of a watched bucket, and forgets it in this process's view now.
    pub(crate) async fn delete_record(
        &self,
        bucket: &'static str,
        tenant: &str,
        key: &str,
    ) -> Result<()> {
        self.store()
            .delete(&StateKey::new(bucket, tenant, key))
            .await?;
        self.forget(bucket, tenant, key);
        Ok(())
    }

    /// Forgets a deleted record in this process's view of its bucket now (the watch confirms
    /// it later).
    fn forget(&self, bucket: &'static str, tenant: &str, key: &str) {
        match bucket {
            KNOWLEDGE_BUCKET => self.knowledge.forget(tenant, key),
            PUBLIC_BUCKET => self.public.forget(tenant, key),
            EPISODES_BUCKET => self.episodes.forget(tenant, key),
            _ => {}
        }
    }
}

/// Embeds `texts` and checks the answer's shape.
pub(crate) async fn embed_checked(
    embedder: &dyn Embedder,
    texts: &[String],
) -> Result<Vec<Vec<f32>>> {
    let vectors = embedder.embed(texts).await?;
    let dims = embedder.dimensions();
    if vectors.len() != texts.len()
        || vectors
            .iter()
            .any(|v| v.len() != dims || v.iter().any(|x| !x.is_finite()))
    {
        return Err(MemoryError::Shape {
            model: embedder.model().to_owned(),
            expected: format!("{} vectors of {dims} finite numbers", texts.len()),
            got: format!(
                "{} vectors of {:?} numbers",
                vectors.len(),
                vectors
                    .iter()
                    .map(Vec::len)
                    .collect::<std::collections::BTreeSet<_>>()
            ),
        }
        .into());
    }
    Ok(vectors)
}

/// Memory for agents on one platform: create it once, attach it to agents with
/// [`AgentBuilder::with_state`](crate::AgentBuilder::with_state), and take a [`TenantMemory`]
/// in handlers. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{Memory, Scope, TenantMemory};
/// use soorma::prelude::*;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Note { text: String }
///
/// /// Keeps the last note of the session.
/// async fn note(req: Invocation<Note>, memory: TenantMemory) -> Result<usize, ToolError> {
///     let session = memory.session()?;
///     session.set("last", &req.data.text).await?;
///     Ok(req.data.text.len())
/// }
///
/// let platform = Platform::embedded();
/// let memory = Memory::new(&platform).await?;
/// let tool = Tool::new("notes").use_registered_handlers(false).with_state(memory.clone())
///     .handler(Handler::on_invoke("note.requested", note)).start(&platform).await?;
/// let _: usize = platform.client("docs").with_tenant("acme").with_session("s-9")
///     .invoke("note.requested", serde_json::json!({"text": "hi"}), "note.completed").await?;
/// let last: Option<String> = memory.tenant("acme")?.working(Scope::session("s-9"))?.get("last").await?;
/// assert_eq!(last.as_deref(), Some("hi"));
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Memory {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("platform", &self.inner.platform.kind())
            .field(
                "model",
                &self.inner.embedder.as_ref().map(|e| e.model().to_owned()),
            )
            .finish()
    }
}

/// Builds a [`Memory`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{LexicalEmbedder, Memory, MemoryConfig};
/// let memory = Memory::builder(&soorma::Platform::embedded())
///     .embedder(LexicalEmbedder::new(128))
///     .config(MemoryConfig::default().with_chunk_chars(400))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct MemoryBuilder {
    platform: Platform,
    embedder: Option<Arc<dyn Embedder>>,
    config: MemoryConfig,
}

impl std::fmt::Debug for MemoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBuilder").finish_non_exhaustive()
    }
}

impl MemoryBuilder {
    /// The embedder of semantic and episodic memory (without one, working memory and recent
    /// episodes work; storing knowledge and searching by meaning do not).
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let builder = soorma::memory::Memory::builder(&platform).embedder(soorma::memory::LexicalEmbedder::new(64));
    /// ```
    pub fn embedder(mut self, embedder: impl Embedder) -> Self {
        self.embedder = Some(Arc::new(embedder));
        self
    }

    /// An embedder already shared.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let shared: std::sync::Arc<dyn soorma::memory::Embedder> = std::sync::Arc::new(soorma::memory::LexicalEmbedder::new(64));
    /// let builder = soorma::memory::Memory::builder(&platform).shared_embedder(shared);
    /// ```
    pub fn shared_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Its limits and policies.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let builder = soorma::memory::Memory::builder(&platform).config(soorma::memory::MemoryConfig::default());
    /// ```
    pub fn config(mut self, config: MemoryConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts the memory: loads the indexes from the store and watches it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let memory = soorma::memory::Memory::builder(&soorma::Platform::embedded()).build().await?;
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Memory> {
        let config = self.config;
        if config.chunk_chars < 16 || config.max_k == 0 {
            return Err(Error::Config(
                "memory: chunk_chars must be at least 16 and max_k at least 1".into(),
            ));
        }
        let model = self.embedder.as_ref().map(|e| Model {
            name: e.model().to_owned(),
            dimensions: e.dimensions(),
        });
        if let Some(model) = &model {
            // The index's parameters and the embedder's size, checked now rather than at the
            // first vector.
            index::VectorIndex::new(model.dimensions, &config.index).map_err(|e| {
                Error::Config(format!(
                    "memory: no vector index for `{}` ({} dimensions): {e}",
                    model.name, model.dimensions
                ))
            })?;
        }
        let knowledge = Arc::new(View::new(
            KNOWLEDGE_BUCKET,
            model.clone(),
            config.index.clone(),
        ));
        let public = Arc::new(View::new(
            PUBLIC_BUCKET,
            model.clone(),
            config.index.clone(),
        ));
        let episodes = Arc::new(View::new(EPISODES_BUCKET, model, config.index.clone()));
        let store = self.platform.state().clone();
        let tasks = vec![
            tokio::spawn(view::follow(Arc::downgrade(&knowledge), store.clone())),
            tokio::spawn(view::follow(Arc::downgrade(&public), store.clone())),
            tokio::spawn(view::follow(Arc::downgrade(&episodes), store)),
        ];
        let inner = Inner {
            platform: self.platform,
            embedder: self.embedder,
            config,
            knowledge,
            public,
            episodes,
            tasks: std::sync::Mutex::new(tasks),
        };
        let within = inner.config.load_timeout;
        inner.knowledge.ready(within).await?;
        inner.public.ready(within).await?;
        inner.episodes.ready(within).await?;
        let memory = Memory {
            inner: Arc::new(inner),
        };
        if let Some(every) = memory.inner.config.sweep_interval {
            // The sweeper holds no strong reference: it stops when the memory is dropped.
            let sweeper = tokio::spawn(sweep_every(Arc::downgrade(&memory.inner), every));
            memory
                .inner
                .tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sweeper);
        }
        Ok(memory)
    }
}

/// Runs retention every `every` until the memory is dropped.
async fn sweep_every(memory: std::sync::Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = memory.upgrade() else {
            return;
        };
        let memory = Memory { inner };
        if let Err(e) = memory.sweep().await {
            tracing::warn!(error = %e, "memory retention failed; trying again later");
        }
    }
}

/// What [`Memory::sweep`] deleted.
///
/// ```
/// let s = soorma::memory::Swept::default();
/// assert_eq!(s.knowledge + s.episodes + s.working, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Swept {
    /// Knowledge documents (expired, or beyond their namespace's `max_items`).
    pub knowledge: usize,
    /// Episodes (expired).
    pub episodes: usize,
    /// Working-memory values (expired).
    pub working: usize,
}

/// What [`Memory::forget_user`] deleted.
///
/// ```
/// let f = soorma::memory::Forgotten::default();
/// assert_eq!(f.knowledge + f.episodes + f.working, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Forgotten {
    /// The user's own knowledge documents.
    pub knowledge: usize,
    /// Episodes with the user, of every agent.
    pub episodes: usize,
    /// Working-memory values written for the user.
    pub working: usize,
}

impl Memory {
    /// A memory builder on `platform`.
    ///
    /// ```
    /// let builder = soorma::memory::Memory::builder(&soorma::Platform::embedded());
    /// ```
    pub fn builder(platform: &Platform) -> MemoryBuilder {
        MemoryBuilder {
            platform: platform.clone(),
            embedder: None,
            config: MemoryConfig::default(),
        }
    }

    /// A memory without an embedder (working memory and recent episodes).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn new(platform: &Platform) -> Result<Memory> {
        Self::builder(platform).build().await
    }

    /// The memory of one tenant; [`Error::InvalidArgument`] for an invalid tenant id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert!(memory.tenant("acme").is_ok());
    /// assert!(memory.tenant("a.b").is_err());
    /// # Ok(()) }
    /// ```
    pub fn tenant(&self, tenant: &str) -> Result<TenantMemory> {
        validate_tenant(tenant)?;
        Ok(TenantMemory {
            memory: self.clone(),
            tenant: tenant.to_owned(),
            user: None,
            agent: None,
            plan: None,
            session: None,
        })
    }

    /// Public knowledge: documents every tenant may search (with
    /// [`Query::include_public`]). Only code holding the [`Memory`] writes here, never a
    /// tenant's handle.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::memory::{Document, LexicalEmbedder, Memory, Query};
    /// let memory = Memory::builder(&soorma::Platform::embedded()).embedder(LexicalEmbedder::new(128)).build().await?;
    /// memory.public_knowledge().upsert(Document::new("Public holidays: 1 January").id("holidays")).await?;
    /// let acme = memory.tenant("acme")?.knowledge();
    /// assert!(acme.query(Query::new("public holidays")).await?.is_empty());
    /// assert_eq!(acme.query(Query::new("public holidays").include_public(true)).await?[0].id, "holidays");
    /// # Ok(()) }
    /// ```
    pub fn public_knowledge(&self) -> Knowledge {
        Knowledge {
            memory: self.clone(),
            tenant: PUBLIC_SPACE.to_owned(),
            user: None,
            public: true,
        }
    }

    /// Deletes everything a user left in a tenant's memory: their own knowledge documents,
    /// every agent's episodes with them, and the working-memory values written for them.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::memory::{Interaction, Memory, Scope};
    /// let memory = Memory::new(&soorma::Platform::embedded()).await?;
    /// let ann = memory.tenant("acme")?.for_user("ann");
    /// ann.episodes("support")?.append(Interaction::user("hi")).await?;
    /// ann.working(Scope::session("s1"))?.set("cart", &3).await?;
    /// let gone = memory.forget_user("acme", "ann").await?;
    /// assert_eq!((gone.episodes, gone.working), (1, 1));
    /// assert!(ann.episodes("support")?.recent(10).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn forget_user(&self, tenant: &str, user: &str) -> Result<Forgotten> {
        validate_tenant(tenant)?;
        let inner = &self.inner;
        inner.knowledge.ready(inner.config.ready_timeout).await?;
        inner.episodes.ready(inner.config.ready_timeout).await?;
        let mut forgotten = Forgotten::default();
        let docs: Vec<String> = inner.knowledge.read(tenant, |v| {
            v.records
                .iter()
                .filter(|(_, d)| {
                    d.visibility == Visibility::User && d.user_id.as_deref() == Some(user)
                })
                .map(|(k, _)| k.to_string())
                .collect()
        });
        for key in docs {
            inner.delete_record(KNOWLEDGE_BUCKET, tenant, &key).await?;
            forgotten.knowledge += 1;
        }
        let episodes: Vec<String> = inner.episodes.read(tenant, |v| {
            v.records
                .iter()
                .filter(|(_, e)| e.user_id == user)
                .map(|(k, _)| k.to_string())
                .collect()
        });
        for key in episodes {
            inner.delete_record(EPISODES_BUCKET, tenant, &key).await?;
            forgotten.episodes += 1;
        }
        let store = inner.store();
        for key in store.keys(WORKING_BUCKET, tenant).await? {
            let k = StateKey::new(WORKING_BUCKET, tenant, key);
            let record = match state_spi::load::<WorkingRecord>(store, "working memory", &k).await {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                Err(Error::CorruptState { .. }) => {
                    tracing::warn!(key = %k, "skipping a working-memory record that cannot be decoded");
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Only the version read: a value another user wrote meanwhile stays.
            if record.value.user_id.as_deref() == Some(user) {
                match store.delete_if(&k, record.revision).await {
                    Ok(()) => forgotten.working += 1,
                    Err(Error::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(forgotten)
    }

    /// Applies retention now: deletes expired knowledge, episodes and working-memory values,
    /// and the oldest knowledge beyond a namespace's `max_items`. Runs by itself every
    /// [`MemoryConfig::sweep_interval`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::memory::{Memory, Scope};
    /// let memory = Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(Scope::task("t"))?;
    /// wm.set_with_ttl("lock", &true, Duration::from_millis(1)).await?;
    /// tokio::time::sleep(Duration::from_millis(5)).await;
    /// assert_eq!(memory.sweep().await?.working, 1);
    /// assert!(wm.keys().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn sweep(&self) -> Result<Swept> {
        let inner = &self.inner;
        let now = now_ms();
        let mut swept = Swept::default();
        for (view, bucket) in [
            (&inner.knowledge, KNOWLEDGE_BUCKET),
            (&inner.public, PUBLIC_BUCKET),
        ] {
            let doomed =
                view.each(|tenant, v| {
                    let mut doomed: Vec<(String, String, u64)> = Vec::new();
                    let mut by_namespace: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
                    for (key, doc) in &v.records {
                        if doc.expires_at.is_some_and(|at| at <= now) {
                            doomed.push((tenant.to_owned(), key.to_string(), v.revision(key)));
                        } else {
                            by_namespace
                                .entry(&doc.namespace)
                                .or_default()
                                .push((doc.updated_at, key));
                        }
                    }
                    for (namespace, mut docs) in by_namespace {
                        if let Some(max) = inner.config.retention_of(namespace).max_items
                            && docs.len() > max
                        {
                            docs.sort();
                            let extra = docs.len() - max;
                            doomed.extend(docs.into_iter().take(extra).map(|(_, key)| {
                                (tenant.to_owned(), key.to_owned(), v.revision(key))
                            }));
                        }
                    }
                    doomed
                });
            swept.knowledge += self.delete_unchanged(bucket, doomed).await?;
        }
        let doomed = inner.episodes.each(|tenant, v| {
            v.records
                .iter()
                .filter(|(_, e)| e.expires_at.is_some_and(|at| at <= now))
                .map(|(key, _)| (tenant.to_owned(), key.to_string(), v.revision(key)))
                .collect()
        });
        swept.episodes += self.delete_unchanged(EPISODES_BUCKET, doomed).await?;
        let store = inner.store();
        let mut read = 0;
        let mut tenants = store.tenants(WORKING_BUCKET).await?;
        if !tenants.is_empty() {
            // Start at a random tenant, so that a pass cut short does not always skip the same.
            let start = (uuid::Uuid::new_v4().as_u128() % tenants.len() as u128) as usize;
            tenants.rotate_left(start);
        }
        'tenants: for tenant in tenants {
            let mut keys = store.keys(WORKING_BUCKET, &tenant).await?;
            if keys.len() > SWEEP_WORKING_READS {
                // Start at a random key too, so that a big tenant's later keys get their turn.
                let start = (uuid::Uuid::new_v4().as_u128() % keys.len() as u128) as usize;
                keys.rotate_left(start);
            }
            for key in keys {
                if read >= SWEEP_WORKING_READS {
                    // The rest waits for the next pass; the readers skip expired values anyway.
                    break 'tenants;
                }
                read += 1;
                let k = StateKey::new(WORKING_BUCKET, tenant.clone(), key);
                let Ok(Some(record)) =
                    state_spi::load::<WorkingRecord>(store, "working memory", &k).await
                else {
                    continue;
                };
                if record.value.expires_at.is_some_and(|at| at <= now)
                    && store.delete_if(&k, record.revision).await.is_ok()
                {
                    swept.working += 1;
                }
            }
        }
        Ok(swept)
    }

    /// Deletes records that still have the revision they were judged by.
    async fn delete_unchanged(
        &self,
        bucket: &'static str,
        doomed: Vec<(String, String, u64)>,
    ) -> Result<usize> {
        let inner = &self.inner;
        let mut deleted = 0;
        for (tenant, key, revision) in doomed {
            match inner
                .store()
                .delete_if(
                    &StateKey::new(bucket, tenant.clone(), key.clone()),
                    revision,
                )
                .await
            {
                Ok(()) => {
                    deleted += 1;
                    inner.forget(bucket, &tenant, &key);
                }
                Err(Error::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}

/// One tenant's memory (and one user's, with [`for_user`](Self::for_user)); also an extractor:
/// a handler taking it gets the memory attached to its agent, scoped to the handled event's
/// tenant, user, plan and session.
///
/// The tenant comes from the platform's delivery (on NATS, the subject's tenant). The user is
/// the event's `user_id`, which the caller states: a tenant's gateway authenticates its users.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
/// let ann = memory.tenant("acme")?.for_user("ann");
/// assert_eq!((ann.tenant(), ann.user()), ("acme", Some("ann")));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TenantMemory {
    memory: Memory,
    tenant: String,
    user: Option<String>,
    agent: Option<String>,
    plan: Option<String>,
    session: Option<String>,
}

impl std::fmt::Debug for TenantMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantMemory")
            .field("tenant", &self.tenant)
            .field("user", &self.user)
            .field("agent", &self.agent)
            .finish()
    }
}

impl TenantMemory {
    /// The tenant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert_eq!(memory.tenant("acme")?.tenant(), "acme");
    /// # Ok(()) }
    /// ```
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The user it acts for, if any.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert_eq!(memory.tenant("acme")?.user(), None);
    /// # Ok(()) }
    /// ```
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The same tenant's memory, acting for `user`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let bob = memory.tenant("acme")?.for_user("bob");
    /// assert_eq!(bob.user(), Some("bob"));
    /// # Ok(()) }
    /// ```
    pub fn for_user(&self, user: impl Into<String>) -> Self {
        Self {
            user: Some(user.into()),
            ..self.clone()
        }
    }

    /// Working memory of a scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let wm = memory.tenant("acme")?.working(soorma::memory::Scope::task("t-1"))?;
    /// # Ok(()) }
    /// ```
    pub fn working(&self, scope: Scope) -> Result<WorkingMemory> {
        WorkingMemory::new(
            self.memory.clone(),
            self.tenant.clone(),
            scope,
            self.user.clone(),
        )
    }

    /// Working memory of the handled event's plan; [`Error::InvalidArgument`] when it has none.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert!(memory.tenant("acme")?.plan().is_err()); // not in a handler: no plan
    /// # Ok(()) }
    /// ```
    pub fn plan(&self) -> Result<WorkingMemory> {
        let plan = self.plan.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "the handled event belongs to no plan (it has no plan_id)".into(),
            )
        })?;
        self.working(Scope::Plan(plan))
    }

    /// Working memory of the handled event's session; [`Error::InvalidArgument`] when it has
    /// none.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert!(memory.tenant("acme")?.session().is_err());
    /// # Ok(()) }
    /// ```
    pub fn session(&self) -> Result<WorkingMemory> {
        let session = self.session.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "the handled event belongs to no session (it has no session_id)".into(),
            )
        })?;
        self.working(Scope::Session(session))
    }

    /// Semantic memory: the tenant's knowledge (and the user's own documents).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let knowledge = memory.tenant("acme")?.knowledge();
    /// # Ok(()) }
    /// ```
    pub fn knowledge(&self) -> Knowledge {
        Knowledge {
            memory: self.memory.clone(),
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            public: false,
        }
    }

    /// Episodic memory of `agent` with the user this handle acts for;
    /// [`Error::InvalidArgument`] without a user.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert!(memory.tenant("acme")?.episodes("support").is_err()); // no user
    /// assert!(memory.tenant("acme")?.for_user("ann").episodes("support").is_ok());
    /// # Ok(()) }
    /// ```
    pub fn episodes(&self, agent: &str) -> Result<Episodes> {
        semantic::check_name("agent name", agent)?;
        let user = self.user.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "episodic memory is kept per user: the event has no user_id (or use `for_user`)"
                    .into(),
            )
        })?;
        codec::check_text("user id", &user, 256)?;
        Ok(Episodes {
            memory: self.memory.clone(),
            tenant: self.tenant.clone(),
            agent: agent.to_owned(),
            user,
        })
    }

    /// Episodic memory of the handling agent with the event's user.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// assert!(memory.tenant("acme")?.for_user("ann").my_episodes().is_err()); // not in a handler
    /// # Ok(()) }
    /// ```
    pub fn my_episodes(&self) -> Result<Episodes> {
        let agent = self.agent.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "no agent is handling an event here: use `episodes(agent)`".into(),
            )
        })?;
        self.episodes(&agent)
    }
}

impl FromHandlerInput for TenantMemory {
    fn from_input(input: &HandlerInput) -> std::result::Result<Self, String> {
        let memory = input
            .runtime
            .extensions
            .get::<Memory>()
            .cloned()
            .ok_or_else(|| {
                MemoryError::NotAttached {
                    agent: input.agent().to_owned(),
                }
                .to_string()
            })?;
        let envelope = input.envelope();
        let tenant = envelope.tenant().to_owned();
        validate_tenant(&tenant).map_err(|e| e.to_string())?;
        Ok(TenantMemory {
            memory,
            tenant,
            user: envelope.user_id.clone(),
            agent: Some(input.agent().to_owned()),
            plan: envelope.plan_id.clone(),
            session: envelope.session_id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn memory(config: MemoryConfig) -> Memory {
        Memory::builder(&Platform::embedded())
            .embedder(LexicalEmbedder::new(64))
            .config(config.with_sweep_interval(None))
            .build()
            .await
            .unwrap()
    }

    fn memory_error(e: Error) -> MemoryError {
        match e {
            Error::Other { source, .. } => {
                *source.downcast::<MemoryError>().expect("a MemoryError")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn every_limit_is_enforced_with_a_typed_error() {
        let config = MemoryConfig {
            max_document_bytes: 1_000,
            max_value_bytes: 100,
            max_k: 10,
            ..MemoryConfig::default()
        }
        .with_quotas(2, 2);
        let memory = memory(config).await;
        let acme = memory.tenant("acme").unwrap().for_user("ann");
        let k = acme.knowledge();
        // Document size.
        let big = k.upsert(Document::new("x ".repeat(600))).await.unwrap_err();
        assert!(matches!(
            memory_error(big),
            MemoryError::TooLarge { max: 1_000, .. }
        ));
        // Tags: count and length.
        let mut many = Document::new("tagged");
        for i in 0..=semantic::MAX_TAGS {
            many = many.tag(format!("t{i}"));
        }
        assert!(matches!(
            k.upsert(many).await,
            Err(Error::InvalidArgument(_))
        ));
        let long_tag = Document::new("tagged").tag("t".repeat(129));
        assert!(matches!(
            k.upsert(long_tag).await,
            Err(Error::InvalidArgument(_))
        ));
        // Documents per tenant: the third new one is refused, replacing one is not.
        k.upsert(Document::new("one").id("a")).await.unwrap();
        k.upsert(Document::new("two").id("b")).await.unwrap();
        let third = k.upsert(Document::new("three").id("c")).await.unwrap_err();
        assert!(matches!(
            memory_error(third),
            MemoryError::Quota { count: 2, .. }
        ));
        k.upsert(Document::new("two, corrected").id("b"))
            .await
            .unwrap();
        // Hits per query.
        for bad in [0, 11] {
            assert!(matches!(
                k.query(Query::new("one").k(bad)).await,
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(k.query(Query::new("one").k(10)).await.is_ok());
        // Working-memory value size.
        let wm = acme.working(Scope::plan("p")).unwrap();
        let value = wm.set("v", &"y".repeat(200)).await.unwrap_err();
        assert!(matches!(
            memory_error(value),
            MemoryError::TooLarge { max: 100, .. }
        ));
        // Episodes per tenant.
        let episodes = acme.episodes("bot").unwrap();
        episodes.append(Interaction::user("1")).await.unwrap();
        episodes.append(Interaction::user("2")).await.unwrap();
        let third = episodes.append(Interaction::user("3")).await.unwrap_err();
        assert!(matches!(
            memory_error(third),
            MemoryError::Quota { count: 2, .. }
        ));
    }
}
