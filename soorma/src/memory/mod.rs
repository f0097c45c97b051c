//! Memory for agents (feature `memory`): working memory (key/value scoped to a plan, a session
//! or a task), semantic memory (knowledge to retrieve by meaning) and episodic memory (what an
//! agent and a user said and did), all kept in the platform's state store.

pub mod embed;
mod error;

pub use embed::{Embedder, normalize};
pub use error::MemoryError;
