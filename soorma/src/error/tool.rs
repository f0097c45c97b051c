//! [`ToolError`]: the convenient handler error; converts from any error and has a retry flag.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use super::{Error, retry};

/// A handler's failure, sent to a tool's caller as `{success: false, error}`: a message, the
/// error it came from (if any), and whether retrying may succeed.
///
/// `?` converts any error into it, keeping the error as its [`source`](Self::source) and its
/// retryability (see [`is_retryable`](super::is_retryable)): a transient soorma [`Error`] or
/// I/O error stays transient. For a message, use [`ToolError::new`].
///
/// Like `anyhow::Error`, `ToolError` does not implement [`std::error::Error`] itself: that is
/// what lets it convert from every error type (a blanket `From<E: Error>` would otherwise
/// overlap with `From<ToolError> for ToolError`). Where an error type is needed,
/// `Box<dyn Error + Send + Sync>` converts from it (still retryable when it was).
///
/// Any error that converts into `Box<dyn Error + Send + Sync>` works as a handler error;
/// `ToolError` is a convenient one.
///
/// ```
/// use soorma::prelude::*;
///
/// #[on_invoke("setting.read", agent = "settings")]
/// async fn read(req: Invocation<String>) -> Result<serde_json::Value, ToolError> {
///     let text = std::fs::read_to_string("settings.json")?; // io::Error → ToolError
///     let settings: serde_json::Value = serde_json::from_str(&text)?; // serde_json::Error too
///     settings
///         .get(&req.data)
///         .cloned()
///         .ok_or_else(|| ToolError::new(format_args!("no setting `{}`", req.data)))
/// }
///
/// let err = ToolError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
/// assert!(err.is_retryable());
/// assert!(err.source().is_some_and(|e| e.is::<std::io::Error>()));
/// ```
#[derive(Debug, Clone)]
pub struct ToolError {
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync>>,
    retryable: bool,
}

impl ToolError {
    /// An error with a message (not retryable).
    ///
    /// ```
    /// let err = soorma::ToolError::new("division by zero");
    /// assert_eq!(err.to_string(), "division by zero");
    /// assert!(!err.is_retryable());
    /// let n = 3;
    /// assert_eq!(soorma::ToolError::new(format_args!("{n} is odd")).message(), "3 is odd");
    /// ```
    pub fn new(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            source: None,
            retryable: false,
        }
    }

    /// Marks the error as transient: event, task and result handlers are redelivered.
    ///
    /// ```
    /// assert!(soorma::ToolError::new("busy").retryable().is_retryable());
    /// ```
    #[must_use]
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// The message (the reply's `error`).
    ///
    /// ```
    /// let err = soorma::ToolError::new("bad input");
    /// assert_eq!(err.message(), "bad input");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether it is transient: set with [`retryable`](Self::retryable), or kept from the
    /// error it was converted from.
    ///
    /// ```
    /// use soorma::{Error, ToolError};
    /// assert!(!ToolError::new("bad input").is_retryable());
    /// // soorma's transient errors stay retryable when converted.
    /// assert!(ToolError::from(Error::Conflict { key: "k".into() }).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The error it was converted from, if any.
    ///
    /// ```
    /// use soorma::ToolError;
    /// let err = ToolError::from(serde_json::from_str::<u32>("x").unwrap_err());
    /// assert!(err.source().is_some_and(|e| e.is::<serde_json::Error>()));
    /// assert!(ToolError::new("plain").source().is_none());
    /// ```
    pub fn source(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error, with its message, kept as the source; retryable when its chain says so (so
/// `From<soorma::Error>` keeps the error's retryability).
impl<E> From<E> for ToolError
where
    E: StdError + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        Self {
            message: error.to_string(),
            retryable: retry::is_retryable(&error),
            source: Some(Arc::new(error)),
        }
    }
}

/// A `ToolError` as a standard error: its message, its source, and its retry flag for
/// [`is_retryable`](super::is_retryable).
///
/// ```
/// use soorma::ToolError;
/// let boxed: Box<dyn std::error::Error + Send + Sync> = ToolError::new("busy").retryable().into();
/// assert_eq!(boxed.to_string(), "busy");
/// assert!(soorma::error::is_retryable(&*boxed));
/// ```
impl From<ToolError> for Box<dyn StdError + Send + Sync + 'static> {
    fn from(error: ToolError) -> Self {
        Box::new(BoxedToolError(error))
    }
}

/// A `ToolError` as a standard error (see the `Send + Sync` conversion).
///
/// ```
/// let boxed: Box<dyn std::error::Error> = soorma::ToolError::new("busy").into();
/// assert_eq!(boxed.to_string(), "busy");
/// ```
impl From<ToolError> for Box<dyn StdError + 'static> {
    fn from(error: ToolError) -> Self {
        Box::new(BoxedToolError(error))
    }
}

/// A `ToolError` in a soorma [`Error`] ([`Error::Other`]), as retryable as it was.
///
/// ```
/// fn save() -> soorma::Result<()> {
///     Err(soorma::ToolError::new("the index is rebuilding").retryable())?
/// }
/// let err = save().unwrap_err();
/// assert_eq!(err.to_string(), "the index is rebuilding");
/// assert!(err.is_retryable());
/// ```
impl From<ToolError> for Error {
    fn from(error: ToolError) -> Self {
        Error::other(error)
    }
}

/// The standard-error face of a [`ToolError`]; the retry walker recognises it.
#[derive(Debug)]
pub(super) struct BoxedToolError(ToolError);

impl BoxedToolError {
    pub(super) fn is_retryable(&self) -> bool {
        self.0.retryable
    }
}

impl fmt::Display for BoxedToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for BoxedToolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{EngineError, EngineErrorKind, is_retryable};

    #[derive(Debug, thiserror::Error)]
    #[error("could not save")]
    struct SaveFailed(#[source] Error);

    #[test]
    fn converted_errors_keep_their_source_and_retryability() {
        let lost = SaveFailed(EngineError::new(EngineErrorKind::StateWrite, "write").into());
        let err = ToolError::from(lost);
        assert_eq!(err.message(), "could not save");
        assert!(err.is_retryable());
        assert!(err.source().is_some_and(|e| e.is::<SaveFailed>()));
        let bad = ToolError::from(SaveFailed(Error::InvalidArgument("x".into())));
        assert!(!bad.is_retryable());
    }

    #[test]
    fn boxing_keeps_the_retry_flag_and_the_source() {
        let boxed: Box<dyn StdError + Send + Sync> = ToolError::new("busy").retryable().into();
        assert!(is_retryable(&*boxed));
        let boxed: Box<dyn StdError + Send + Sync> = ToolError::new("bad").into();
        assert!(!is_retryable(&*boxed));
        let io = ToolError::from(std::io::Error::from(std::io::ErrorKind::NotFound));
        let boxed: Box<dyn StdError + Send + Sync> = io.into();
        assert!(boxed.source().is_some_and(|e| e.is::<std::io::Error>()));
        // Back into a soorma error and into a ToolError again: still transient.
        let again = ToolError::from(Error::from(ToolError::new("busy").retryable()));
        assert!(again.is_retryable());
    }
}
