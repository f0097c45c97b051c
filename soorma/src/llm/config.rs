//! Settings of an OpenAI-compatible endpoint.

use std::fmt;
use std::time::Duration;

use super::error::LlmError;
use crate::error::Result;

/// The base URL variable (`https://host/v1`); `OPENAI_BASE_URL` is the fallback.
///
/// ```
/// assert_eq!(soorma::llm::BASE_URL_ENV, "SOORMA_LLM_BASE_URL");
/// ```
pub const BASE_URL_ENV: &str = "SOORMA_LLM_BASE_URL";

/// The API key variable; `OPENAI_API_KEY` is the fallback.
///
/// ```
/// assert_eq!(soorma::llm::API_KEY_ENV, "SOORMA_LLM_API_KEY");
/// ```
pub const API_KEY_ENV: &str = "SOORMA_LLM_API_KEY";

/// The model variable (required by [`LlmConfig::from_env`]).
///
/// ```
/// assert_eq!(soorma::llm::MODEL_ENV, "SOORMA_LLM_MODEL");
/// ```
pub const MODEL_ENV: &str = "SOORMA_LLM_MODEL";

const OPENAI_BASE_URL_ENV: &str = "OPENAI_BASE_URL";
const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// The base URL used when none is configured.
///
/// ```
/// assert_eq!(soorma::llm::LlmConfig::new("m").base_url, soorma::llm::DEFAULT_BASE_URL);
/// ```
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How many replies structured output asks for before giving up, unless configured.
///
/// ```
/// assert_eq!(soorma::llm::LlmConfig::new("m").max_attempts, soorma::llm::DEFAULT_MAX_ATTEMPTS);
/// ```
pub const DEFAULT_MAX_ATTEMPTS: usize = 3;

/// How long a request may wait for a response (and a stream for its next chunk), unless
/// configured.
///
/// ```
/// assert_eq!(soorma::llm::LlmConfig::new("m").timeout, soorma::llm::DEFAULT_TIMEOUT);
/// ```
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Settings of an OpenAI-compatible chat-completions endpoint.
///
/// ```
/// use std::time::Duration;
/// use soorma::llm::LlmConfig;
///
/// let config = LlmConfig::new("llama3.1")
///     .with_base_url("http://localhost:11434/v1/")
///     .with_timeout(Duration::from_secs(30))
///     .with_temperature(0.2)
///     .with_max_attempts(5);
/// assert_eq!(config.base_url, "http://localhost:11434/v1");
/// assert_eq!(config.api_key, None);
/// assert_eq!(config.max_attempts, 5);
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct LlmConfig {
    /// The API root, without the trailing `/` (requests go to `{base_url}/chat/completions`).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// The model name sent with every request.
    pub model: String,
    /// How long a request may wait for its whole response; while streaming, how long to wait
    /// for the response headers and then for each next chunk.
    pub timeout: Duration,
    /// How many replies structured output asks for before giving up (at least 1).
    pub max_attempts: usize,
    /// The sampling temperature; the server's default when `None`.
    pub temperature: Option<f64>,
    /// Also send `response_format: {"type": "json_schema", ..}` with structured-output
    /// requests. Off by default: many OpenAI-compatible servers reject it.
    pub json_schema_response_format: bool,
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .field("temperature", &self.temperature)
            .field(
                "json_schema_response_format",
                &self.json_schema_response_format,
            )
            .finish()
    }
}

impl LlmConfig {
    /// Defaults for `model`: OpenAI's base URL, no API key, a 120 s timeout, 3 attempts.
    ///
    /// ```
    /// let config = soorma::llm::LlmConfig::new("gpt-4o-mini");
    /// assert_eq!(config.model, "gpt-4o-mini");
    /// assert!(!config.json_schema_response_format);
    /// ```
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            api_key: None,
            model: model.into(),
            timeout: DEFAULT_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            temperature: None,
            json_schema_response_format: false,
        }
    }

    /// Reads `SOORMA_LLM_MODEL` (required), `SOORMA_LLM_BASE_URL` (else `OPENAI_BASE_URL`,
    /// else OpenAI's) and `SOORMA_LLM_API_KEY` (else `OPENAI_API_KEY`, else none). Empty values
    /// count as unset.
    ///
    /// ```
    /// use soorma::llm::{LlmConfig, LlmError};
    /// // SAFETY: doc tests run in their own process, single-threaded here.
    /// unsafe { std::env::remove_var("SOORMA_LLM_MODEL") };
    /// let err = LlmConfig::from_env().unwrap_err();
    /// assert!(matches!(err.downcast_ref::<LlmError>(), Some(LlmError::MissingEnv { var: "SOORMA_LLM_MODEL" })));
    ///
    /// unsafe {
    ///     std::env::set_var("SOORMA_LLM_MODEL", "qwen2.5");
    ///     std::env::set_var("SOORMA_LLM_BASE_URL", "http://127.0.0.1:8080/v1");
    /// }
    /// let config = LlmConfig::from_env().unwrap();
    /// assert_eq!((config.model.as_str(), config.base_url.as_str()), ("qwen2.5", "http://127.0.0.1:8080/v1"));
    /// ```
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any variable source.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let model = var(MODEL_ENV).ok_or(LlmError::MissingEnv { var: MODEL_ENV })?;
        let mut config = Self::new(model.trim());
        if let Some(url) = var(BASE_URL_ENV).or_else(|| var(OPENAI_BASE_URL_ENV)) {
            config = config.with_base_url(url.trim());
        }
        config.api_key = var(API_KEY_ENV).or_else(|| var(OPENAI_API_KEY_ENV));
        Ok(config)
    }

    /// Sets the API root (`https://host/v1`); a trailing `/` is dropped.
    ///
    /// ```
    /// let config = soorma::llm::LlmConfig::new("m").with_base_url("http://127.0.0.1:8000/v1/");
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
    /// let config = soorma::llm::LlmConfig::new("m").with_api_key("sk-test");
    /// assert_eq!(config.api_key.as_deref(), Some("sk-test"));
    /// assert!(!format!("{config:?}").contains("sk-test"));
    /// ```
    #[must_use]
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Sets the model.
    ///
    /// ```
    /// let config = soorma::llm::LlmConfig::new("a").with_model("b");
    /// assert_eq!(config.model, "b");
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the request timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::llm::LlmConfig::new("m").with_timeout(Duration::from_secs(5));
    /// assert_eq!(config.timeout, Duration::from_secs(5));
    /// ```
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets how many replies structured output asks for (at least 1).
    ///
    /// ```
    /// assert_eq!(soorma::llm::LlmConfig::new("m").with_max_attempts(0).max_attempts, 1);
    /// ```
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: usize) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Sets the sampling temperature.
    ///
    /// ```
    /// assert_eq!(soorma::llm::LlmConfig::new("m").with_temperature(0.0).temperature, Some(0.0));
    /// ```
    #[must_use]
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sends `response_format: {"type": "json_schema", ..}` with structured-output requests
    /// (for servers that support it, such as OpenAI's).
    ///
    /// ```
    /// let config = soorma::llm::LlmConfig::new("m").with_json_schema_response_format(true);
    /// assert!(config.json_schema_response_format);
    /// ```
    #[must_use]
    pub fn with_json_schema_response_format(mut self, enabled: bool) -> Self {
        self.json_schema_response_format = enabled;
        self
    }

    /// `{base_url}/chat/completions`.
    pub(crate) fn completions_url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
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
    fn model_is_required_and_named_in_the_error() {
        let err = LlmConfig::from_lookup(lookup(&[(API_KEY_ENV, "k")])).unwrap_err();
        assert!(matches!(
            err.downcast_ref::<LlmError>(),
            Some(LlmError::MissingEnv {
                var: "SOORMA_LLM_MODEL"
            })
        ));
        assert!(err.to_string().contains("SOORMA_LLM_MODEL"));
        // Blank counts as unset.
        let err = LlmConfig::from_lookup(lookup(&[(MODEL_ENV, "  ")])).unwrap_err();
        assert!(err.to_string().contains("SOORMA_LLM_MODEL"));
    }

    #[test]
    fn defaults_apply_when_only_the_model_is_set() {
        let config = LlmConfig::from_lookup(lookup(&[(MODEL_ENV, "gpt-4o-mini")])).unwrap();
        assert_eq!(config, LlmConfig::new("gpt-4o-mini"));
        assert_eq!(
            config.completions_url(),
            "https://api.openai.com/v1/chat/completions"
        );
    }

    #[test]
    fn soorma_variables_win_over_openai_fallbacks() {
        let both = [
            (MODEL_ENV, "m"),
            (BASE_URL_ENV, "http://soorma/v1/"),
            (OPENAI_BASE_URL_ENV, "http://openai/v1"),
            (API_KEY_ENV, "soorma-key"),
            (OPENAI_API_KEY_ENV, "openai-key"),
        ];
        let config = LlmConfig::from_lookup(lookup(&both)).unwrap();
        assert_eq!(config.base_url, "http://soorma/v1");
        assert_eq!(config.api_key.as_deref(), Some("soorma-key"));

        let fallbacks = [
            (MODEL_ENV, "m"),
            (BASE_URL_ENV, ""),
            (OPENAI_BASE_URL_ENV, "http://openai/v1"),
            (OPENAI_API_KEY_ENV, "openai-key"),
        ];
        let config = LlmConfig::from_lookup(lookup(&fallbacks)).unwrap();
        assert_eq!(config.base_url, "http://openai/v1");
        assert_eq!(config.api_key.as_deref(), Some("openai-key"));
    }

    #[test]
    fn debug_redacts_the_key() {
        let shown = format!("{:?}", LlmConfig::new("m").with_api_key("sk-secret"));
        assert!(!shown.contains("sk-secret"));
        assert!(shown.contains("<redacted>"));
    }
}
