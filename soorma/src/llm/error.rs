//! The LLM client's error type.

use std::time::Duration;

/// One failed structured-output attempt: the model's raw reply and why it was rejected.
///
/// ```
/// use soorma::llm::{ChatMessage, ChatModelExt, LlmError, ScriptedLlm};
///
/// #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
/// struct Answer { value: u32 }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let model = ScriptedLlm::new(["no idea", "still no idea", "{\"value\": \"x\"}"]);
/// let err = model.structured::<Answer>(&[ChatMessage::user("6*7?")]).await.unwrap_err();
/// let Some(LlmError::StructuredOutput { attempts, .. }) = err.downcast_ref::<LlmError>() else { panic!() };
/// assert_eq!(attempts.len(), 3);
/// assert_eq!(attempts[0].reply, "no idea");
/// assert!(attempts[2].error.contains("value"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The model's reply, verbatim.
    pub reply: String,
    /// Why the reply was rejected (also what the model was told before the next attempt).
    pub error: String,
}

/// Errors of the LLM client. As a [`soorma::Error`](crate::Error) they are boxed in
/// [`Error::Other`](crate::Error::Other), retryable as [`LlmError::is_retryable`] says; get
/// them back with [`Error::downcast_ref`](crate::Error::downcast_ref).
///
/// ```
/// use soorma::llm::LlmError;
/// let err = LlmError::Http { url: "http://x/v1/chat/completions".into(), status: 503, body: "busy".into() };
/// assert!(err.is_retryable());
/// assert!(err.to_string().contains("503"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// A required environment variable is unset (or empty).
    #[error("environment variable `{var}` is required but not set")]
    MissingEnv {
        /// The variable's name.
        var: &'static str,
    },
    /// The configuration cannot be used (bad base URL, no TLS roots, ...).
    #[error("invalid LLM configuration: {0}")]
    Config(String),
    /// The request could not be sent or the response could not be read (connection refused,
    /// reset, DNS, TLS).
    #[error("cannot reach the LLM at {url}: {message}")]
    Transport {
        /// The request URL.
        url: String,
        /// The underlying error chain.
        message: String,
    },
    /// No response (or, while streaming, no next chunk) within the configured timeout.
    #[error("the LLM at {url} did not answer within {after:?}")]
    Timeout {
        /// The request URL.
        url: String,
        /// The configured timeout.
        after: Duration,
    },
    /// The server answered with a non-2xx status.
    #[error("the LLM at {url} answered HTTP {status}: {body}")]
    Http {
        /// The request URL.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// A 2xx response that is not a chat completion (or completion chunk) this client understands.
    #[error("malformed completion from {url}: {message}")]
    Malformed {
        /// The request URL.
        url: String,
        /// What was wrong, with the start of the body.
        message: String,
    },
    /// The server reported an error inside a 2xx response (for example mid-stream).
    #[error("the LLM at {url} reported an error: {message}")]
    Provider {
        /// The request URL.
        url: String,
        /// The provider's error message.
        message: String,
    },
    /// No reply validated as the requested type within the configured number of attempts.
    #[error(
        "no valid `{type_name}` from the model after {} attempt(s); last error: {}",
        attempts.len(),
        attempts.last().map_or("none", |a| a.error.as_str())
    )]
    StructuredOutput {
        /// The requested Rust type.
        type_name: &'static str,
        /// Every attempt, in order.
        attempts: Vec<Attempt>,
    },
    /// A [`ScriptedLlm`](super::ScriptedLlm) received more requests than it had replies for.
    #[error("the scripted model has no reply for request #{request}")]
    ScriptExhausted {
        /// The 1-based number of the request that found the script empty.
        request: usize,
    },
}

impl LlmError {
    /// Whether the same request may succeed later: HTTP 408/429/5xx, timeouts, transport and
    /// provider errors.
    ///
    /// ```
    /// use soorma::llm::LlmError;
    /// let http = |status| LlmError::Http { url: "u".into(), status, body: String::new() };
    /// assert!(http(429).is_retryable() && http(500).is_retryable());
    /// assert!(!http(400).is_retryable() && !http(401).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => matches!(status, 408 | 429 | 500..=599),
            LlmError::Timeout { .. } | LlmError::Transport { .. } | LlmError::Provider { .. } => {
                true
            }
            _ => false,
        }
    }
}

impl From<LlmError> for crate::error::Error {
    /// ```
    /// use soorma::llm::LlmError;
    /// let err = soorma::Error::from(LlmError::MissingEnv { var: "SOORMA_LLM_MODEL" });
    /// assert!(matches!(err.downcast_ref::<LlmError>(), Some(LlmError::MissingEnv { .. })));
    /// assert_eq!(err.to_string(), "environment variable `SOORMA_LLM_MODEL` is required but not set");
    /// ```
    fn from(error: LlmError) -> Self {
        let retryable = error.is_retryable();
        crate::error::Error::other_with_retry(error, retryable)
    }
}
