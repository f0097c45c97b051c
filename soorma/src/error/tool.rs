//! [`ToolError`]: the convenient handler error, with a retry flag.

use std::fmt;

use super::Error;

/// A tool's failure, sent to the caller as `{success: false, error}`.
///
/// Any `E: Display` works as a handler error; `ToolError` is a convenient one.
///
/// ```
/// use soorma::ToolError;
/// let err = ToolError::new("division by zero");
/// assert_eq!(err.to_string(), "division by zero");
/// let from_str: ToolError = "bad input".into();
/// assert_eq!(from_str.message(), "bad input");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    retryable: bool,
}

impl ToolError {
    /// An error with a message.
    ///
    /// ```
    /// let err = soorma::ToolError::new("division by zero");
    /// assert!(!err.is_retryable());
    /// ```
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// Marks the error as transient: event and result handlers are redelivered.
    ///
    /// ```
    /// assert!(soorma::ToolError::new("busy").retryable().is_retryable());
    /// ```
    #[must_use]
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// The message.
    ///
    /// ```
    /// let err: soorma::ToolError = "bad input".into();
    /// assert_eq!(err.message(), "bad input");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether it is transient.
    ///
    /// ```
    /// use soorma::{Error, ToolError};
    /// assert!(!ToolError::new("bad input").is_retryable());
    /// // soorma's transient errors stay retryable when converted.
    /// assert!(ToolError::from(Error::Bus("connection lost".into())).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::new(message)
    }
}

impl From<Error> for ToolError {
    fn from(err: Error) -> Self {
        ToolError {
            retryable: err.is_retryable(),
            message: err.to_string(),
        }
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> Self {
        ToolError::new(err.to_string())
    }
}
