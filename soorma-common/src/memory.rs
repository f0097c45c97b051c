//! Memory records: what `soorma::memory` stores for working, semantic and episodic memory.
//!
//! Vectors are stored beside the text they embed (base64 of little-endian `f32`s), with the
//! name of the model that made them, so that an index can be rebuilt from the records alone.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who may retrieve a knowledge document.
///
/// ```
/// use soorma_common::memory::Visibility;
/// assert_eq!(serde_json::to_value(Visibility::Tenant).unwrap(), "tenant");
/// assert_eq!(Visibility::default(), Visibility::Tenant);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Visibility {
    /// Only the user who owns it, within its tenant.
    User,
    /// Every user of its tenant.
    #[default]
    Tenant,
    /// Every tenant (published by the platform's operator, never by a tenant).
    Public,
}

/// One chunk of a knowledge document: where it lies in the text, and its vector.
///
/// ```
/// use soorma_common::memory::StoredChunk;
/// let c = StoredChunk { start: 0, end: 5, embedding: String::new() };
/// assert_eq!(c.end - c.start, 5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StoredChunk {
    /// Byte offset of the chunk's first character in the document's text.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
    /// Its vector: base64 of little-endian `f32`s.
    pub embedding: String,
}

/// A knowledge document of semantic memory, as stored (one record per document).
///
/// ```
/// use soorma_common::memory::{KnowledgeRecord, Visibility};
/// let json = serde_json::json!({
///     "id": "refunds", "namespace": "policies", "text": "Refunds take 5 days.",
///     "visibility": "tenant", "content_hash": "ab", "model": "m", "chunks": [],
///     "created_at": 1, "updated_at": 1
/// });
/// let doc: KnowledgeRecord = serde_json::from_value(json).unwrap();
/// assert_eq!(doc.visibility, Visibility::Tenant);
/// assert!(doc.tags.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeRecord {
    /// The document's id: the caller's external id, or a digest of its text.
    pub id: String,
    /// The collection it belongs to (retention is set per namespace).
    pub namespace: String,
    /// The whole text.
    pub text: String,
    /// Caller-defined fields, filterable by equality.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Labels, filterable (a query's tags must all be present).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Who may retrieve it.
    pub visibility: Visibility,
    /// The owner, for [`Visibility::User`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// SHA-256 of the text, metadata and tags (hex): an upsert of the same content is a no-op.
    pub content_hash: String,
    /// The embedding model of its chunks' vectors.
    pub model: String,
    /// Its chunks, in order.
    pub chunks: Vec<StoredChunk>,
    /// When it was first stored (ms since the Unix epoch).
    pub created_at: u64,
    /// When it was last replaced.
    pub updated_at: u64,
    /// When it expires (ms since the Unix epoch), by its namespace's retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// One interaction of episodic memory, as stored (one record per interaction).
///
/// ```
/// use soorma_common::memory::EpisodeRecord;
/// let json = serde_json::json!({
///     "id": "e1", "agent": "support", "user_id": "ann", "role": "user",
///     "content": "My order is late", "at": 1700000000000_u64
/// });
/// let e: EpisodeRecord = serde_json::from_value(json).unwrap();
/// assert!(e.embedding.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EpisodeRecord {
    /// The interaction's id.
    pub id: String,
    /// The agent that took part.
    pub agent: String,
    /// The user it was with.
    pub user_id: String,
    /// Who spoke or acted: `user`, `assistant`, `tool`, `system`, or another role.
    pub role: String,
    /// What was said or done.
    pub content: String,
    /// When (ms since the Unix epoch).
    pub at: u64,
    /// What it refers to (document ids, task ids, URLs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<String>,
    /// Caller-defined fields.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// The embedding model of `embedding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its vector (base64 of little-endian `f32`s), when an embedder was configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<String>,
    /// When it expires (ms since the Unix epoch), by retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// A value of working memory, as stored.
///
/// ```
/// use soorma_common::memory::WorkingRecord;
/// let r = WorkingRecord { value: serde_json::json!(3), expires_at: None, user_id: None };
/// assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::json!({"value": 3}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkingRecord {
    /// The value.
    pub value: Value,
    /// When it expires (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The user it was written for (deleted with the user's memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}
