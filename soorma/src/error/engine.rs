//! [`EngineError`]: a failure of the platform underneath (connection, bus, state store,
//! registry), with a [kind](EngineErrorKind) to act on and the engine's own error as its
//! [`source`](std::error::Error::source).

use std::error::Error as StdError;
use std::fmt;

use super::{BoxError, retry};

/// What the engine was doing when it failed: the part of an [`EngineError`] to act on.
///
/// ```
/// use soorma::error::{EngineError, EngineErrorKind};
///
/// let err = EngineError::new(EngineErrorKind::Publish, "publish `order.placed`");
/// assert_eq!(err.kind(), EngineErrorKind::Publish);
/// assert_eq!(err.to_string(), "bus error: publish `order.placed`");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EngineErrorKind {
    /// Connecting to the platform's server failed (unreachable, refused, timed out).
    Connect,
    /// Publishing an event failed or the server did not acknowledge it. Whether it was stored
    /// is unknown; publishing it again is safe (events are de-duplicated by id).
    Publish,
    /// Subscribing failed: creating the stream, the consumer or the subscription.
    Subscribe,
    /// Settling a delivery failed: acknowledging it, asking for its redelivery, dead-lettering
    /// it or reporting progress. The platform redelivers an event that was not acknowledged.
    Ack,
    /// Reading a state record failed.
    StateRead,
    /// Writing a state record (create, update, put or delete) failed. Whether the write was
    /// applied is unknown.
    StateWrite,
    /// Listing the keys of a state bucket failed.
    StateList,
    /// Stored records disagree: a record that another one refers to is missing or incomplete
    /// (e.g. deleted or not yet written by a concurrent handler).
    Inconsistent,
    /// Registering, deregistering or listing agents in the registry failed.
    Registry,
}

impl EngineErrorKind {
    /// Which part of the platform failed, for messages.
    fn area(self) -> &'static str {
        match self {
            EngineErrorKind::Connect => "connection",
            EngineErrorKind::Publish | EngineErrorKind::Subscribe | EngineErrorKind::Ack => "bus",
            EngineErrorKind::StateRead
            | EngineErrorKind::StateWrite
            | EngineErrorKind::StateList
            | EngineErrorKind::Inconsistent => "state store",
            EngineErrorKind::Registry => "registry",
        }
    }

    /// Whether an error of this kind may pass when retried, when neither the engine nor the
    /// error's source knows better.
    fn transient(self) -> bool {
        match self {
            // The server briefly away, a leader election, a write racing another: all of them
            // may pass on their own.
            EngineErrorKind::Connect
            | EngineErrorKind::Publish
            | EngineErrorKind::Subscribe
            | EngineErrorKind::Ack
            | EngineErrorKind::StateRead
            | EngineErrorKind::StateWrite
            | EngineErrorKind::StateList
            | EngineErrorKind::Inconsistent
            | EngineErrorKind::Registry => true,
        }
    }
}

impl fmt::Display for EngineErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineErrorKind::Connect => "connect",
            EngineErrorKind::Publish => "publish",
            EngineErrorKind::Subscribe => "subscribe",
            EngineErrorKind::Ack => "acknowledge",
            EngineErrorKind::StateRead => "state read",
            EngineErrorKind::StateWrite => "state write",
            EngineErrorKind::StateList => "state listing",
            EngineErrorKind::Inconsistent => "inconsistent state",
            EngineErrorKind::Registry => "registry",
        })
    }
}

/// A failure of the engine (the embedded one, NATS, or yours): what it was doing
/// ([`kind`](Self::kind)), on what (the message), and the engine's own error
/// ([`source`](StdError::source)); carried by [`Error::Engine`](super::Error::Engine).
///
/// Retryable unless the engine said otherwise ([`with_retryable`](Self::with_retryable)) or an
/// error in its source chain knows better (an I/O error that is not transient, say).
///
/// ```
/// use std::error::Error as _;
/// use soorma::error::{EngineError, EngineErrorKind};
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let err = EngineError::new(EngineErrorKind::Connect, "cannot connect to 127.0.0.1:4222")
///     .with_source(refused);
/// assert_eq!(
///     err.to_string(),
///     "connection error: cannot connect to 127.0.0.1:4222: connection refused"
/// );
/// assert!(err.is_retryable());
/// assert!(err.source().unwrap().downcast_ref::<std::io::Error>().is_some());
/// ```
#[derive(Debug)]
pub struct EngineError {
    kind: EngineErrorKind,
    what: String,
    source: Option<BoxError>,
    retryable: Option<bool>,
}

impl EngineError {
    /// An error of `kind`; `what` says what failed (`publish \`order.placed\``, a key).
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let err = EngineError::new(EngineErrorKind::StateRead, "read `tasks/acme/t-1`");
    /// assert_eq!(err.to_string(), "state store error: read `tasks/acme/t-1`");
    /// ```
    pub fn new(kind: EngineErrorKind, what: impl Into<String>) -> Self {
        Self {
            kind,
            what: what.into(),
            source: None,
            retryable: None,
        }
    }

    /// Attaches the underlying error (the engine's own); its message is appended to this one's.
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let err = EngineError::new(EngineErrorKind::Registry, "register").with_source("bucket gone");
    /// assert_eq!(err.to_string(), "registry error: register: bucket gone");
    /// ```
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Says whether retrying may succeed, overriding what the kind and the source suggest (an
    /// engine that knows its error is permanent, such as a message over the server's size
    /// limit).
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let err = EngineError::new(EngineErrorKind::Publish, "publish").with_retryable(false);
    /// assert!(!err.is_retryable());
    /// ```
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// What the engine was doing.
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let err = EngineError::new(EngineErrorKind::Ack, "ack");
    /// assert_eq!(err.kind(), EngineErrorKind::Ack);
    /// ```
    pub fn kind(&self) -> EngineErrorKind {
        self.kind
    }

    /// Whether retrying may succeed: what the engine said; else what the first error in the
    /// source chain that knows says (see [`is_retryable`](super::is_retryable)); else the
    /// kind's default (every current kind is transient).
    ///
    /// ```
    /// use soorma::error::{EngineError, EngineErrorKind};
    /// let lost = EngineError::new(EngineErrorKind::StateWrite, "write `k`");
    /// assert!(lost.is_retryable());
    /// let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    /// assert!(!lost.with_source(denied).is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        self.retryable
            .or_else(|| {
                self.source
                    .as_deref()
                    .and_then(|s| retry::decides(s as &(dyn StdError + 'static)))
            })
            .unwrap_or_else(|| self.kind.transient())
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} error: {}", self.kind.area(), self.what)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl StdError for EngineError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn the_engine_then_the_source_then_the_kind_decide_retryability() {
        let kind_default = EngineError::new(EngineErrorKind::Publish, "publish");
        assert!(kind_default.is_retryable());
        let permanent_source = EngineError::new(EngineErrorKind::StateWrite, "write")
            .with_source(Error::InvalidArgument("bad key".into()));
        assert!(!permanent_source.is_retryable());
        let transient_source = EngineError::new(EngineErrorKind::StateWrite, "write")
            .with_source(Error::Conflict { key: "k".into() });
        assert!(transient_source.is_retryable());
        let overridden = EngineError::new(EngineErrorKind::Publish, "publish")
            .with_source(std::io::Error::from(std::io::ErrorKind::TimedOut))
            .with_retryable(false);
        assert!(!overridden.is_retryable());
        // A source that says nothing about retrying leaves it to the kind.
        let opaque = EngineError::new(EngineErrorKind::Subscribe, "subscribe").with_source("nope");
        assert!(opaque.is_retryable());
    }

    #[test]
    fn the_source_is_kept_not_flattened() {
        let err = Error::from(
            EngineError::new(EngineErrorKind::Connect, "connect")
                .with_source(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        );
        let Error::Engine(engine) = &err else {
            panic!("not an engine error: {err:?}")
        };
        assert_eq!(engine.kind(), EngineErrorKind::Connect);
        // `Error::Engine` is transparent: its source is the engine's error.
        let source = StdError::source(&err).expect("a source");
        assert_eq!(
            source.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert!(err.is_retryable());
    }
}
