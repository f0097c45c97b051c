//! The SDK's errors: [`Error`], the engine's [`EngineError`], the handler error [`ToolError`],
//! and [`is_retryable`], which walks an error's `source()` chain to decide whether retrying
//! may succeed.

mod engine;
mod retry;
mod tool;

pub use engine::{EngineError, EngineErrorKind};
pub use retry::is_retryable;
pub use tool::ToolError;

/// A boxed error, as [`Error::other`] takes it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

use std::time::Duration;

/// Errors returned by soorma.
///
/// `?` converts into it from I/O and JSON errors, [`ToolError`] and the feature modules'
/// errors (LLM, planning, MCP); [`Error::other`] boxes any other error, and
/// [`Error::downcast_ref`] gets it back.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Settings {
///     name: String,
/// }
///
/// fn load(path: &std::path::Path) -> soorma::Result<Settings> {
///     let text = std::fs::read_to_string(path)?; // std::io::Error
///     Ok(serde_json::from_str(&text)?) // serde_json::Error
/// }
///
/// let dir = std::env::temp_dir();
/// let path = dir.join(format!("soorma-settings-{}.json", std::process::id()));
/// assert!(matches!(load(&path), Err(soorma::Error::Io(_))));
/// std::fs::write(&path, "{").unwrap();
/// assert!(matches!(load(&path), Err(soorma::Error::Json(_))));
/// std::fs::write(&path, r#"{"name": "calculator"}"#).unwrap();
/// assert_eq!(load(&path).unwrap().name, "calculator");
/// # std::fs::remove_file(&path).unwrap();
///
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
    /// The engine failed: the connection, the bus, the state store or the registry.
    /// [`EngineError::kind`] says what it was doing; its [`source`](std::error::Error::source)
    /// is the engine's own error (an `async_nats` error, say).
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    ///
    /// let err = soorma::Error::from(EngineError::new(EngineErrorKind::Publish, "publish"));
    /// match &err {
    ///     soorma::Error::Engine(e) if e.kind() == EngineErrorKind::Publish => {}
    ///     other => panic!("{other}"),
    /// }
    /// assert!(err.is_retryable());
    /// ```
    #[error(transparent)]
    Engine(#[from] EngineError),
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
    /// A result arrived for a sub-task with an event that is not the sub-task's reply event.
    #[error("sub-task `{sub_task}` replies with `{expected}`, not `{event}`")]
    UnexpectedReply {
        /// The sub-task (the result's correlation id).
        sub_task: String,
        /// The result's event type.
        event: String,
        /// The reply event the sub-task was delegated with.
        expected: String,
    },
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
    /// No registered agent consumes the requested event, so nothing would ever answer it.
    ///
    /// ```
    /// let err = soorma::Error::NoConsumer { event: "calculate.requested".into() };
    /// assert_eq!(err.to_string(), "no agent consumes `calculate.requested`");
    /// ```
    #[error("no agent consumes `{event}`")]
    NoConsumer {
        /// The requested event.
        event: String,
    },
    /// An I/O error.
    ///
    /// ```
    /// fn read() -> soorma::Result<String> {
    ///     Ok(std::fs::read_to_string("/definitely/not/here")?)
    /// }
    /// assert!(matches!(read(), Err(soorma::Error::Io(_))));
    /// ```
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A JSON error outside of the SDK's own encoding (e.g. decoding a value in a handler).
    ///
    /// ```
    /// fn parse(s: &str) -> soorma::Result<u32> {
    ///     Ok(serde_json::from_str(s)?)
    /// }
    /// assert!(matches!(parse("x"), Err(soorma::Error::Json(_))));
    /// ```
    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),
    /// Any other error: from the LLM client, LLM planning, MCP, or your own code
    /// ([`Error::other`]). [`Error::downcast_ref`] gets the original back.
    ///
    /// ```
    /// let err = soorma::Error::other(std::fmt::Error);
    /// assert!(err.downcast_ref::<std::fmt::Error>().is_some());
    /// ```
    #[error("{source}")]
    Other {
        /// The error.
        source: BoxError,
        /// Whether retrying may succeed (decided when the error was boxed).
        retryable: bool,
    },
}

impl Error {
    /// Whether retrying the same operation later may succeed: the platform briefly unreachable
    /// (see [`EngineError::is_retryable`]), a lost revision race, a timeout, a transient I/O
    /// error; for [`Error::Other`], what was decided when it was boxed (see [`is_retryable`]).
    ///
    /// ```
    /// use soorma::Error;
    /// assert!(Error::Conflict { key: "k".into() }.is_retryable());
    /// assert!(!Error::InvalidArgument("x".into()).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Conflict { .. } | Error::Timeout { .. } => true,
            Error::Engine(e) => e.is_retryable(),
            Error::Io(e) => retry::io_is_transient(e),
            Error::Other { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// Boxes any error; it is retryable when an error in its [`source`](std::error::Error::source)
    /// chain says so (see [`is_retryable`]).
    ///
    /// ```
    /// #[derive(Debug, thiserror::Error)]
    /// #[error("the index is rebuilding")]
    /// struct Rebuilding;
    ///
    /// let err = soorma::Error::other(Rebuilding);
    /// assert_eq!(err.to_string(), "the index is rebuilding");
    /// assert!(!err.is_retryable());
    /// ```
    pub fn other(error: impl Into<BoxError>) -> Self {
        let source = error.into();
        let retryable = is_retryable(&*source);
        Error::Other { source, retryable }
    }

    /// Boxes an error whose retryability the caller knows.
    ///
    /// ```
    /// let err = soorma::Error::other_with_retry(std::fmt::Error, true);
    /// assert!(err.is_retryable());
    /// ```
    pub fn other_with_retry(error: impl Into<BoxError>, retryable: bool) -> Self {
        Error::Other {
            source: error.into(),
            retryable,
        }
    }

    /// The boxed error of an [`Error::Other`], if it is an `E`.
    ///
    /// ```
    /// let err = soorma::Error::other(std::fmt::Error);
    /// assert!(err.downcast_ref::<std::fmt::Error>().is_some());
    /// assert!(soorma::Error::Closed.downcast_ref::<std::fmt::Error>().is_none());
    /// ```
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Other { source, .. } => source.downcast_ref(),
            _ => None,
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
