//! [`MemoryError`]: what memory operations refuse or fail with.

/// Why a memory operation failed; it reaches callers inside [`Error::Other`](crate::Error::Other)
/// ([`Error::downcast_ref`](crate::Error::downcast_ref) gets it back).
///
/// ```
/// use soorma::memory::MemoryError;
/// let err = soorma::Error::from(MemoryError::TooLarge { what: "document", len: 10, max: 5 });
/// assert!(matches!(err.downcast_ref::<MemoryError>(), Some(MemoryError::TooLarge { .. })));
/// assert!(err.to_string().contains("at most 5"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The embedding model could not be loaded (missing or unreadable files, bad config).
    #[error("cannot load the embedding model from {path}: {message}")]
    ModelLoad {
        /// Where the model was looked for.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The embedding model or service failed to embed texts.
    #[error("embedding with `{model}` failed: {message}")]
    Embedding {
        /// The model's name.
        model: String,
        /// What went wrong.
        message: String,
        /// Whether retrying may succeed (a service briefly unreachable).
        retryable: bool,
    },
    /// An embedder returned vectors of the wrong number or size.
    #[error("`{model}` returned {got} for {expected}")]
    Shape {
        /// The model's name.
        model: String,
        /// What was expected (`3 vectors of 384 dimensions`).
        expected: String,
        /// What came back.
        got: String,
    },
    /// Semantic or episodic search needs an embedder and none was configured.
    #[error("{what} needs an embedder: build the memory with `Memory::builder(..).embedder(..)`")]
    NoEmbedder {
        /// The operation.
        what: &'static str,
    },
    /// An input exceeds its limit.
    #[error("{what} is too large: {len} bytes, at most {max}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A tenant reached its quota.
    #[error("tenant `{tenant}` holds {count} {what}, its limit")]
    Quota {
        /// The tenant.
        tenant: String,
        /// What is counted.
        what: &'static str,
        /// The limit it reached.
        count: usize,
    },
    /// The memory service is not attached to the agent handling the event.
    #[error(
        "no memory is attached to agent `{agent}`: add it with `.with_state(memory.clone())` on the agent's builder"
    )]
    NotAttached {
        /// The agent.
        agent: String,
    },
}

impl MemoryError {
    fn retryable(&self) -> bool {
        matches!(
            self,
            MemoryError::Embedding {
                retryable: true,
                ..
            }
        )
    }
}

impl From<MemoryError> for crate::error::Error {
    fn from(e: MemoryError) -> Self {
        let retryable = e.retryable();
        crate::error::Error::other_with_retry(e, retryable)
    }
}
