//! Embeddings: the [`Embedder`] trait semantic and episodic memory embed text with, and its
//! implementations: a local sentence-embedding model run on the CPU (feature `embed-local`)
//! and an OpenAI-compatible `/v1/embeddings` client (features `memory` + `llm`).

use std::sync::Arc;

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
