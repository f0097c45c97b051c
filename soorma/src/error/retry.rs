//! Whether an error is worth retrying, decided by the errors in its `source()` chain.

use std::error::Error as StdError;
use std::io;

use super::tool::BoxedToolError;
use super::{EngineError, Error};

/// Whether retrying may succeed: the first error in `error`'s [`source`](StdError::source)
/// chain that knows (a soorma [`Error`], an [`EngineError`], a boxed
/// [`ToolError`](super::ToolError), an I/O error) decides; an error chain with none of those
/// is not retryable.
///
/// So a handler error that wraps a bus failure is retried like the bus failure itself.
///
/// ```
/// use soorma::error::{EngineError, EngineErrorKind};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("could not save the report")]
/// struct SaveFailed(#[source] soorma::Error);
///
/// let lost = EngineError::new(EngineErrorKind::StateWrite, "write `reports/acme/r-1`");
/// assert!(soorma::error::is_retryable(&SaveFailed(lost.into())));
/// let bad = SaveFailed(soorma::Error::InvalidArgument("no title".into()));
/// assert!(!soorma::error::is_retryable(&bad));
/// ```
pub fn is_retryable(error: &(dyn StdError + 'static)) -> bool {
    decides(error).unwrap_or(false)
}

/// What the first error in the chain that knows says about retrying; `None` when none knows.
pub(super) fn decides(error: &(dyn StdError + 'static)) -> Option<bool> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(e) = e.downcast_ref::<Error>() {
            return Some(e.is_retryable());
        }
        if let Some(e) = e.downcast_ref::<EngineError>() {
            return Some(e.is_retryable());
        }
        if let Some(e) = e.downcast_ref::<BoxedToolError>() {
            return Some(e.is_retryable());
        }
        if let Some(e) = e.downcast_ref::<io::Error>() {
            return Some(io_is_transient(e));
        }
        current = e.source();
    }
    None
}

/// I/O failures that may pass on their own (a peer or the network briefly away).
pub(super) fn io_is_transient(e: &io::Error) -> bool {
    use io::ErrorKind::{
        BrokenPipe, ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted,
        NotConnected, TimedOut, WouldBlock,
    };
    matches!(
        e.kind(),
        TimedOut
            | ConnectionReset
            | ConnectionAborted
            | ConnectionRefused
            | Interrupted
            | WouldBlock
            | BrokenPipe
            | NotConnected
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{EngineErrorKind, ToolError};

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Box<dyn StdError + Send + Sync>);

    #[test]
    fn the_first_error_that_knows_decides() {
        let transient = Outer(Box::new(Error::Conflict { key: "k".into() }));
        assert!(is_retryable(&transient));
        let tool = Outer(ToolError::new("busy").retryable().into());
        assert!(is_retryable(&tool));
        let io = Outer(Box::new(io::Error::from(io::ErrorKind::TimedOut)));
        assert!(is_retryable(&io));
        let permanent = Outer(Box::new(io::Error::from(io::ErrorKind::NotFound)));
        assert!(!is_retryable(&permanent));
        assert!(!is_retryable(&std::fmt::Error));
    }

    #[test]
    fn boxed_errors_keep_their_retryability() {
        let down = EngineError::new(EngineErrorKind::Publish, "publish");
        let boxed = Error::other(Outer(Box::new(down)));
        assert!(boxed.is_retryable());
        assert!(is_retryable(&Outer(Box::new(boxed))));
    }
}
