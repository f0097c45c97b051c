//! Embeddings: the [`Embedder`] trait semantic and episodic memory embed text with, and its
//! implementations: a local sentence-embedding model run on the CPU (feature `embed-local`)
//! and an OpenAI-compatible `/v1/embeddings` client (features `memory` + `llm`).
//!
//! `LocalEmbedder` (feature `embed-local`) runs a sentence-transformers BERT model, such as
//! all-MiniLM-L6-v2, from its directory on disk: `LocalEmbedder::load(dir)`, or
//! `LocalEmbedder::from_env()` with the directory in `SOORMA_EMBED_MODEL`.

use std::sync::Arc;

#[cfg(feature = "embed-local")]
mod local;
#[cfg(feature = "embed-local")]
pub use local::{EMBED_MODEL_ENV, LocalEmbedder};
#[cfg(feature = "llm")]
mod openai;
#[cfg(feature = "llm")]
pub use openai::{OpenAiEmbedder, OpenAiEmbedderConfig};

use crate::error::Result;
use crate::util::BoxFuture;

/// Turns texts into vectors whose cosine similarity says how close their meanings are.
///
/// Implementations return one vector per text, each of [`dimensions`](Self::dimensions)
/// numbers and of unit length (so that a dot product is the cosine similarity). Memory stores
/// the [`model`](Self::model) name beside every vector and never compares vectors of two models.
///
/// ```
/// use soorma::memory::Embedder;
/// use soorma::BoxFuture;
///
/// /// A toy embedder: letter counts (for tests of code around embeddings, not for meaning).
/// struct Letters;
///
/// impl Embedder for Letters {
///     fn model(&self) -> &str { "letters" }
///     fn dimensions(&self) -> usize { 26 }
///     fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, soorma::Result<Vec<Vec<f32>>>> {
///         Box::pin(async move {
///             Ok(texts.iter().map(|t| {
///                 let mut v = vec![0.0_f32; 26];
///                 for b in t.bytes().filter(u8::is_ascii_alphabetic) {
///                     v[(b.to_ascii_lowercase() - b'a') as usize] += 1.0;
///                 }
///                 soorma::memory::normalize(&mut v);
///                 v
///             }).collect())
///         })
///     }
/// }
/// ```
pub trait Embedder: Send + Sync + 'static {
    /// The model's name (`all-MiniLM-L6-v2`), stored with each vector.
    fn model(&self) -> &str;
    /// The length of its vectors.
    fn dimensions(&self) -> usize;
    /// Embeds `texts`: one unit-length vector per text, in order.
    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>>>;
}

impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    fn model(&self) -> &str {
        (**self).model()
    }
    fn dimensions(&self) -> usize {
        (**self).dimensions()
    }
    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>>> {
        (**self).embed(texts)
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
///
/// ```
/// let mut v = vec![3.0_f32, 4.0];
/// soorma::memory::normalize(&mut v);
/// assert_eq!(v, [0.6, 0.8]);
/// ```
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// An embedder without a model: hashed words and character trigrams, so texts that share
/// words and spellings are close. It knows no meaning (no synonyms, no paraphrases); it is
/// deterministic, instant and offline, for tests and keyword-style recall. Use a real model
/// ([`LocalEmbedder`](crate::memory::embed) or an embeddings service) for semantic search.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::memory::{Embedder, LexicalEmbedder};
///
/// let lexical = LexicalEmbedder::new(256);
/// let texts = ["refund policy".to_owned(), "refund policies".to_owned(), "weather today".to_owned()];
/// let v = lexical.embed(&texts).await?;
/// let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
/// assert!(dot(&v[0], &v[1]) > dot(&v[0], &v[2]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LexicalEmbedder {
    dimensions: usize,
    name: String,
}

impl LexicalEmbedder {
    /// A lexical embedder of `dimensions` (at least 8).
    ///
    /// ```
    /// use soorma::memory::{Embedder, LexicalEmbedder};
    /// assert_eq!(LexicalEmbedder::new(128).dimensions(), 128);
    /// ```
    pub fn new(dimensions: usize) -> Self {
        let dimensions = dimensions.max(8);
        Self {
            dimensions,
            name: format!("soorma-lexical-{dimensions}"),
        }
    }

    fn vector(&self, text: &str) -> Vec<f32> {
        use sha2::Digest as _;
        let mut v = vec![0.0_f32; self.dimensions];
        let mut add = |feature: &str, weight: f32| {
            let h = sha2::Sha256::digest(feature.as_bytes());
            let n = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
            let sign = if h[8] & 1 == 0 { 1.0 } else { -1.0 };
            v[(n % self.dimensions as u64) as usize] += sign * weight;
        };
        let lower = text.to_lowercase();
        for word in lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            add(word, 1.0);
            let padded: Vec<char> = format!(" {word} ").chars().collect();
            for tri in padded.windows(3) {
                add(&tri.iter().collect::<String>(), 0.3);
            }
        }
        normalize(&mut v);
        v
    }
}

impl Embedder for LexicalEmbedder {
    fn model(&self) -> &str {
        &self.name
    }
    fn dimensions(&self) -> usize {
        self.dimensions
    }
    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>>> {
        Box::pin(async move { Ok(texts.iter().map(|t| self.vector(t)).collect()) })
    }
}
