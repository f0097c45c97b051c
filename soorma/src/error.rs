//! The SDK's error type.

use std::time::Duration;

/// Errors returned by soorma.
///
/// ```
/// let err = soorma::Error::InvalidArgument("response_event must not be empty".into());
/// assert!(err.to_string().contains("response_event"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event's payload did not match the handler's payload type.
    #[error("invalid payload for event `{event}`: expected `{type_name}`; at `{path}`: {message}")]
    InvalidPayload {
        /// The event type.
        event: String,
        /// The Rust type the handler expects.
        type_name: &'static str,
        /// The serde path of the problem (`.` for the root).
        path: String,
        /// What serde reported.
        message: String,
    },
    /// A request's payload does not match the payload schema its consumer registered; nothing
    /// was published.
    #[error(
        "`{event}` payload does not match the schema its consumer registered:\n  - {}",
        violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  - ")
    )]
    SchemaViolation {
        /// The requested event.
        event: String,
        /// Every violation found.
        violations: Vec<SchemaViolation>,
    },
    /// A call was made with an argument the SDK cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A value could not be serialized to JSON.
    #[error("could not serialize {what}: {source}")]
    Serialize {
        /// What was being serialized.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored record could not be decoded.
    #[error("could not decode stored {what} `{key}`: {source}")]
    CorruptState {
        /// The record kind.
        what: &'static str,
        /// The key.
        key: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A revision-checked update lost to a concurrent writer (after retries).
    #[error("revision conflict on `{key}`")]
    Conflict {
        /// The contended key.
        key: String,
    },
    /// The state store failed.
    #[error("state store error: {0}")]
    State(String),
    /// The bus failed.
    #[error("bus error: {0}")]
    Bus(String),
    /// The registry failed.
    #[error("registry error: {0}")]
    Registry(String),
    /// An agent was started with no handlers.
    #[error(
        "agent `{agent}` has no handlers: annotate async fns with #[on_invoke]/#[on_task]/#[on_result]/#[on_event] \
         (with `agent = \"{agent}\"` when several agents share a binary) or register them with the builder"
    )]
    NoHandlers {
        /// The agent's name.
        agent: String,
    },
    /// An agent's handlers or configuration are inconsistent.
    #[error("agent `{agent}` is misconfigured:\n  - {}", problems.join("\n  - "))]
    Misconfigured {
        /// The agent's name.
        agent: String,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// The platform configuration (environment) is invalid.
    #[error("configuration error: {0}")]
    Config(String),
    /// Waiting for something took too long.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// How long we waited.
        after: Duration,
        /// What we waited for.
        what: String,
    },
    /// A plan definition is invalid; every problem is listed.
    #[error("plan `{plan_type}` is invalid:\n  - {}", problems.join("\n  - "))]
    InvalidPlan {
        /// The plan type.
        plan_type: String,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// No plan with that id is stored.
    #[error("plan `{0}` not found")]
    PlanNotFound(String),
    /// No task with that id is stored.
    #[error("task `{0}` not found")]
    TaskNotFound(String),
    /// A result arrived for a sub-task no stored task delegated.
    #[error("no parent task is recorded for sub-task `{0}`")]
    UnknownSubTask(String),
    /// A request was answered with an error reply.
    #[error("`{event}` failed: {message}")]
    Remote {
        /// The reply event.
        event: String,
        /// The error in the reply.
        message: String,
    },
    /// A handler reported an error.
    #[error("{0}")]
    Handler(String),
    /// The platform or client has shut down.
    #[error("the platform is shut down")]
    Closed,
    /// The LLM client failed (feature `llm`).
    ///
    /// ```
    /// use soorma::llm::LlmError;
    /// let err = soorma::Error::from(LlmError::MissingEnv { var: "SOORMA_LLM_MODEL" });
    /// assert_eq!(err.to_string(), "environment variable `SOORMA_LLM_MODEL` is required but not set");
    /// ```
    #[cfg(feature = "llm")]
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// LLM planning rejected what a model proposed: an unknown request event, a payload its
    /// schema rejects, or no acceptable proposal within the attempts (feature `llm`).
    ///
    /// ```
    /// use soorma::planner::llm::PlanningError;
    /// let err = soorma::Error::from(PlanningError::InvalidAction("`fail` needs an `error`".into()));
    /// assert!(matches!(err, soorma::Error::Planning(_)));
    /// ```
    #[cfg(feature = "llm")]
    #[error(transparent)]
    Planning(#[from] crate::planner::llm::PlanningError),
}

impl Error {
    /// Whether retrying the same operation later may succeed (for `Error::Llm`, as
    /// `LlmError::is_retryable` says: HTTP 408/429/5xx, timeouts, transport errors).
    ///
    /// ```
    /// use soorma::Error;
    /// assert!(Error::Conflict { key: "k".into() }.is_retryable());
    /// assert!(!Error::InvalidArgument("x".into()).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Conflict { .. }
            | Error::State(_)
            | Error::Bus(_)
            | Error::Registry(_)
            | Error::Timeout { .. } => true,
            #[cfg(feature = "llm")]
            Error::Llm(e) => e.is_retryable(),
            _ => false,
        }
    }

    pub(crate) fn serialize(what: &'static str, source: serde_json::Error) -> Self {
        Error::Serialize { what, source }
    }
}

/// One way a payload breaks its schema: where, and what is wrong.
///
/// ```
/// let v = soorma::SchemaViolation::new("/amount", "\"ten\" is not of type \"number\"");
/// assert_eq!(v.to_string(), "at `/amount`: \"ten\" is not of type \"number\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaViolation {
    /// JSON Pointer to the offending value in the payload (`""`: the payload itself).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl SchemaViolation {
    /// A violation at `path` (a JSON Pointer).
    ///
    /// ```
    /// let v = soorma::SchemaViolation::new("", "\"a\" is a required property");
    /// assert_eq!(v.path, "");
    /// ```
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SchemaViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at `{path}`: {}", self.message)
    }
}

/// `Result` with soorma's [`Error`] as the default error.
///
/// ```
/// fn f() -> soorma::Result<u8> { Ok(1) }
/// assert_eq!(f().unwrap(), 1);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
