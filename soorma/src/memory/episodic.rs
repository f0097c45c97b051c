//! Episodic memory: what an agent and a user said and did, searchable by recency and meaning.

use std::ops::Bound;
use std::sync::Arc;

use serde_json::{Map, Value};
use soorma_common::memory::EpisodeRecord;

use super::codec::{encode_vector, expiry, now_ms};
use super::view::{Indexed, TenantView};
use super::{Memory, MemoryError};
use crate::error::{Error, Result};
use crate::spi::state::{self as state_spi, StateKey};

/// The bucket of episodic memory.
pub(crate) const EPISODES_BUCKET: &str = "memory_episodes";

/// The longest interaction content, in bytes.
const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// The most references an interaction may carry.
const MAX_REFERENCES: usize = 64;
/// The longest role name, in bytes.
const MAX_ROLE_LEN: usize = 32;

impl Indexed for EpisodeRecord {
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
    fn vectors(&self) -> Vec<&str> {
        self.embedding.as_deref().into_iter().collect()
    }
    fn drop_vectors(&mut self) {
        self.embedding = None;
    }
}

/// An interaction to remember: who (role) said or did what, and what it refers to.
///
/// ```
/// use soorma::memory::Interaction;
/// let i = Interaction::assistant("Your refund was sent.").reference("order-1234").metadata("channel", "chat");
/// assert_eq!(i.role(), "assistant");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Interaction {
    role: String,
    content: String,
    references: Vec<String>,
    metadata: Map<String, Value>,
}

impl Interaction {
    /// An interaction by `role` (`user`, `assistant`, `tool`, `system`, or your own).
    ///
    /// ```
    /// let i = soorma::memory::Interaction::new("reviewer", "Looks good");
    /// ```
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            references: Vec::new(),
            metadata: Map::new(),
        }
    }

    /// What the user said.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Interaction::user("hi").role(), "user");
    /// ```
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// What the agent answered.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Interaction::assistant("hello").role(), "assistant");
    /// ```
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }

    /// What a tool returned.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Interaction::tool("42").role(), "tool");
    /// ```
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new("tool", content)
    }

    /// Adds a reference (a document id, a task id, a URL).
    ///
    /// ```
    /// let i = soorma::memory::Interaction::user("see the doc").reference("doc-7");
    /// ```
    pub fn reference(mut self, reference: impl Into<String>) -> Self {
        self.references.push(reference.into());
        self
    }

    /// Adds a metadata field.
    ///
    /// ```
    /// let i = soorma::memory::Interaction::user("hi").metadata("lang", "en");
    /// ```
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The role.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Interaction::tool("x").role(), "tool");
    /// ```
    pub fn role(&self) -> &str {
        &self.role
    }
}

/// An episode that matched a search, with its similarity.
///
/// ```
/// # fn show(h: &soorma::memory::EpisodeHit) -> String {
/// format!("{}: {} ({:.2})", h.episode.role, h.episode.content, h.score)
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EpisodeHit {
    /// The interaction.
    pub episode: EpisodeRecord,
    /// Cosine similarity to the search text.
    pub score: f32,
}

/// The episodic memory of one agent with one user, in one tenant.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{Interaction, Memory};
///
/// let memory = Memory::new(&soorma::Platform::embedded()).await?;
/// let episodes = memory.tenant("acme")?.for_user("ann").episodes("support")?;
/// episodes.append(Interaction::user("My parcel is late")).await?;
/// episodes.append(Interaction::assistant("It ships tomorrow")).await?;
/// let recent = episodes.recent(10).await?;
/// assert_eq!(recent[0].content, "It ships tomorrow"); // newest first
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Episodes {
    pub(crate) memory: Memory,
    pub(crate) tenant: String,
    pub(crate) agent: String,
    pub(crate) user: String,
}

impl std::fmt::Debug for Episodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Episodes")
            .field("tenant", &self.tenant)
            .field("agent", &self.agent)
            .field("user", &self.user)
            .finish()
    }
}

/// Microseconds since the epoch, increasing within this process: the order of episodes in
/// their keys (appended in the same microsecond, they still sort in append order).
fn next_order() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The record-key prefix of an agent's episodes with a user (length-prefixed, so that no pair's
/// prefix is another's).
pub(crate) fn episode_prefix(agent: &str, user: &str) -> String {
    format!("{}:{agent}:{}:{user}:", agent.len(), user.len())
}

impl Episodes {
    fn prefix(&self) -> String {
        episode_prefix(&self.agent, &self.user)
    }

    /// The records of this agent and user, oldest first.
    fn mine<'v>(
        view: &'v TenantView<EpisodeRecord>,
        prefix: &'v str,
    ) -> impl DoubleEndedIterator<Item = (&'v Arc<str>, &'v Arc<EpisodeRecord>)> + 'v {
        // Prefixes end with `:`; `;` is the next character.
        let end = format!("{};", &prefix[..prefix.len() - 1]);
        view.records
            .range::<str, _>((Bound::Included(prefix), Bound::Excluded(end.as_str())))
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// Remembers an interaction (embedded when the memory has an embedder); the stored record.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let episodes = memory.tenant("acme")?.for_user("ann").episodes("support")?;
    /// let e = episodes.append(soorma::memory::Interaction::user("hello").reference("ticket-9")).await?;
    /// assert_eq!(e.references, ["ticket-9"]);
    /// # Ok(()) }
    /// ```
    pub async fn append(&self, interaction: Interaction) -> Result<EpisodeRecord> {
        let inner = &self.memory.inner;
        let config = &inner.config;
        if interaction.content.len() > MAX_CONTENT_BYTES {
            return Err(MemoryError::TooLarge {
                what: "interaction content",
                len: interaction.content.len(),
                max: MAX_CONTENT_BYTES,
            }
            .into());
        }
        if interaction.role.is_empty()
            || interaction.role.len() > MAX_ROLE_LEN
            || interaction.role.chars().any(char::is_control)
        {
            return Err(Error::InvalidArgument(format!(
                "a role must be 1 to {MAX_ROLE_LEN} bytes without control characters"
            )));
        }
        if interaction.references.len() > MAX_REFERENCES
            || interaction.references.iter().any(|r| r.len() > 2048)
        {
            return Err(Error::InvalidArgument(format!(
                "an interaction may carry at most {MAX_REFERENCES} references of at most 2048 bytes"
            )));
        }
        let metadata_len = serde_json::to_vec(&interaction.metadata)
            .map_err(|e| Error::serialize("metadata", e))?
            .len();
        if metadata_len > 16 * 1024 {
            return Err(MemoryError::TooLarge {
                what: "interaction metadata",
                len: metadata_len,
                max: 16 * 1024,
            }
            .into());
        }
        let count = inner.episodes.count(&self.tenant);
        if count >= config.max_episodes_per_tenant {
            return Err(MemoryError::Quota {
                tenant: self.tenant.clone(),
                what: "episodes",
                count,
            }
            .into());
        }
        let (model, embedding) = match &inner.embedder {
            Some(embedder) if !interaction.content.trim().is_empty() => {
                let v =
                    super::embed_checked(&**embedder, std::slice::from_ref(&interaction.content))
                        .await?
                        .pop()
                        .unwrap_or_default();
                if super::codec::is_zero(&v) {
                    // Nothing the embedder can represent: found by recency only.
                    (None, None)
                } else {
                    (Some(embedder.model().to_owned()), Some(encode_vector(&v)))
                }
            }
            _ => (None, None),
        };
        let at = now_ms();
        let order = next_order();
        let id = crate::util::new_id();
        let record = EpisodeRecord {
            id: id.clone(),
            agent: self.agent.clone(),
            user_id: self.user.clone(),
            role: interaction.role,
            content: interaction.content,
            at,
            references: interaction.references,
            metadata: interaction.metadata,
            model,
            embedding,
            expires_at: expiry(at, config.episode_retention.max_age),
        };
        let key = StateKey::new(
            EPISODES_BUCKET,
            self.tenant.clone(),
            format!("{}{order:016x}:{id}", self.prefix()),
        );
        let revision = inner
            .store()
            .create(&key, state_spi::encode("episode", &record)?)
            .await?;
        inner
            .episodes
            .applied(revision, config.ready_timeout)
            .await?;
        if let Some(max) = config.episode_retention.max_items {
            self.trim(max).await?;
        }
        Ok(record)
    }

    /// Deletes the oldest episodes beyond `max`.
    async fn trim(&self, max: usize) -> Result<()> {
        let prefix = self.prefix();
        let surplus: Vec<String> = self.memory.inner.episodes.read(&self.tenant, |view| {
            let all: Vec<String> = Self::mine(view, &prefix)
                .map(|(k, _)| k.to_string())
                .collect();
            let extra = all.len().saturating_sub(max);
            all.into_iter().take(extra).collect()
        });
        for key in surplus {
            self.memory
                .inner
                .delete_record(EPISODES_BUCKET, &self.tenant, &key)
                .await?;
        }
        Ok(())
    }

    /// The `n` latest interactions, newest first (expired ones left out; without their vectors).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let episodes = memory.tenant("acme")?.for_user("ann").episodes("support")?;
    /// for text in ["one", "two", "three"] {
    ///     episodes.append(soorma::memory::Interaction::user(text)).await?;
    /// }
    /// let last_two: Vec<String> = episodes.recent(2).await?.into_iter().map(|e| e.content).collect();
    /// assert_eq!(last_two, ["three", "two"]);
    /// # Ok(()) }
    /// ```
    pub async fn recent(&self, n: usize) -> Result<Vec<EpisodeRecord>> {
        let inner = &self.memory.inner;
        inner.episodes.ready(inner.config.ready_timeout).await?;
        let prefix = self.prefix();
        let now = now_ms();
        Ok(inner.episodes.read(&self.tenant, |view| {
            Self::mine(view, &prefix)
                .rev()
                .map(|(_, e)| e)
                .filter(|e| e.expires_at.is_none_or(|at| at > now))
                .take(n)
                .map(|e| (**e).clone())
                .collect()
        }))
    }

    /// The `k` interactions closest in meaning to `text` (needs an embedder).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::memory::{Interaction, Memory, LexicalEmbedder};
    /// let memory = Memory::builder(&soorma::Platform::embedded()).embedder(LexicalEmbedder::new(256)).build().await?;
    /// let episodes = memory.tenant("acme")?.for_user("ann").episodes("support")?;
    /// episodes.append(Interaction::user("my invoice shows the wrong address")).await?;
    /// episodes.append(Interaction::user("the app crashes on start")).await?;
    /// let hits = episodes.search("invoice address", 1).await?;
    /// assert!(hits[0].episode.content.contains("invoice"));
    /// # Ok(()) }
    /// ```
    pub async fn search(&self, text: &str, k: usize) -> Result<Vec<EpisodeHit>> {
        let inner = &self.memory.inner;
        let config = &inner.config;
        if k == 0 || k > config.max_k {
            return Err(Error::InvalidArgument(format!(
                "k must be 1 to {}, not {k}",
                config.max_k
            )));
        }
        if text.trim().is_empty() || text.len() > MAX_CONTENT_BYTES {
            return Err(Error::InvalidArgument(format!(
                "a search text must be 1 to {MAX_CONTENT_BYTES} bytes"
            )));
        }
        let embedder = inner.embedder("episodic search")?;
        let vector = super::embed_checked(&*embedder, &[text.to_owned()])
            .await?
            .pop()
            .unwrap_or_default();
        if super::codec::is_zero(&vector) {
            return Ok(Vec::new());
        }
        inner.episodes.ready(config.ready_timeout).await?;
        let now = now_ms();
        let keep = |chunk: usize, e: &EpisodeRecord| {
            e.agent == self.agent
                && e.user_id == self.user
                && chunk == 0
                && e.expires_at.is_none_or(|at| at > now)
        };
        let found = inner.episodes.read(&self.tenant, |view| {
            view.search(&vector, k, config.index.exact_below, &keep)
        })?;
        Ok(found
            .into_iter()
            .map(|(_, e, score)| EpisodeHit {
                episode: (*e).clone(),
                score,
            })
            .collect())
    }

    /// Forgets every interaction of this agent with this user; how many.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let memory = soorma::memory::Memory::new(&soorma::Platform::embedded()).await?;
    /// let episodes = memory.tenant("acme")?.for_user("ann").episodes("support")?;
    /// episodes.append(soorma::memory::Interaction::user("hi")).await?;
    /// assert_eq!(episodes.clear().await?, 1);
    /// assert!(episodes.recent(5).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn clear(&self) -> Result<usize> {
        let inner = &self.memory.inner;
        inner.episodes.ready(inner.config.ready_timeout).await?;
        let prefix = self.prefix();
        let keys: Vec<String> = inner.episodes.read(&self.tenant, |view| {
            Self::mine(view, &prefix)
                .map(|(k, _)| k.to_string())
                .collect()
        });
        for key in &keys {
            inner
                .delete_record(EPISODES_BUCKET, &self.tenant, key)
                .await?;
        }
        Ok(keys.len())
    }
}
