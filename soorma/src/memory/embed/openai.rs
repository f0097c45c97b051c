//! [`OpenAiEmbedder`]: embeddings from an OpenAI-compatible `POST {base_url}/embeddings`
//! (OpenAI, Azure-style proxies, vLLM, Ollama, llama.cpp, text-embeddings-inference, ...).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Embedder, normalize};
use crate::error::{Error, Result};
use crate::memory::MemoryError;
use crate::util::BoxFuture;

/// How much of an unexpected response body errors quote.
const BODY_EXCERPT_BYTES: usize = 512;
/// Bytes a response may spend per number of the vectors it must hold: a JSON float such as
/// `-0.012345678,` takes 10 to 25 bytes, pretty-printed a few more.
const BYTES_PER_NUMBER: usize = 32;
/// Bytes a response may spend per vector on its object (`{"object":"embedding","index":7,..}`).
const BYTES_PER_VECTOR: usize = 256;
/// Bytes a response may spend besides its vectors (`model`, `usage`, whitespace).
const BODY_SLACK_BYTES: usize = 64 * 1024;
/// The wait before the first retry; it doubles before each next one.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts (a server's `Retry-After` included).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Settings of an OpenAI-compatible embeddings endpoint, for [`OpenAiEmbedder`].
///
/// ```
/// use std::time::Duration;
/// use soorma::memory::embed::OpenAiEmbedderConfig;
///
/// let config = OpenAiEmbedderConfig::new("text-embedding-3-small", 1536)
///     .with_base_url("http://localhost:11434/v1/")
///     .with_api_key("sk-test")
///     .with_timeout(Duration::from_secs(10))
///     .with_batch_size(128);
/// assert_eq!(config.base_url, "http://localhost:11434/v1");
/// assert_eq!((config.dimensions, config.batch_size, config.max_attempts), (1536, 128, 3));
/// assert!(!format!("{config:?}").contains("sk-test"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenAiEmbedderConfig {
    /// The API root, without the trailing `/` (requests go to `{base_url}/embeddings`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// The model name sent with every request (and stored with every vector).
    pub model: String,
    /// The length of the vectors the model returns; responses with other lengths are refused.
    pub dimensions: usize,
    /// Also send `dimensions` in requests, for models that can shorten their vectors (OpenAI's
    /// `text-embedding-3-*`). Off by default: most servers reject or ignore it.
    pub send_dimensions: bool,
    /// How long one request may take, from sending it to reading the whole response.
    pub timeout: Duration,
    /// Texts per request (1 to [`MAX_BATCH_SIZE`](Self::MAX_BATCH_SIZE)); larger inputs are
    /// sent in several requests, one after another.
    pub batch_size: usize,
    /// How many times a request is sent before a retryable failure (a transport error, a
    /// timeout, HTTP 408, 429 or 5xx) is returned (at least 1).
    pub max_attempts: usize,
}

impl fmt::Debug for OpenAiEmbedderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedderConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("send_dimensions", &self.send_dimensions)
            .field("timeout", &self.timeout)
            .field("batch_size", &self.batch_size)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl OpenAiEmbedderConfig {
    /// The base URL variable [`from_env`](Self::from_env) reads (`https://host/v1`).
    pub const URL_ENV: &'static str = "SOORMA_EMBED_URL";
    /// The API key variable [`from_env`](Self::from_env) reads.
    pub const API_KEY_ENV: &'static str = "SOORMA_EMBED_API_KEY";
    /// The model name variable [`from_env`](Self::from_env) reads (required).
    pub const MODEL_NAME_ENV: &'static str = "SOORMA_EMBED_MODEL_NAME";
    /// The vector length variable [`from_env`](Self::from_env) reads (required).
    pub const DIMENSIONS_ENV: &'static str = "SOORMA_EMBED_DIMENSIONS";
    /// The base URL used when none is configured.
    pub const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    /// The request timeout used when none is configured.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// Texts per request unless configured.
    pub const DEFAULT_BATCH_SIZE: usize = 64;
    /// The most texts per request (OpenAI's limit).
    pub const MAX_BATCH_SIZE: usize = 2048;
    /// Attempts per request unless configured.
    pub const DEFAULT_MAX_ATTEMPTS: usize = 3;

    /// Defaults for `model`, whose vectors have `dimensions` numbers: OpenAI's base URL, no
    /// API key, a 30 s timeout, 64 texts per request, 3 attempts.
    ///
    /// ```
    /// use soorma::memory::embed::OpenAiEmbedderConfig;
    /// let config = OpenAiEmbedderConfig::new("text-embedding-3-small", 1536);
    /// assert_eq!(config.base_url, OpenAiEmbedderConfig::DEFAULT_BASE_URL);
    /// assert_eq!(config.timeout, OpenAiEmbedderConfig::DEFAULT_TIMEOUT);
    /// assert_eq!(config.api_key, None);
    /// assert!(!config.send_dimensions);
    /// ```
    pub fn new(model: impl Into<String>, dimensions: usize) -> Self {
        Self {
            base_url: Self::DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: model.into(),
            dimensions,
            send_dimensions: false,
            timeout: Self::DEFAULT_TIMEOUT,
            batch_size: Self::DEFAULT_BATCH_SIZE,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Reads `SOORMA_EMBED_MODEL_NAME` (required), `SOORMA_EMBED_DIMENSIONS` (required, a
    /// positive integer), `SOORMA_EMBED_URL` (else OpenAI's) and `SOORMA_EMBED_API_KEY` (else
    /// none). Empty values count as unset. Fails with [`Error::Config`](crate::Error::Config)
    /// naming the variable.
    ///
    /// ```
    /// use soorma::memory::embed::OpenAiEmbedderConfig;
    /// // SAFETY: doc tests run in their own process, single-threaded here.
    /// unsafe { std::env::remove_var("SOORMA_EMBED_MODEL_NAME") };
    /// let err = OpenAiEmbedderConfig::from_env().unwrap_err();
    /// assert!(err.to_string().contains("SOORMA_EMBED_MODEL_NAME"));
    ///
    /// unsafe {
    ///     std::env::set_var("SOORMA_EMBED_MODEL_NAME", "nomic-embed-text");
    ///     std::env::set_var("SOORMA_EMBED_DIMENSIONS", "768");
    ///     std::env::set_var("SOORMA_EMBED_URL", "http://127.0.0.1:11434/v1");
    /// }
    /// let config = OpenAiEmbedderConfig::from_env()?;
    /// assert_eq!((config.model.as_str(), config.dimensions), ("nomic-embed-text", 768));
    /// assert_eq!(config.base_url, "http://127.0.0.1:11434/v1");
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable source.
    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let model = var(Self::MODEL_NAME_ENV).ok_or_else(|| {
            Error::Config(format!(
                "{} is not set: set it to the embedding model's name (text-embedding-3-small)",
                Self::MODEL_NAME_ENV
            ))
        })?;
        let dimensions = var(Self::DIMENSIONS_ENV).ok_or_else(|| {
            Error::Config(format!(
                "{} is not set: set it to the length of the model's vectors (1536)",
                Self::DIMENSIONS_ENV
            ))
        })?;
        let dimensions = dimensions
            .parse::<usize>()
            .ok()
            .filter(|d| *d > 0)
            .ok_or_else(|| {
                Error::Config(format!(
                    "{}=`{}`: not a positive integer",
                    Self::DIMENSIONS_ENV,
                    crate::util::bounded(&dimensions, 64)
                ))
            })?;
        let mut config = Self::new(model, dimensions);
        if let Some(url) = var(Self::URL_ENV) {
            config = config.with_base_url(url);
        }
        config.api_key = var(Self::API_KEY_ENV);
        Ok(config)
    }

    /// Sets the API root (`https://host/v1`); a trailing `/` is dropped.
    ///
    /// ```
    /// let config = soorma::memory::embed::OpenAiEmbedderConfig::new("m", 8)
    ///     .with_base_url("http://127.0.0.1:8000/v1/");
    /// assert_eq!(config.base_url, "http://127.0.0.1:8000/v1");
    /// ```
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Sets the API key (sent as a bearer token).
    ///
    /// ```
    /// let config = soorma::memory::embed::OpenAiEmbedderConfig::new("m", 8).with_api_key("sk-1");
    /// assert_eq!(config.api_key.as_deref(), Some("sk-1"));
    /// ```
    #[must_use]
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Sets the timeout of each request.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::memory::embed::OpenAiEmbedderConfig::new("m", 8)
    ///     .with_timeout(Duration::from_secs(5));
    /// assert_eq!(config.timeout, Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the texts per request (clamped to 1 ..= 2048).
    ///
    /// ```
    /// use soorma::memory::embed::OpenAiEmbedderConfig;
    /// assert_eq!(OpenAiEmbedderConfig::new("m", 8).with_batch_size(0).batch_size, 1);
    /// assert_eq!(OpenAiEmbedderConfig::new("m", 8).with_batch_size(10_000).batch_size, 2048);
    /// ```
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.clamp(1, Self::MAX_BATCH_SIZE);
        self
    }

    /// Sets how many times a request is sent before a retryable failure is returned (at
    /// least 1).
    ///
    /// ```
    /// use soorma::memory::embed::OpenAiEmbedderConfig;
    /// assert_eq!(OpenAiEmbedderConfig::new("m", 8).with_max_attempts(0).max_attempts, 1);
    /// ```
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: usize) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Also sends `dimensions` with each request (for models that shorten their vectors on
    /// request, such as OpenAI's `text-embedding-3-*`).
    ///
    /// ```
    /// let config = soorma::memory::embed::OpenAiEmbedderConfig::new("text-embedding-3-large", 256)
    ///     .with_send_dimensions(true);
    /// assert!(config.send_dimensions);
    /// ```
    #[must_use]
    pub fn with_send_dimensions(mut self, send: bool) -> Self {
        self.send_dimensions = send;
        self
    }

    /// `{base_url}/embeddings`.
    fn embeddings_url(&self) -> String {
        format!("{}/embeddings", self.base_url)
    }
}

/// An [`Embedder`] backed by an OpenAI-compatible `POST {base_url}/embeddings` (features
/// `memory` and `llm`). Cheap to clone (clones share the connection pool).
///
/// Texts are sent [`batch_size`](OpenAiEmbedderConfig::batch_size) at a time as
/// `{"model": .., "input": [..], "encoding_format": "float"}`; the vectors of the response's
/// `data` are put in input order by their `index`, checked (every index once, each vector of
/// [`dimensions`](OpenAiEmbedderConfig::dimensions) finite numbers) and scaled to unit length.
///
/// Failures are [`MemoryError`]s inside [`soorma::Error`](crate::Error):
/// [`Embedding`](MemoryError::Embedding) for transport errors, timeouts, non-2xx answers
/// (quoting the start of the body) and bodies that are not an embeddings response;
/// [`Shape`](MemoryError::Shape) for vectors of the wrong number or length;
/// [`TooLarge`](MemoryError::TooLarge) for a response body larger than the vectors asked for
/// can take (it is not read further). Transport errors, timeouts and HTTP 408, 429 and 5xx are
/// retried, a short backoff apart, up to [`max_attempts`](OpenAiEmbedderConfig::max_attempts)
/// times per request; then the error is [retryable](crate::Error::is_retryable).
///
/// ```
/// use soorma::memory::Embedder;
/// use soorma::memory::embed::{OpenAiEmbedder, OpenAiEmbedderConfig};
///
/// # fn serve_once(body: &'static str) -> String {
/// #     use std::io::{Read, Write};
/// #     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// #     let url = format!("http://{}/v1", listener.local_addr().unwrap());
/// #     std::thread::spawn(move || {
/// #         let (mut socket, _) = listener.accept().unwrap();
/// #         let (mut request, mut buf) = (Vec::new(), [0u8; 4096]);
/// #         while !request.ends_with(b"}") {
/// #             let n = socket.read(&mut buf).unwrap(); request.extend_from_slice(&buf[..n]);
/// #         }
/// #         write!(socket, "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
/// #     });
/// #     url
/// # }
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # let base_url = serve_once(r#"{"object":"list","data":[
/// #     {"object":"embedding","index":1,"embedding":[0.0,3.0,4.0]},
/// #     {"object":"embedding","index":0,"embedding":[2.0,0.0,0.0]}],"model":"tiny"}"#);
/// let embedder = OpenAiEmbedder::new(OpenAiEmbedderConfig::new("tiny", 3).with_base_url(base_url))?;
/// let vectors = embedder.embed(&["first".to_owned(), "second".to_owned()]).await?;
/// assert_eq!(vectors, [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OpenAiEmbedder {
    http: reqwest::Client,
    config: Arc<OpenAiEmbedderConfig>,
    url: Arc<str>,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The request body.
#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

/// A response: only what this client reads.
#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

/// A failed attempt: the error, and how long the server asked to wait before the next one.
struct Failed {
    error: MemoryError,
    retry_after: Option<Duration>,
}

impl From<MemoryError> for Failed {
    fn from(error: MemoryError) -> Self {
        Failed {
            error,
            retry_after: None,
        }
    }
}

impl OpenAiEmbedder {
    /// An embedder for `config`. Fails with [`Error::Config`](crate::Error::Config) when the
    /// base URL is not an absolute `http(s)` URL, the model name is empty, `dimensions` is 0, or
    /// the base URL is `https` and the system has no CA certificates. A `batch_size` or
    /// `max_attempts` out of range is clamped.
    ///
    /// ```
    /// use soorma::memory::Embedder;
    /// use soorma::memory::embed::{OpenAiEmbedder, OpenAiEmbedderConfig};
    ///
    /// let embedder = OpenAiEmbedder::new(OpenAiEmbedderConfig::new("text-embedding-3-small", 1536))?;
    /// assert_eq!((embedder.model(), embedder.dimensions()), ("text-embedding-3-small", 1536));
    /// let bad = OpenAiEmbedderConfig::new("m", 8).with_base_url("ftp://host/v1");
    /// assert!(matches!(OpenAiEmbedder::new(bad), Err(soorma::Error::Config(_))));
    /// assert!(OpenAiEmbedder::new(OpenAiEmbedderConfig::new("m", 0)).is_err());
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn new(config: OpenAiEmbedderConfig) -> Result<Self> {
        let mut config = config;
        config.batch_size = config
            .batch_size
            .clamp(1, OpenAiEmbedderConfig::MAX_BATCH_SIZE);
        config.max_attempts = config.max_attempts.max(1);
        if config.model.trim().is_empty() {
            return Err(Error::Config(
                "the embedding model's name is empty".to_owned(),
            ));
        }
        if config.dimensions == 0 {
            return Err(Error::Config(format!(
                "embedding model `{}`: dimensions must be at least 1",
                config.model
            )));
        }
        let url = config.embeddings_url();
        let parsed = reqwest::Url::parse(&url).map_err(|e| {
            Error::Config(format!(
                "invalid embeddings base URL `{}`: {e}",
                config.base_url
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::Config(format!(
                "embeddings base URL `{}` must be http or https",
                config.base_url
            )));
        }
        let tls = crate::tls::client_config(parsed.scheme() == "https").map_err(Error::Config)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            config: Arc::new(config),
            url: url.into(),
        })
    }

    /// An embedder configured by [`OpenAiEmbedderConfig::from_env`].
    ///
    /// ```no_run
    /// // SOORMA_EMBED_MODEL_NAME=text-embedding-3-small SOORMA_EMBED_DIMENSIONS=1536
    /// // SOORMA_EMBED_API_KEY=sk-...
    /// let embedder = soorma::memory::embed::OpenAiEmbedder::from_env()?;
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::new(OpenAiEmbedderConfig::from_env()?)
    }

    /// The configuration.
    ///
    /// ```
    /// use soorma::memory::embed::{OpenAiEmbedder, OpenAiEmbedderConfig};
    /// let embedder = OpenAiEmbedder::new(OpenAiEmbedderConfig::new("m", 8).with_batch_size(16))?;
    /// assert_eq!(embedder.config().batch_size, 16);
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn config(&self) -> &OpenAiEmbedderConfig {
        &self.config
    }

    /// Embeds one batch, retrying retryable failures.
    async fn embed_batch(&self, batch: &[String]) -> Result<Vec<Vec<f32>>, MemoryError> {
        let body = EmbeddingRequest {
            model: &self.config.model,
            input: batch,
            encoding_format: "float",
            dimensions: self
                .config
                .send_dimensions
                .then_some(self.config.dimensions),
        };
        let mut attempt = 1;
        loop {
            tracing::debug!(url = %self.url, model = %self.config.model, texts = batch.len(), attempt, "embedding");
            let failed = match self.exchange(&body).await {
                Ok(bytes) => return self.parse(&bytes, batch.len()),
                Err(failed) => failed,
            };
            let retryable = matches!(
                failed.error,
                MemoryError::Embedding {
                    retryable: true,
                    ..
                }
            );
            if !retryable || attempt >= self.config.max_attempts {
                return Err(failed.error);
            }
            let backoff = failed
                .retry_after
                .unwrap_or_else(|| FIRST_BACKOFF.saturating_mul(1 << (attempt - 1).min(16)))
                .min(MAX_BACKOFF);
            tracing::warn!(url = %self.url, attempt, error = %failed.error, ?backoff, "embedding failed; retrying");
            tokio::time::sleep(backoff).await;
            attempt += 1;
        }
    }

    /// Sends one request and reads its body (at most [`body_limit`](Self::body_limit) bytes),
    /// all within the timeout.
    async fn exchange(&self, body: &EmbeddingRequest<'_>) -> Result<Vec<u8>, Failed> {
        let limit = self.body_limit(body.input.len());
        let exchange = async {
            let mut request = self.http.post(&*self.url).json(body);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            let mut response = request.send().await.map_err(|e| self.transport_error(&e))?;
            let status = response.status();
            if !status.is_success() {
                return Err(self.http_error(response).await);
            }
            if let Some(len) = response.content_length()
                && len > limit as u64
            {
                return Err(Failed::from(MemoryError::TooLarge {
                    what: "embeddings response",
                    len: usize::try_from(len).unwrap_or(usize::MAX),
                    max: limit,
                }));
            }
            let capacity = response.content_length().unwrap_or(0).min(limit as u64) as usize;
            let mut bytes = Vec::with_capacity(capacity);
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| self.transport_error(&e))?
            {
                if bytes.len() + chunk.len() > limit {
                    return Err(Failed::from(MemoryError::TooLarge {
                        what: "embeddings response",
                        len: bytes.len() + chunk.len(),
                        max: limit,
                    }));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        };
        tokio::time::timeout(self.config.timeout, exchange)
            .await
            .map_err(|_| {
                Failed::from(self.failure(
                    format!(
                        "{} did not answer within {:?}",
                        self.url, self.config.timeout
                    ),
                    true,
                ))
            })?
    }

    /// The error of a non-2xx response, quoting the start of its body.
    async fn http_error(&self, mut response: reqwest::Response) -> Failed {
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut excerpt = Vec::new();
        while excerpt.len() < BODY_EXCERPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        let retryable =
            status.as_u16() == 408 || status.as_u16() == 429 || status.is_server_error();
        tracing::debug!(url = %self.url, status = status.as_u16(), "embedding request failed");
        Failed {
            error: self.failure(
                format!(
                    "{} answered HTTP {}: {}",
                    self.url,
                    status.as_u16(),
                    body_excerpt(&excerpt)
                ),
                retryable,
            ),
            retry_after,
        }
    }

    /// The vectors of a 2xx body, in input order, unit length.
    fn parse(&self, body: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, MemoryError> {
        if let Some(message) = provider_error(body) {
            return Err(self.failure(format!("{} reported an error: {message}", self.url), false));
        }
        let response: EmbeddingResponse = serde_json::from_slice(body).map_err(|e| {
            self.failure(
                format!(
                    "{} sent no embeddings response ({e}); body: {}",
                    self.url,
                    body_excerpt(body)
                ),
                false,
            )
        })?;
        let dimensions = self.config.dimensions;
        let shape = |got: String| MemoryError::Shape {
            model: self.config.model.clone(),
            expected: format!("{expected} vectors of {dimensions} dimensions"),
            got,
        };
        if response.data.len() != expected {
            return Err(shape(format!("{} vectors", response.data.len())));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in response.data {
            let Some(slot) = slots.get_mut(item.index) else {
                return Err(shape(format!("a vector for index {}", item.index)));
            };
            if slot.is_some() {
                return Err(shape(format!("two vectors for index {}", item.index)));
            }
            if item.embedding.len() != dimensions {
                return Err(shape(format!(
                    "a vector of {} dimensions at index {}",
                    item.embedding.len(),
                    item.index
                )));
            }
            if item.embedding.iter().any(|x| !x.is_finite()) {
                return Err(shape(format!(
                    "a vector with a non-finite number (out of f32's range) at index {}",
                    item.index
                )));
            }
            *slot = Some(item.embedding);
        }
        slots
            .into_iter()
            .enumerate()
            .map(|(index, slot)| {
                let mut v = slot.ok_or_else(|| shape(format!("no vector for index {index}")))?;
                normalize(&mut v);
                Ok(v)
            })
            .collect()
    }

    /// The most bytes a response for `texts` texts may have.
    fn body_limit(&self, texts: usize) -> usize {
        self.config
            .dimensions
            .saturating_mul(BYTES_PER_NUMBER)
            .saturating_add(BYTES_PER_VECTOR)
            .saturating_mul(texts)
            .saturating_add(BODY_SLACK_BYTES)
    }

    fn failure(&self, message: String, retryable: bool) -> MemoryError {
        MemoryError::Embedding {
            model: self.config.model.clone(),
            message,
            retryable,
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> Failed {
        let mut message = format!("cannot reach {}: {error}", self.url);
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Failed::from(self.failure(message, true))
    }
}

impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.config.model
    }

    fn dimensions(&self) -> usize {
        self.config.dimensions
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>>> {
        Box::pin(async move {
            let mut vectors = Vec::with_capacity(texts.len());
            for batch in texts.chunks(self.config.batch_size) {
                vectors.extend(self.embed_batch(batch).await?);
            }
            Ok(vectors)
        })
    }
}

/// The message of an `{"error": ...}` body.
fn provider_error(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: serde_json::Value,
    }
    let parsed: ErrorBody = serde_json::from_slice(body).ok()?;
    let message = match &parsed.error {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| parsed.error.to_string(), str::to_owned),
        serde_json::Value::Null => return None,
        other => other.to_string(),
    };
    Some(crate::util::bounded(&message, BODY_EXCERPT_BYTES))
}

/// At most [`BODY_EXCERPT_BYTES`] of `body` as text (cut at a character boundary).
fn body_excerpt(body: &[u8]) -> String {
    let cut = &body[..body.len().min(BODY_EXCERPT_BYTES + 4)];
    let text = String::from_utf8_lossy(cut);
    let text = crate::util::bounded(text.trim(), BODY_EXCERPT_BYTES);
    if text.is_empty() {
        "(empty)".to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn from_env_names_missing_and_bad_variables() {
        let err = OpenAiEmbedderConfig::from_lookup(lookup(&[(
            OpenAiEmbedderConfig::DIMENSIONS_ENV,
            "8",
        )]))
        .unwrap_err();
        assert!(matches!(&err, Error::Config(m) if m.contains("SOORMA_EMBED_MODEL_NAME")));
        let err = OpenAiEmbedderConfig::from_lookup(lookup(&[(
            OpenAiEmbedderConfig::MODEL_NAME_ENV,
            "m",
        )]))
        .unwrap_err();
        assert!(matches!(&err, Error::Config(m) if m.contains("SOORMA_EMBED_DIMENSIONS")));
        for bad in ["0", "-3", "many", "1.5"] {
            let err = OpenAiEmbedderConfig::from_lookup(lookup(&[
                (OpenAiEmbedderConfig::MODEL_NAME_ENV, "m"),
                (OpenAiEmbedderConfig::DIMENSIONS_ENV, bad),
            ]))
            .unwrap_err();
            assert!(
                matches!(&err, Error::Config(m) if m.contains("SOORMA_EMBED_DIMENSIONS") && m.contains(bad)),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn from_env_reads_every_variable() {
        let config = OpenAiEmbedderConfig::from_lookup(lookup(&[
            (OpenAiEmbedderConfig::MODEL_NAME_ENV, " nomic-embed-text "),
            (OpenAiEmbedderConfig::DIMENSIONS_ENV, "768"),
            (OpenAiEmbedderConfig::URL_ENV, "http://127.0.0.1:11434/v1/"),
            (OpenAiEmbedderConfig::API_KEY_ENV, "sk-x"),
        ]))
        .unwrap();
        assert_eq!(
            config,
            OpenAiEmbedderConfig::new("nomic-embed-text", 768)
                .with_base_url("http://127.0.0.1:11434/v1")
                .with_api_key("sk-x")
        );
        let defaults = OpenAiEmbedderConfig::from_lookup(lookup(&[
            (OpenAiEmbedderConfig::MODEL_NAME_ENV, "m"),
            (OpenAiEmbedderConfig::DIMENSIONS_ENV, "4"),
            (OpenAiEmbedderConfig::URL_ENV, ""),
            (OpenAiEmbedderConfig::API_KEY_ENV, " "),
        ]))
        .unwrap();
        assert_eq!(defaults, OpenAiEmbedderConfig::new("m", 4));
        assert_eq!(
            defaults.embeddings_url(),
            "https://api.openai.com/v1/embeddings"
        );
    }

    #[test]
    fn request_bodies_ask_for_floats_and_dimensions_only_when_told() {
        let input = ["a".to_owned()];
        let body = |send: bool| {
            serde_json::to_value(EmbeddingRequest {
                model: "m",
                input: &input,
                encoding_format: "float",
                dimensions: send.then_some(8),
            })
            .unwrap()
        };
        assert_eq!(
            body(false),
            serde_json::json!({"model": "m", "input": ["a"], "encoding_format": "float"})
        );
        assert_eq!(body(true)["dimensions"], 8);
    }

    #[test]
    fn parse_orders_checks_and_normalizes() {
        let embedder = OpenAiEmbedder::new(
            OpenAiEmbedderConfig::new("m", 2).with_base_url("http://127.0.0.1:1/v1"),
        )
        .unwrap();
        let ok = br#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#;
        assert_eq!(embedder.parse(ok, 2).unwrap(), [[0.6, 0.8], [0.0, 1.0]]);
        for (body, what) in [
            (
                &br#"{"data":[{"index":0,"embedding":[1,2]}]}"#[..],
                "1 vectors",
            ),
            (
                br#"{"data":[{"index":0,"embedding":[1,2]},{"index":0,"embedding":[1,2]}]}"#,
                "two vectors for index 0",
            ),
            (
                br#"{"data":[{"index":0,"embedding":[1,2]},{"index":2,"embedding":[1,2]}]}"#,
                "index 2",
            ),
            (
                br#"{"data":[{"index":0,"embedding":[1,2]},{"index":1,"embedding":[1]}]}"#,
                "1 dimensions at index 1",
            ),
        ] {
            let err = embedder.parse(body, 2).unwrap_err();
            assert!(
                matches!(&err, MemoryError::Shape { got, .. } if got.contains(what)),
                "{what}: {err}"
            );
        }
        for body in [
            &b"<html>oops</html>"[..],
            b"{\"data\":[{\"index\":0,\"embedding\":\"AAAA\"}]}",
            b"{\"error\":{\"message\":\"quota exceeded\"}}",
            // Beyond f32's range.
            b"{\"data\":[{\"index\":0,\"embedding\":[1e39,1]}]}",
            b"",
        ] {
            let err = embedder.parse(body, 1).unwrap_err();
            assert!(
                matches!(
                    err,
                    MemoryError::Embedding {
                        retryable: false,
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn the_body_limit_grows_with_the_batch_and_saturates() {
        let embedder =
            OpenAiEmbedder::new(OpenAiEmbedderConfig::new("m", 1536).with_base_url("http://h/v1"))
                .unwrap();
        assert_eq!(
            embedder.body_limit(0),
            BODY_SLACK_BYTES,
            "an empty batch still allows the envelope"
        );
        assert!(embedder.body_limit(64) > 64 * 1536 * 25);
        let huge = OpenAiEmbedder::new(
            OpenAiEmbedderConfig::new("m", usize::MAX / 2).with_base_url("http://h/v1"),
        )
        .unwrap();
        assert_eq!(huge.body_limit(2048), usize::MAX);
    }

    #[test]
    fn excerpts_are_short() {
        let long = "é".repeat(10_000);
        let excerpt = body_excerpt(long.as_bytes());
        assert!(excerpt.len() <= BODY_EXCERPT_BYTES);
        assert_eq!(body_excerpt(b"  \n"), "(empty)");
        assert_eq!(body_excerpt(b" bad request \n"), "bad request");
    }
}
