//! Semantic memory: knowledge documents, chunked and embedded, retrieved by meaning.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use soorma_common::memory::{KnowledgeRecord, StoredChunk, Visibility};

use super::codec::{encode_vector, expiry, now_ms};
use super::view::{Indexed, View};
use super::{Memory, MemoryError, PUBLIC_SPACE};
use crate::error::{Error, Result};
use crate::spi::state::{self as state_spi, StateKey};
use crate::util::digest;

/// The bucket of tenants' knowledge documents.
pub(crate) const KNOWLEDGE_BUCKET: &str = "memory_knowledge";
/// The bucket of public knowledge (written by the operator only).
pub(crate) const PUBLIC_BUCKET: &str = "memory_public";

/// The longest document id, in bytes.
const MAX_ID_LEN: usize = 256;
/// The most tags a document or query may carry.
pub(crate) const MAX_TAGS: usize = 64;
/// The largest metadata of a document, serialized.
const MAX_METADATA_BYTES: usize = 16 * 1024;

impl Indexed for KnowledgeRecord {
    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }
    fn vectors(&self) -> Vec<&str> {
        self.chunks.iter().map(|c| c.embedding.as_str()).collect()
    }
    fn drop_vectors(&mut self) {
        for chunk in &mut self.chunks {
            chunk.embedding = String::new();
        }
    }
}

/// A document to store in semantic memory.
///
/// Its id is the one you give (an upsert with the same id replaces the document), or else a
/// digest of its text (storing the same text twice keeps one document).
///
/// ```
/// use soorma::memory::Document;
/// use soorma_common::memory::Visibility;
///
/// let doc = Document::new("Refunds are paid within 5 business days.")
///     .id("policy-refunds")
///     .namespace("policies")
///     .tag("billing")
///     .metadata("source", "handbook.pdf")
///     .visibility(Visibility::Tenant);
/// assert_eq!(doc.text(), "Refunds are paid within 5 business days.");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Document {
    id: Option<String>,
    text: String,
    namespace: String,
    metadata: Map<String, Value>,
    tags: Vec<String>,
    visibility: Visibility,
    ttl: Option<Duration>,
}

impl Document {
    /// A document of `text`, in namespace `default`, visible to its tenant.
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("The office opens at 9.");
    /// assert_eq!(doc.text(), "The office opens at 9.");
    /// ```
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            id: None,
            text: text.into(),
            namespace: "default".into(),
            metadata: Map::new(),
            tags: Vec::new(),
            visibility: Visibility::Tenant,
            ttl: None,
        }
    }

    /// Its id: an upsert with the same id replaces the document.
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("v2 of the FAQ").id("faq");
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Its namespace (a collection with its own retention; `default` unless set).
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("...").namespace("manuals");
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Adds a metadata field (queries filter on metadata by equality).
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("...").metadata("lang", "en").metadata("page", 3);
    /// ```
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds a tag (a query's tags must all be present on a document it returns).
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("...").tag("billing").tag("eu");
    /// ```
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Who may retrieve it: [`Visibility::Tenant`] (the default) or [`Visibility::User`] (the
    /// user the memory handle acts for). [`Visibility::Public`] documents are published with
    /// [`Memory::public_knowledge`].
    ///
    /// ```
    /// use soorma_common::memory::Visibility;
    /// let doc = soorma::memory::Document::new("my notes").visibility(Visibility::User);
    /// ```
    pub fn visibility(mut self, visibility: Visibility) -> Self {
        self.visibility = visibility;
        self
    }

    /// Expires the document after `ttl` (overrides its namespace's retention).
    ///
    /// ```
    /// let doc = soorma::memory::Document::new("today's menu").ttl(std::time::Duration::from_secs(86_400));
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Its text.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Document::new("x").text(), "x");
    /// ```
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// What an upsert did.
///
/// ```
/// use soorma::memory::UpsertOutcome;
/// assert_ne!(UpsertOutcome::Created, UpsertOutcome::Unchanged);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpsertOutcome {
    /// No document had this id.
    Created,
    /// The document with this id was replaced.
    Replaced,
    /// The document with this id already had this content: nothing was written.
    Unchanged,
}

/// The result of an upsert.
///
/// ```
/// # use soorma::memory::{Upserted, UpsertOutcome};
/// fn report(u: &Upserted) -> String { format!("{} ({:?}, {} chunks)", u.id, u.outcome, u.chunks) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Upserted {
    /// The document's id.
    pub id: String,
    /// How many chunks it was split into.
    pub chunks: usize,
    /// What happened.
    pub outcome: UpsertOutcome,
}

/// A search of semantic memory.
///
/// ```
/// use soorma::memory::Query;
/// let q = Query::new("how long do refunds take?").k(3).namespace("policies").tag("billing")
///     .where_eq("lang", "en").min_score(0.3).include_public(true);
/// assert_eq!(q.text(), "how long do refunds take?");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Query {
    text: String,
    k: usize,
    namespace: Option<String>,
    tags: Vec<String>,
    equals: Vec<(String, Value)>,
    min_score: Option<f32>,
    include_public: bool,
    distinct_documents: bool,
}

impl Query {
    /// The 5 chunks closest in meaning to `text`.
    ///
    /// ```
    /// let q = soorma::memory::Query::new("opening hours");
    /// ```
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            k: 5,
            namespace: None,
            tags: Vec::new(),
            equals: Vec::new(),
            min_score: None,
            include_public: false,
            distinct_documents: false,
        }
    }

    /// How many hits at most (1 to [`MemoryConfig::max_k`](super::MemoryConfig)).
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").k(10);
    /// ```
    pub fn k(mut self, k: usize) -> Self {
        self.k = k;
        self
    }

    /// Only documents of this namespace.
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").namespace("manuals");
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only documents with this tag (all of a query's tags).
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").tag("eu");
    /// ```
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Only documents whose metadata field `key` equals `value`.
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").where_eq("lang", "de");
    /// ```
    pub fn where_eq(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.equals.push((key.into(), value.into()));
        self
    }

    /// Only hits at least this similar (cosine, -1 to 1).
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").min_score(0.4);
    /// ```
    pub fn min_score(mut self, score: f32) -> Self {
        self.min_score = Some(score);
        self
    }

    /// Also search public knowledge.
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").include_public(true);
    /// ```
    pub fn include_public(mut self, yes: bool) -> Self {
        self.include_public = yes;
        self
    }

    /// At most one hit per document (its best chunk).
    ///
    /// ```
    /// let q = soorma::memory::Query::new("x").distinct_documents(true);
    /// ```
    pub fn distinct_documents(mut self, yes: bool) -> Self {
        self.distinct_documents = yes;
        self
    }

    /// The text searched for.
    ///
    /// ```
    /// assert_eq!(soorma::memory::Query::new("x").text(), "x");
    /// ```
    pub fn text(&self) -> &str {
        &self.text
    }

    fn accepts(&self, doc: &KnowledgeRecord, now: u64) -> bool {
        doc.expires_at.is_none_or(|at| at > now)
            && self.namespace.as_ref().is_none_or(|n| *n == doc.namespace)
            && self.tags.iter().all(|t| doc.tags.contains(t))
            && self
                .equals
                .iter()
                .all(|(k, v)| doc.metadata.get(k) == Some(v))
    }
}

/// A chunk of a document that matched a query.
///
/// ```
/// # fn cite(hit: &soorma::memory::Hit) -> String {
/// format!("[{}#{}] {} ({:.2})", hit.id, hit.chunk, hit.text, hit.score)
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Hit {
    /// The document's id.
    pub id: String,
    /// Which chunk of it (0 for the first).
    pub chunk: usize,
    /// The chunk's text.
    pub text: String,
    /// Cosine similarity to the query (higher is closer).
    pub score: f32,
    /// The document's namespace.
    pub namespace: String,
    /// The document's metadata.
    pub metadata: Map<String, Value>,
    /// The document's tags.
    pub tags: Vec<String>,
    /// Who may retrieve the document.
    pub visibility: Visibility,
}

/// Semantic memory of one tenant (and user, when the handle acts for one), or the public
/// knowledge every tenant may search.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{Document, Memory, Query};
/// # use soorma::memory::Embedder;
/// # struct Letters;
/// # impl Embedder for Letters {
/// #     fn model(&self) -> &str { "letters" }
/// #     fn dimensions(&self) -> usize { 26 }
/// #     fn embed<'a>(&'a self, texts: &'a [String]) -> soorma::BoxFuture<'a, soorma::Result<Vec<Vec<f32>>>> {
/// #         Box::pin(async move { Ok(texts.iter().map(|t| { let mut v = vec![0.01_f32; 26];
/// #             for b in t.bytes().filter(u8::is_ascii_alphabetic) { v[(b.to_ascii_lowercase() - b'a') as usize] += 1.0; }
/// #             soorma::memory::normalize(&mut v); v }).collect()) })
/// #     }
/// # }
/// let platform = soorma::Platform::embedded();
/// let memory = Memory::builder(&platform).embedder(Letters).build().await?;
/// let knowledge = memory.tenant("acme")?.knowledge();
/// knowledge.upsert(Document::new("zebras and zoos").id("z")).await?;
/// knowledge.upsert(Document::new("apples and bananas").id("a")).await?;
/// let hits = knowledge.query(Query::new("a zoo with a zebra").k(1)).await?;
/// assert_eq!(hits[0].id, "z");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Knowledge {
    pub(crate) memory: Memory,
    pub(crate) tenant: String,
    pub(crate) user: Option<String>,
    pub(crate) public: bool,
}

impl std::fmt::Debug for Knowledge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Knowledge")
            .field("tenant", &self.tenant)
            .field("user", &self.user)
            .field("public", &self.public)
            .finish()
    }
}

impl Knowledge {
    fn view(&self) -> &Arc<View<KnowledgeRecord>> {
        if self.public {
            &self.memory.inner.public
        } else {
            &self.memory.inner.knowledge
        }
    }

    fn bucket(&self) -> &'static str {
        if self.public {
            PUBLIC_BUCKET
        } else {
            KNOWLEDGE_BUCKET
        }
    }

    /// Where a document of `id` lives: documents of the tenant (and public ones) under `t:`,
    /// a user's own under `u:<user>:`, so that one user's id never meets another's.
    fn key(&self, id: &str, visibility: Visibility) -> StateKey {
        let key = match (visibility, &self.user) {
            (Visibility::User, Some(user)) => format!("u:{}:{user}:{id}", user.len()),
            _ => format!("t:{id}"),
        };
        StateKey::new(self.bucket(), self.tenant.clone(), key)
    }

    /// The keys `id` may name for this handle: the user's own document first, then the
    /// tenant's.
    fn keys_of(&self, id: &str) -> Vec<StateKey> {
        let mut keys = Vec::with_capacity(2);
        if self.user.is_some() && !self.public {
            keys.push(self.key(id, Visibility::User));
        }
        keys.push(self.key(id, Visibility::Tenant));
        keys
    }

    /// Whether this handle may read, replace or delete `doc`.
    fn may_touch(&self, doc: &KnowledgeRecord) -> bool {
        match doc.visibility {
            Visibility::User => doc.user_id.is_some() && doc.user_id == self.user,
            _ => true,
        }
    }

    /// Stores a document, replacing the one with the same id: chunks it, embeds the chunks and
    /// writes one record. Storing the same content again writes nothing.
    ///
    /// Errors: no embedder, an empty or too large text, an id of another user's document,
    /// [`Visibility::Public`] from a tenant, the tenant's document quota.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::memory::{Document, Memory, UpsertOutcome};
    /// # let memory = Memory::builder(&soorma::Platform::embedded()).embedder(soorma::memory::LexicalEmbedder::new(256)).build().await?;
    /// let knowledge = memory.tenant("acme")?.knowledge();
    /// let first = knowledge.upsert(Document::new("Refunds take 5 days.").id("refunds")).await?;
    /// let again = knowledge.upsert(Document::new("Refunds take 5 days.").id("refunds")).await?;
    /// let fixed = knowledge.upsert(Document::new("Refunds take 3 days.").id("refunds")).await?;
    /// assert_eq!((first.outcome, again.outcome, fixed.outcome),
    ///     (UpsertOutcome::Created, UpsertOutcome::Unchanged, UpsertOutcome::Replaced));
    /// # Ok(()) }
    /// ```
    pub async fn upsert(&self, doc: Document) -> Result<Upserted> {
        let inner = &self.memory.inner;
        let config = &inner.config;
        let visibility = if self.public {
            Visibility::Public
        } else {
            match doc.visibility {
                Visibility::Public => {
                    return Err(Error::InvalidArgument(
                        "a tenant cannot publish public knowledge: the operator does, with `Memory::public_knowledge()`".into(),
                    ));
                }
                Visibility::User if self.user.is_none() => {
                    return Err(Error::InvalidArgument(
                        "a user-visible document needs a user: use a memory handle that acts for one (`TenantMemory::for_user`)".into(),
                    ));
                }
                v => v,
            }
        };
        if doc.text.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "a document's text must not be empty".into(),
            ));
        }
        if doc.text.len() > config.max_document_bytes {
            return Err(MemoryError::TooLarge {
                what: "document text",
                len: doc.text.len(),
                max: config.max_document_bytes,
            }
            .into());
        }
        check_name("namespace", &doc.namespace)?;
        if doc.tags.len() > MAX_TAGS {
            return Err(Error::InvalidArgument(format!(
                "a document has {} tags, at most {MAX_TAGS}",
                doc.tags.len()
            )));
        }
        for tag in &doc.tags {
            check_name("tag", tag)?;
        }
        let metadata_bytes =
            serde_json::to_vec(&doc.metadata).map_err(|e| Error::serialize("metadata", e))?;
        if metadata_bytes.len() > MAX_METADATA_BYTES {
            return Err(MemoryError::TooLarge {
                what: "document metadata",
                len: metadata_bytes.len(),
                max: MAX_METADATA_BYTES,
            }
            .into());
        }
        let embedder = inner.embedder("semantic memory")?;
        let owner = (visibility == Visibility::User)
            .then(|| self.user.clone())
            .flatten();
        let tags_bytes = doc.tags.join("\u{1f}");
        let hash = digest(&[
            doc.text.as_bytes(),
            &metadata_bytes,
            tags_bytes.as_bytes(),
            doc.namespace.as_bytes(),
            format!("{visibility:?}").as_bytes(),
            owner.as_deref().unwrap_or("").as_bytes(),
            embedder.model().as_bytes(),
        ]);
        let id = match doc.id {
            Some(id) => id,
            None => digest(&[doc.text.as_bytes()]),
        };
        let ttl = doc
            .ttl
            .or_else(|| config.retention_of(&doc.namespace).max_age);
        super::codec::check_text("document id", &id, MAX_ID_LEN)?;
        let key = self.key(&id, visibility);
        let stored =
            state_spi::load::<KnowledgeRecord>(inner.store(), "knowledge document", &key).await?;
        if let Some(existing) = &stored {
            if !self.may_touch(&existing.value) {
                return Err(Error::InvalidArgument(format!(
                    "document `{id}` belongs to another user"
                )));
            }
            // The same content, and nothing to expire: nothing to write. (With a time to
            // live, writing again renews it.)
            if existing.value.content_hash == hash
                && existing.value.expires_at.is_none()
                && ttl.is_none()
            {
                return Ok(Upserted {
                    id,
                    chunks: existing.value.chunks.len(),
                    outcome: UpsertOutcome::Unchanged,
                });
            }
        } else {
            let count = self.view().count(&self.tenant);
            if count >= config.max_documents_per_tenant {
                return Err(MemoryError::Quota {
                    tenant: self.tenant.clone(),
                    what: "knowledge documents",
                    count,
                }
                .into());
            }
        }
        let spans = chunk_spans(&doc.text, config.chunk_chars);
        let texts: Vec<String> = spans
            .iter()
            .map(|(s, e)| doc.text[*s..*e].to_owned())
            .collect();
        let vectors = super::embed_checked(&*embedder, &texts).await?;
        if let Some(i) = vectors.iter().position(|v| super::codec::is_zero(v)) {
            return Err(Error::InvalidArgument(format!(
                "chunk {i} of document `{id}` has nothing `{}` can embed (its vector is zero)",
                embedder.model()
            )));
        }
        let now = now_ms();
        let record = KnowledgeRecord {
            id: id.clone(),
            namespace: doc.namespace,
            text: doc.text,
            metadata: doc.metadata,
            tags: doc.tags,
            visibility,
            user_id: owner,
            content_hash: hash,
            model: embedder.model().to_owned(),
            chunks: spans
                .iter()
                .zip(&vectors)
                .map(|((start, end), v)| StoredChunk {
                    start: *start,
                    end: *end,
                    embedding: encode_vector(v),
                })
                .collect(),
            created_at: stored.as_ref().map_or(now, |s| s.value.created_at),
            updated_at: now,
            expires_at: expiry(now, ttl),
        };
        let bytes = state_spi::encode("knowledge document", &record)?;
        let store = inner.store();
        let written = match &stored {
            Some(s) => store.update(&key, bytes, s.revision).await,
            None => store.create(&key, bytes).await,
        };
        let revision = match written {
            Ok(r) => r,
            Err(Error::Conflict { .. }) => {
                return Err(Error::Conflict {
                    key: format!("knowledge document `{id}` (written concurrently; upsert again)"),
                });
            }
            Err(e) => return Err(e),
        };
        self.view().applied(revision, config.ready_timeout).await?;
        Ok(Upserted {
            id,
            chunks: spans.len(),
            outcome: if stored.is_some() {
                UpsertOutcome::Replaced
            } else {
                UpsertOutcome::Created
            },
        })
    }

    /// A stored document this handle may read, by id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::memory::{Document, Memory};
    /// # let memory = Memory::builder(&soorma::Platform::embedded()).embedder(soorma::memory::LexicalEmbedder::new(256)).build().await?;
    /// let knowledge = memory.tenant("acme")?.knowledge();
    /// knowledge.upsert(Document::new("Open 9 to 5.").id("hours")).await?;
    /// assert_eq!(knowledge.get("hours").await?.unwrap().text, "Open 9 to 5.");
    /// assert!(knowledge.get("nope").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, id: &str) -> Result<Option<KnowledgeRecord>> {
        for key in self.keys_of(id) {
            let found = state_spi::load::<KnowledgeRecord>(
                self.memory.inner.store(),
                "knowledge document",
                &key,
            )
            .await?
            .map(|v| v.value)
            .filter(|doc| self.may_touch(doc) && doc.expires_at.is_none_or(|at| at > now_ms()));
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Deletes a document this handle may touch (the user's own of this id first, else the
    /// tenant's); whether it existed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::memory::{Document, Memory};
    /// # let memory = Memory::builder(&soorma::Platform::embedded()).embedder(soorma::memory::LexicalEmbedder::new(256)).build().await?;
    /// let knowledge = memory.tenant("acme")?.knowledge();
    /// knowledge.upsert(Document::new("Old price list").id("prices")).await?;
    /// assert!(knowledge.delete("prices").await?);
    /// assert!(!knowledge.delete("prices").await?);
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, id: &str) -> Result<bool> {
        let inner = &self.memory.inner;
        for key in self.keys_of(id) {
            let Some(doc) =
                state_spi::load::<KnowledgeRecord>(inner.store(), "knowledge document", &key)
                    .await?
            else {
                continue;
            };
            if !self.may_touch(&doc.value) {
                continue;
            }
            // Only the version checked: a document written meanwhile is not deleted unseen.
            inner.store().delete_if(&key, doc.revision).await?;
            self.view().forget(&self.tenant, &key.key);
            return Ok(true);
        }
        Ok(false)
    }

    /// The chunks closest in meaning to the query's text that this handle may read: the
    /// tenant's documents, the user's own, and public knowledge when asked.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::memory::{Document, Memory, Query};
    /// # let memory = Memory::builder(&soorma::Platform::embedded()).embedder(soorma::memory::LexicalEmbedder::new(256)).build().await?;
    /// let knowledge = memory.tenant("acme")?.knowledge();
    /// knowledge.upsert(Document::new("zzz zebra").id("z").tag("animals")).await?;
    /// knowledge.upsert(Document::new("zzz zebra crossing").id("road").tag("traffic")).await?;
    /// let hits = knowledge.query(Query::new("zebra").tag("traffic")).await?;
    /// assert_eq!(hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(), ["road"]);
    /// # Ok(()) }
    /// ```
    pub async fn query(&self, query: Query) -> Result<Vec<Hit>> {
        let inner = &self.memory.inner;
        let config = &inner.config;
        if query.k == 0 || query.k > config.max_k {
            return Err(Error::InvalidArgument(format!(
                "k must be 1 to {}, not {}",
                config.max_k, query.k
            )));
        }
        if query.text.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "a query's text must not be empty".into(),
            ));
        }
        if query.text.len() > config.max_document_bytes {
            return Err(MemoryError::TooLarge {
                what: "query text",
                len: query.text.len(),
                max: config.max_document_bytes,
            }
            .into());
        }
        if query.equals.len() > MAX_TAGS {
            return Err(Error::InvalidArgument(format!(
                "a query has more than {MAX_TAGS} metadata conditions"
            )));
        }
        if query.tags.len() > MAX_TAGS {
            return Err(Error::InvalidArgument(format!(
                "a query has more than {MAX_TAGS} tags"
            )));
        }
        let embedder = inner.embedder("semantic search")?;
        let vector = super::embed_checked(&*embedder, std::slice::from_ref(&query.text))
            .await?
            .pop()
            .unwrap_or_default();
        if super::codec::is_zero(&vector) {
            // Nothing to compare with.
            return Ok(Vec::new());
        }
        let now = now_ms();
        // Ask for more when hits are folded per document.
        let want = if query.distinct_documents {
            query.k.saturating_mul(4).min(config.max_k * 4)
        } else {
            query.k
        };
        let mut hits = Vec::new();
        // (view, tenant, the user whose own documents count)
        type Space<'a> = (&'a Arc<View<KnowledgeRecord>>, &'a str, Option<&'a str>);
        let mut spaces: Vec<Space<'_>> = Vec::new();
        if self.public {
            spaces.push((&inner.public, PUBLIC_SPACE, None));
        } else {
            spaces.push((&inner.knowledge, &self.tenant, self.user.as_deref()));
            if query.include_public {
                spaces.push((&inner.public, PUBLIC_SPACE, None));
            }
        }
        for (view, tenant, user) in spaces {
            view.ready(config.ready_timeout).await?;
            let keep = |_: usize, doc: &KnowledgeRecord| {
                query.accepts(doc, now)
                    && match doc.visibility {
                        Visibility::User => doc.user_id.is_some() && doc.user_id.as_deref() == user,
                        _ => true,
                    }
            };
            let found = view.read(tenant, |v| {
                v.search(&vector, want, config.index.exact_below, &keep)
            })?;
            hits.extend(found.into_iter().filter_map(|(chunk_no, doc, score)| {
                let chunk = doc.chunks.get(chunk_no)?;
                Some(Hit {
                    id: doc.id.clone(),
                    chunk: chunk_no,
                    text: doc.text.get(chunk.start..chunk.end)?.to_owned(),
                    score,
                    namespace: doc.namespace.clone(),
                    metadata: doc.metadata.clone(),
                    tags: doc.tags.clone(),
                    visibility: doc.visibility,
                })
            }));
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        if let Some(min) = query.min_score {
            hits.retain(|h| h.score >= min);
        }
        if query.distinct_documents {
            let mut seen = std::collections::HashSet::new();
            hits.retain(|h| seen.insert((h.visibility == Visibility::Public, h.id.clone())));
        }
        hits.truncate(query.k);
        Ok(hits)
    }
}

/// Checks a namespace (or agent) name: 1 to 128 bytes, no control characters.
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    super::codec::check_text(what, name, 128)
}

/// Splits `text` into spans of at most about `max_chars` characters, at paragraph, sentence or
/// word ends where it can; every character lies in exactly one span.
///
/// ```ignore
/// let spans = chunk_spans("One. Two. Three.", 10);
/// ```
pub(crate) fn chunk_spans(text: &str, max_chars: usize) -> Vec<(usize, usize)> {
    let max_chars = max_chars.max(16);
    let mut spans = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        // The byte offset just past `max_chars` characters of the rest.
        let limit = rest
            .char_indices()
            .nth(max_chars)
            .map_or(rest.len(), |(i, _)| i);
        if limit == rest.len() {
            spans.push((start, text.len()));
            break;
        }
        let window = &rest[..limit];
        // Prefer a paragraph break, then a sentence end, then a space, in the second half.
        let half = window.len() / 2;
        let cut = [
            window.rfind("\n\n").map(|i| i + 2),
            window
                .rmatch_indices(['.', '!', '?', '\n'])
                .map(|(i, m)| i + m.len())
                .find(|&i| window[i..].starts_with(char::is_whitespace) || i == window.len()),
            window
                .char_indices()
                .rev()
                .find(|(_, c)| c.is_whitespace())
                .map(|(i, c)| i + c.len_utf8()),
        ]
        .into_iter()
        .flatten()
        .find(|&i| i > half)
        .unwrap_or(limit);
        spans.push((start, start + cut));
        start += cut;
    }
    // Trim surrounding whitespace from each span; drop empty ones.
    spans
        .into_iter()
        .filter_map(|(s, e)| {
            let piece = &text[s..e];
            let lead = piece.len() - piece.trim_start().len();
            let trail = piece.len() - piece.trim_end().len();
            (s + lead < e - trail).then_some((s + lead, e - trail))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_at_natural_breaks() {
        let text = "First sentence here. Second one follows! Third?\n\nA new paragraph starts. "
            .repeat(20);
        let spans = chunk_spans(&text, 100);
        assert!(spans.len() > 10);
        for (s, e) in &spans {
            let piece = &text[*s..*e];
            assert!(piece.chars().count() <= 100, "{piece:?}");
            assert!(!piece.starts_with(' ') && !piece.ends_with(' '));
        }
        // Nothing but whitespace is left out.
        let mut covered = String::new();
        for (s, e) in &spans {
            covered.push_str(&text[*s..*e]);
        }
        let squash = |t: &str| t.split_whitespace().collect::<String>();
        assert_eq!(squash(&covered), squash(&text));
        // Sentence ends are preferred.
        assert!(
            spans
                .iter()
                .all(|(_, e)| text[..*e].ends_with(['.', '!', '?']))
        );
    }

    #[test]
    fn chunks_split_unbroken_and_multibyte_text() {
        let text = "é".repeat(1000);
        let spans = chunk_spans(&text, 100);
        assert_eq!(spans.len(), 10);
        assert!(
            spans
                .iter()
                .all(|(s, e)| text.is_char_boundary(*s) && text.is_char_boundary(*e))
        );
        assert!(chunk_spans("   ", 100).is_empty());
        // Multi-byte spaces (ideographic, no-break) are cut after, not inside.
        for text in [
            "日本語の文章\u{3000}".repeat(200),
            "mot\u{a0}".repeat(300),
            "word\u{2003}".repeat(300),
        ] {
            let spans = chunk_spans(&text, 100);
            assert!(spans.len() > 5);
            assert!(
                spans
                    .iter()
                    .all(|(s, e)| text.is_char_boundary(*s) && text.is_char_boundary(*e))
            );
        }
        assert_eq!(chunk_spans("short", 100), [(0, 5)]);
    }
}
