//! The NATS platform: JetStream streams for events, JetStream KV for state and the registry.
//!
//! Selected by [`Platform::from_env`](crate::Platform::from_env) when `SOORMA_NATS_URL` is set,
//! or built explicitly with `soorma::nats::connect`. See `docs/nats.md` for subjects, streams, consumers,
//! buckets and the delivery guarantees.
//!
//! ```no_run
//! # async fn demo() -> soorma::Result<()> {
//! use soorma::nats::{NatsAuth, NatsConfig};
//! let config = NatsConfig::new("nats://127.0.0.1:4222").with_auth(NatsAuth::Token("s3cret".into()));
//! let platform = soorma::nats::connect(config).await?;
//! assert_eq!(platform.kind(), "nats");
//! # Ok(()) }
//! ```

mod bus;
pub(crate) mod names;
mod registry;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use async_nats;
pub use bus::{DEAD_LETTER_REASON_HEADER, DEAD_LETTER_TRUNCATED_HEADER, NatsBus};
pub use registry::NatsRegistry;
pub use state::NatsStore;

use super::{EngineParts, Native};
use crate::error::{BoxError, EngineError, EngineErrorKind, Error, Result};

/// How to authenticate to the NATS server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum NatsAuth {
    /// No credentials.
    #[default]
    None,
    /// A token (`SOORMA_NATS_TOKEN`).
    Token(String),
    /// User and password (`SOORMA_NATS_USER`, `SOORMA_NATS_PASSWORD`).
    UserPassword {
        /// User.
        user: String,
        /// Password.
        password: String,
    },
    /// A `.creds` file (`SOORMA_NATS_CREDS`).
    CredsFile(PathBuf),
}

/// NATS platform settings.
///
/// ```
/// use std::time::Duration;
/// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
///     .with_ack_wait(Duration::from_secs(10))
///     .with_replicas(3);
/// assert_eq!(config.replicas, 3);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NatsConfig {
    /// Server URL(s), comma-separated.
    pub url: String,
    /// Credentials.
    pub auth: NatsAuth,
    /// First subject token (`soorma`).
    pub subject_prefix: String,
    /// Stream name prefix (`SOORMA`).
    pub stream_prefix: String,
    /// KV bucket name prefix (`soorma`).
    pub bucket_prefix: String,
    /// How long streams keep events (default 24 h).
    pub event_max_age: Duration,
    /// How long a delivery may stay unacknowledged before redelivery (default 30 s).
    pub ack_wait: Duration,
    /// Stream / bucket replicas (1 for a single server; 3 on a cluster).
    pub replicas: usize,
    /// Unacknowledged deliveries per consumer (default 4096).
    pub max_ack_pending: i64,
    /// How long a registry entry lives without a heartbeat (default 30 s).
    pub registry_ttl: Duration,
    /// How often running agents refresh their registry entry (default 10 s).
    pub heartbeat: Duration,
}

impl NatsConfig {
    /// Defaults for a server at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: NatsAuth::None,
            subject_prefix: "soorma".into(),
            stream_prefix: "SOORMA".into(),
            bucket_prefix: "soorma".into(),
            event_max_age: Duration::from_secs(24 * 3600),
            ack_wait: Duration::from_secs(30),
            replicas: 1,
            max_ack_pending: 4096,
            registry_ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
        }
    }

    /// Reads `SOORMA_NATS_URL` and the credentials (`SOORMA_NATS_TOKEN`, or `SOORMA_NATS_USER` +
    /// `SOORMA_NATS_PASSWORD`, or `SOORMA_NATS_CREDS`); `None` when the URL is unset.
    ///
    /// ```
    /// # unsafe { std::env::remove_var("SOORMA_NATS_URL"); }
    /// assert!(soorma::nats::NatsConfig::from_env().unwrap().is_none());
    /// ```
    pub fn from_env() -> Result<Option<Self>> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let Some(url) = var(super::NATS_URL_ENV) else {
            return Ok(None);
        };
        let token = var("SOORMA_NATS_TOKEN");
        let user = var("SOORMA_NATS_USER");
        let password = var("SOORMA_NATS_PASSWORD");
        let creds = var("SOORMA_NATS_CREDS");
        let auth = match (token, user, password, creds) {
            (None, None, None, None) => NatsAuth::None,
            (Some(t), None, None, None) => NatsAuth::Token(t),
            (None, Some(user), Some(password), None) => NatsAuth::UserPassword { user, password },
            (None, Some(_), None, None) | (None, None, Some(_), None) => {
                return Err(Error::Config(
                    "SOORMA_NATS_USER and SOORMA_NATS_PASSWORD must be set together".into(),
                ));
            }
            (None, None, None, Some(path)) => NatsAuth::CredsFile(PathBuf::from(path)),
            _ => {
                return Err(Error::Config(
                    "set only one of SOORMA_NATS_TOKEN, SOORMA_NATS_USER/PASSWORD or SOORMA_NATS_CREDS".into(),
                ));
            }
        };
        Ok(Some(Self::new(url).with_auth(auth)))
    }

    /// Sets the credentials.
    #[must_use]
    pub fn with_auth(mut self, auth: NatsAuth) -> Self {
        self.auth = auth;
        self
    }

    /// Sets the ack wait.
    #[must_use]
    pub fn with_ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    /// Sets the replica count for streams and buckets.
    #[must_use]
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// Sets the subject, stream and bucket prefixes (to run several isolated deployments on
    /// one server).
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.subject_prefix = prefix.to_lowercase();
        self.stream_prefix = prefix.to_uppercase();
        self.bucket_prefix = prefix.to_lowercase();
        self
    }

    /// Sets the registry TTL and heartbeat interval.
    #[must_use]
    pub fn with_registry_ttl(mut self, ttl: Duration, heartbeat: Duration) -> Self {
        self.registry_ttl = ttl;
        self.heartbeat = heartbeat;
        self
    }
}

/// Connects to NATS and returns the engine's parts. Fails with a clear error when the server
/// is unreachable or JetStream is not enabled.
pub(crate) async fn connect(config: NatsConfig) -> Result<EngineParts> {
    let mut options = async_nats::ConnectOptions::new()
        .name("soorma")
        .connection_timeout(Duration::from_secs(5));
    options = match &config.auth {
        NatsAuth::None => options,
        NatsAuth::Token(t) => options.token(t.clone()),
        NatsAuth::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        NatsAuth::CredsFile(path) => options.credentials_file(path).await.map_err(|e| {
            Error::Config(format!(
                "cannot read NATS credentials file {}: {e}",
                path.display()
            ))
        })?,
    };
    let client = options
        .connect(config.url.as_str())
        .await
        .map_err(|e| connect_error(&config.url, e))?;
    let js = async_nats::jetstream::new(client.clone());
    // Fail early and clearly when JetStream is off.
    js.query_account()
        .await
        .map_err(|e| jetstream_unavailable(&config.url, e))?;
    let config = Arc::new(config);
    let bus = NatsBus::new(client.clone(), js.clone(), config.clone());
    let state = NatsStore::new(js.clone(), config.clone());
    let registry = NatsRegistry::new(js, config).await?;
    let mut parts = EngineParts::new("nats", Arc::new(bus), Arc::new(state), Arc::new(registry));
    parts.native = Native::Nats(client);
    Ok(parts)
}

/// Bad credentials, TLS setup or server address are configuration errors; the server being
/// unreachable is an engine error to retry.
fn connect_error(url: &str, e: async_nats::ConnectError) -> Error {
    use async_nats::ConnectErrorKind::{
        Authentication, AuthorizationViolation, Dns, Io, MaxReconnects, ServerParse, TimedOut, Tls,
    };
    let what = format!("cannot connect to NATS at {url}");
    match e.kind() {
        ServerParse | Authentication | AuthorizationViolation | Tls => {
            Error::Config(format!("{what}: {e}"))
        }
        Dns | TimedOut | Io | MaxReconnects => engine_error(EngineErrorKind::Connect, what, e),
    }
}

/// An engine error from a NATS failure, kept as its source; not retryable when the failure
/// cannot pass on its own (see [`is_permanent`]).
pub(crate) fn engine_error(
    kind: EngineErrorKind,
    what: impl Into<String>,
    source: impl Into<BoxError>,
) -> Error {
    let source = source.into();
    let err = EngineError::new(kind, what);
    let err = if is_permanent(&*source) {
        err.with_retryable(false)
    } else {
        err
    };
    err.with_source(source).into()
}

/// NATS failures that the same request would hit again: a message over the server's
/// `max_payload`, an invalid subject or key.
fn is_permanent(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::{context, kv};
    let mut current = Some(error);
    while let Some(e) = current {
        let permanent = if let Some(e) = e.downcast_ref::<context::PublishError>() {
            e.kind() == context::PublishErrorKind::MaxPayloadExceeded
        } else if let Some(e) = e.downcast_ref::<async_nats::PublishError>() {
            matches!(
                e.kind(),
                async_nats::PublishErrorKind::MaxPayloadExceeded
                    | async_nats::PublishErrorKind::InvalidSubject
            )
        } else if let Some(e) = e.downcast_ref::<kv::PutError>() {
            e.kind() == kv::PutErrorKind::InvalidKey
        } else if let Some(e) = e.downcast_ref::<kv::EntryError>() {
            e.kind() == kv::EntryErrorKind::InvalidKey
        } else if let Some(e) = e.downcast_ref::<kv::UpdateError>() {
            e.kind() == kv::UpdateErrorKind::InvalidKey
        } else if let Some(e) = e.downcast_ref::<kv::CreateError>() {
            e.kind() == kv::CreateErrorKind::InvalidKey
        } else {
            false
        };
        if permanent {
            return true;
        }
        current = e.source();
    }
    false
}

pub(crate) fn jetstream_unavailable(url: &str, e: impl std::fmt::Display) -> Error {
    Error::Config(format!(
        "JetStream is not available on the NATS server at {url} ({e}); start nats-server with `-js` (JetStream enabled)"
    ))
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use async_nats::jetstream::{context, kv};

    use super::*;

    #[test]
    fn nats_errors_keep_their_source_and_say_whether_to_retry() {
        let timed_out = context::PublishError::new(context::PublishErrorKind::TimedOut);
        let err = engine_error(EngineErrorKind::Publish, "publish", timed_out);
        assert!(
            err.to_string().starts_with("bus error: publish: timed out"),
            "{err}"
        );
        assert!(err.is_retryable());
        let Error::Engine(engine) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(engine.kind(), EngineErrorKind::Publish);
        assert!(
            err.source()
                .and_then(|e| e.downcast_ref::<context::PublishError>())
                .is_some()
        );

        // Too big stays too big: directly, and under a KV put.
        let too_big = || context::PublishError::new(context::PublishErrorKind::MaxPayloadExceeded);
        let err = engine_error(EngineErrorKind::Publish, "publish", too_big());
        assert!(err.to_string().contains("max payload"), "{err}");
        assert!(!err.is_retryable());
        let put = kv::PutError::with_source(kv::PutErrorKind::Publish, too_big());
        assert!(!engine_error(EngineErrorKind::StateWrite, "write `k`", put).is_retryable());
        let key = kv::EntryError::new(kv::EntryErrorKind::InvalidKey);
        assert!(!engine_error(EngineErrorKind::StateRead, "read `k`", key).is_retryable());
    }

    #[test]
    fn unreachable_servers_are_engine_errors_and_bad_credentials_configuration_errors() {
        let refused = async_nats::ConnectError::with_source(
            async_nats::ConnectErrorKind::Io,
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        );
        let err = connect_error("nats://127.0.0.1:1", refused);
        assert!(
            matches!(&err, Error::Engine(e) if e.kind() == EngineErrorKind::Connect),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("cannot connect to NATS at nats://127.0.0.1:1")
        );
        assert!(err.is_retryable());
        let denied =
            async_nats::ConnectError::new(async_nats::ConnectErrorKind::AuthorizationViolation);
        let err = connect_error("nats://127.0.0.1:4222", denied);
        assert!(
            matches!(&err, Error::Config(m) if m.contains("authorization violation")),
            "{err:?}"
        );
        assert!(!err.is_retryable());
    }
}
