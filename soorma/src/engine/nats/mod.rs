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

mod assets;
mod batch;
mod bus;
mod catchup;
mod coalesce;
mod failover;
mod held;
pub(crate) mod names;
mod registry;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use async_nats;
pub use async_nats::jetstream::stream::StorageType;
pub use batch::{BATCH_HEADER, envelopes_of};
pub use bus::{DEAD_LETTER_REASON_HEADER, DEAD_LETTER_TRUNCATED_HEADER, NatsBus};
pub use registry::NatsRegistry;
pub use state::NatsStore;

use super::{EngineParts, Native};
use crate::error::{BoxError, EngineError, EngineErrorKind, Error, Result};

/// How to authenticate to the NATS server (its `Debug` form hides the secrets).
///
/// ```
/// let auth = soorma::nats::NatsAuth::Token("s3cret".into());
/// assert!(!format!("{auth:?}").contains("s3cret"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
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

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Token(_) => f.write_str("Token(***)"),
            Self::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"***")
                .finish(),
            Self::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
        }
    }
}

/// `url` (a comma-separated list of servers) with the credentials in each entry
/// (`user:password@`, `token@`) shown as `***@`, for messages and logs.
///
/// ```
/// let shown = soorma::nats::redacted_url("nats://alice:s3cret@a:4222,nats://b:4222");
/// assert_eq!(shown, "nats://***@a:4222,nats://b:4222");
/// ```
pub fn redacted_url(url: &str) -> String {
    url.split(',')
        .map(|entry| {
            let start = entry.find("://").map_or(0, |i| i + 3);
            match entry[start..].rfind('@') {
                Some(at) => format!("{}***{}", &entry[..start], &entry[start + at..]),
                None => entry.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// NATS platform settings (its `Debug` form hides the credentials).
///
/// ```
/// use std::time::Duration;
/// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
///     .with_ack_wait(Duration::from_secs(10))
///     .with_replicas(3);
/// assert_eq!(config.replicas, 3);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct NatsConfig {
    /// Server URL(s), comma-separated (`nats://a:4222,nats://b:4222`); every entry is one
    /// server of the cluster, whitespace around entries is ignored.
    pub url: String,
    /// Credentials.
    pub auth: NatsAuth,
    /// First subject token (`soorma`).
    pub subject_prefix: String,
    /// Stream name prefix (`SOORMA`).
    pub stream_prefix: String,
    /// KV bucket name prefix (`soorma`).
    pub bucket_prefix: String,
    /// How long streams keep events (default 24 h; zero: unlimited; else at least 2 min, their
    /// de-duplication window).
    pub event_max_age: Duration,
    /// How long a delivery may stay unacknowledged before redelivery (default 30 s).
    pub ack_wait: Duration,
    /// How long the dead-letter stream the SDK creates keeps a dead letter (default 14 days).
    pub dead_letter_max_age: Duration,
    /// How many bytes the dead-letter stream the SDK creates keeps at most; past it the
    /// oldest dead letters are dropped (default 1 GiB; must be positive).
    pub dead_letter_max_bytes: i64,
    /// Replicas of the streams and buckets the SDK creates (1 for a single server; 3 on a
    /// cluster, at most 5). Consumers have as many replicas as their stream.
    pub replicas: usize,
    /// Where the streams and buckets the SDK creates keep their data (default
    /// [`StorageType::File`]).
    pub storage: StorageType,
    /// Unacknowledged deliveries per consumer (default 4096).
    pub max_ack_pending: i64,
    /// How long a registry entry lives without a heartbeat (default 30 s).
    pub registry_ttl: Duration,
    /// How often running agents refresh their registry entry (default 10 s).
    pub heartbeat: Duration,
    /// How long a publish (and an agent's registration and consumer creation) that fails the
    /// way a cluster's failover makes it fail — no stream leader for a moment, an
    /// acknowledgement lost with a server — is tried again, with the same de-duplication id
    /// (default 15 s; zero: not retried; at most 100 s, inside the streams' 120 s
    /// de-duplication window).
    pub failover_retry: Duration,
    /// How many bytes of events (as stored) one agent subscription decodes and holds at most,
    /// waiting for a handler or being handled (default 16 MiB; an event larger than that is
    /// taken alone). Bounds what large payloads, hostile ones too, take in memory once decoded
    /// (a decoded event takes up to about 16 times its stored size); the client library's
    /// buffer of pulled messages is bounded by their count (the agent's concurrency, at most
    /// 256).
    pub max_in_flight_bytes: u32,
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &redacted_url(&self.url))
            .field("auth", &self.auth)
            .field("subject_prefix", &self.subject_prefix)
            .field("stream_prefix", &self.stream_prefix)
            .field("bucket_prefix", &self.bucket_prefix)
            .field("event_max_age", &self.event_max_age)
            .field("ack_wait", &self.ack_wait)
            .field("dead_letter_max_age", &self.dead_letter_max_age)
            .field("dead_letter_max_bytes", &self.dead_letter_max_bytes)
            .field("replicas", &self.replicas)
            .field("storage", &self.storage)
            .field("max_ack_pending", &self.max_ack_pending)
            .field("registry_ttl", &self.registry_ttl)
            .field("heartbeat", &self.heartbeat)
            .field("failover_retry", &self.failover_retry)
            .field("max_in_flight_bytes", &self.max_in_flight_bytes)
            .finish()
    }
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
            dead_letter_max_age: Duration::from_secs(14 * 86_400),
            dead_letter_max_bytes: 1 << 30,
            replicas: 1,
            storage: StorageType::File,
            max_ack_pending: 4096,
            registry_ttl: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            failover_retry: Duration::from_secs(15),
            max_in_flight_bytes: 16 << 20,
        }
    }

    /// Reads `SOORMA_NATS_URL` (one URL or a comma-separated list), the credentials
    /// (`SOORMA_NATS_TOKEN`, or `SOORMA_NATS_USER` + `SOORMA_NATS_PASSWORD`, or
    /// `SOORMA_NATS_CREDS`) and the storage settings (`SOORMA_NATS_REPLICAS`,
    /// `SOORMA_NATS_STORAGE`, `SOORMA_NATS_EVENT_MAX_AGE`, `SOORMA_NATS_ACK_WAIT`,
    /// `SOORMA_NATS_DLQ_MAX_AGE`, `SOORMA_NATS_DLQ_MAX_BYTES`, `SOORMA_NATS_FAILOVER_RETRY`,
    /// `SOORMA_NATS_MAX_IN_FLIGHT_BYTES`; see
    /// `docs/nats.md`); `None` when the URL is unset. A value that does not parse is an
    /// [`Error::Config`] naming the variable.
    ///
    /// ```
    /// # unsafe { std::env::remove_var("SOORMA_NATS_URL"); }
    /// assert!(soorma::nats::NatsConfig::from_env().unwrap().is_none());
    /// ```
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over any source of variables.
    fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let var = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
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
        let mut config = Self::new(url).with_auth(auth);
        config.servers()?;
        if let Some(v) = var(REPLICAS_ENV) {
            config.replicas = parse_replicas(&v)
                .map_err(|e| Error::Config(format!("{REPLICAS_ENV}=`{v}`: {e}")))?;
        }
        if let Some(v) = var(STORAGE_ENV) {
            config.storage = match v.trim().to_ascii_lowercase().as_str() {
                "file" => StorageType::File,
                "memory" => StorageType::Memory,
                _ => {
                    return Err(Error::Config(format!(
                        "{STORAGE_ENV}=`{v}`: use `file` or `memory`"
                    )));
                }
            };
        }
        let duration = |name: &str| -> Result<Option<Duration>> {
            var(name)
                .map(|v| {
                    parse_duration(&v).map_err(|e| Error::Config(format!("{name}=`{v}`: {e}")))
                })
                .transpose()
        };
        if let Some(d) = duration(EVENT_MAX_AGE_ENV)? {
            config.event_max_age = d;
        }
        if let Some(d) = duration(DLQ_MAX_AGE_ENV)? {
            config.dead_letter_max_age = d;
        }
        if let Some(v) = var(DLQ_MAX_BYTES_ENV) {
            config.dead_letter_max_bytes = positive_bytes(DLQ_MAX_BYTES_ENV, &v)?;
        }
        if let Some(v) = var(MAX_IN_FLIGHT_BYTES_ENV) {
            config.max_in_flight_bytes = positive_bytes(MAX_IN_FLIGHT_BYTES_ENV, &v)?;
        }
        if let Some(d) = duration(FAILOVER_RETRY_ENV)? {
            config.failover_retry = d;
        }
        if let Some(d) = duration(ACK_WAIT_ENV)? {
            if d.is_zero() {
                return Err(Error::Config(format!("{ACK_WAIT_ENV} must not be 0")));
            }
            config.ack_wait = d;
        }
        Ok(Some(config))
    }

    /// The servers of [`url`](Self::url), each parsed; an entry that is not a NATS URL is an
    /// [`Error::Config`] naming it.
    ///
    /// ```
    /// let config = soorma::nats::NatsConfig::new("nats://a:4222, nats://b:4222 ,c");
    /// assert_eq!(config.servers().unwrap().len(), 3);
    /// let bad = soorma::nats::NatsConfig::new("nats://a:4222,nats://b:42x22");
    /// assert!(bad.servers().unwrap_err().to_string().contains("nats://b:42x22"));
    /// ```
    pub fn servers(&self) -> Result<Vec<async_nats::ServerAddr>> {
        let servers = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry.parse::<async_nats::ServerAddr>().map_err(|e| {
                    Error::Config(format!(
                        "NATS server URL `{}` (in `{}`) is invalid: {e}",
                        redacted_url(entry),
                        redacted_url(&self.url)
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if servers.is_empty() {
            return Err(Error::Config(format!(
                "no NATS server URL in `{}`",
                redacted_url(&self.url)
            )));
        }
        Ok(servers)
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

    /// Sets the replica count of the streams and buckets the SDK creates (their consumers
    /// follow their stream); more than 5 is refused when connecting.
    #[must_use]
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// Sets where the streams and buckets the SDK creates keep their data.
    ///
    /// ```
    /// use soorma::nats::{NatsConfig, StorageType};
    /// let config = NatsConfig::new("nats://127.0.0.1:4222").with_storage(StorageType::Memory);
    /// assert_eq!(config.storage, StorageType::Memory);
    /// ```
    #[must_use]
    pub fn with_storage(mut self, storage: StorageType) -> Self {
        self.storage = storage;
        self
    }

    /// Sets how long the event streams the SDK creates keep events.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
    ///     .with_event_max_age(Duration::from_secs(3600));
    /// assert_eq!(config.event_max_age, Duration::from_secs(3600));
    /// ```
    #[must_use]
    pub fn with_event_max_age(mut self, max_age: Duration) -> Self {
        self.event_max_age = max_age;
        self
    }

    /// Sets how long, and up to how many bytes, the dead-letter stream the SDK creates keeps
    /// dead letters (the oldest are dropped first).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
    ///     .with_dead_letter_limits(Duration::from_secs(7 * 86_400), 256 << 20);
    /// assert_eq!(config.dead_letter_max_bytes, 256 << 20);
    /// ```
    #[must_use]
    pub fn with_dead_letter_limits(mut self, max_age: Duration, max_bytes: i64) -> Self {
        self.dead_letter_max_age = max_age;
        self.dead_letter_max_bytes = max_bytes;
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

    /// Sets how long publishes that fail the way a failover makes them fail are retried
    /// (zero: not retried).
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
    ///     .with_failover_retry(Duration::from_secs(30));
    /// assert_eq!(config.failover_retry, Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn with_failover_retry(mut self, window: Duration) -> Self {
        self.failover_retry = window;
        self
    }

    /// Sets how many bytes of received events one subscription holds at most (see
    /// [`max_in_flight_bytes`](Self::max_in_flight_bytes)).
    ///
    /// ```
    /// let config = soorma::nats::NatsConfig::new("nats://127.0.0.1:4222")
    ///     .with_max_in_flight_bytes(64 << 20);
    /// assert_eq!(config.max_in_flight_bytes, 64 << 20);
    /// ```
    #[must_use]
    pub fn with_max_in_flight_bytes(mut self, bytes: u32) -> Self {
        self.max_in_flight_bytes = bytes;
        self
    }

    /// Sets the registry TTL and heartbeat interval (the TTL must be longer; it is the `max_age`
    /// of the registry bucket when soorma creates it).
    #[must_use]
    pub fn with_registry_ttl(mut self, ttl: Duration, heartbeat: Duration) -> Self {
        self.registry_ttl = ttl;
        self.heartbeat = heartbeat;
        self
    }
}

impl NatsConfig {
    /// The servers to connect to, once the settings are known to be usable.
    fn validate(&self) -> Result<Vec<async_nats::ServerAddr>> {
        let servers = self.servers()?;
        if !(1..=5).contains(&self.replicas) {
            return Err(Error::Config(format!(
                "NATS replicas {}: use a replica count from 1 to 5",
                self.replicas
            )));
        }
        if self.heartbeat.is_zero() || self.registry_ttl <= self.heartbeat {
            return Err(Error::Config(format!(
                "the NATS registry TTL ({:?}) must be longer than the heartbeat ({:?}), which must not be 0",
                self.registry_ttl, self.heartbeat
            )));
        }
        if self.ack_wait < MIN_ACK_WAIT {
            return Err(Error::Config(format!(
                "the NATS ack wait ({:?}) must be at least {MIN_ACK_WAIT:?} (deliveries are kept alive every third of it)",
                self.ack_wait
            )));
        }
        if self.dead_letter_max_bytes <= 0 {
            return Err(Error::Config(format!(
                "the NATS dead-letter stream's byte limit ({}) must be positive: it bounds the dead letters a flood of bad input leaves",
                self.dead_letter_max_bytes
            )));
        }
        if self.max_in_flight_bytes == 0 {
            return Err(Error::Config(
                "the NATS in-flight byte limit must be positive: no event could be received".into(),
            ));
        }
        if !self.event_max_age.is_zero() && self.event_max_age < DUPLICATE_WINDOW {
            return Err(Error::Config(format!(
                "the NATS event max age ({:?}) must be 0 (unlimited) or at least {DUPLICATE_WINDOW:?}, the event streams' de-duplication window",
                self.event_max_age
            )));
        }
        // The server takes durations as i64 nanoseconds (about 292 years): a longer one would
        // wrap to a short (or negative) one on the wire.
        for (what, d) in [
            ("ack wait", self.ack_wait),
            ("event max age", self.event_max_age),
            ("dead-letter max age", self.dead_letter_max_age),
            ("registry TTL", self.registry_ttl),
        ] {
            if d > MAX_DURATION {
                return Err(Error::Config(format!(
                    "the NATS {what} ({d:?}) must be at most {MAX_DURATION:?} (100 years): the server takes durations as 64-bit nanoseconds"
                )));
            }
        }
        if self.failover_retry >= MAX_FAILOVER_RETRY {
            return Err(Error::Config(format!(
                "the NATS failover retry ({:?}) must be shorter than {MAX_FAILOVER_RETRY:?}: a publish sent again later than the streams' de-duplication window (120 s) could be stored twice",
                self.failover_retry
            )));
        }
        Ok(servers)
    }
}

/// A positive number of bytes, read from the variable `name` (an [`Error::Config`] naming it
/// when it is not one, or does not fit).
fn positive_bytes<T: std::str::FromStr + PartialOrd + Default>(name: &str, v: &str) -> Result<T> {
    v.trim()
        .parse::<T>()
        .ok()
        .filter(|b| *b > T::default())
        .ok_or_else(|| {
            Error::Config(format!(
                "{name}=`{v}`: use a positive number of bytes (no unit) that fits"
            ))
        })
}

/// The replica count (`1`..=`5`, JetStream's limit).
fn parse_replicas(v: &str) -> std::result::Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n @ 1..=5) => Ok(n),
        _ => Err("use a replica count from 1 to 5".into()),
    }
}

/// A duration: a whole number followed by `ms`, `s`, `m`, `h` or `d` (`90s`, `24h`); a bare
/// number is seconds.
fn parse_duration(v: &str) -> std::result::Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| "use a whole number with a unit: `500ms`, `30s`, `15m`, `24h`, `7d`")?;
    let seconds = |factor: u64| {
        n.checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| "too long".to_owned())
    };
    match unit.trim() {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        "d" => seconds(86_400),
        other => Err(format!("unknown unit `{other}`: use ms, s, m, h or d")),
    }
}

/// The shortest `ack_wait`: deliveries are kept alive every third of it.
const MIN_ACK_WAIT: Duration = Duration::from_millis(100);

/// The longest duration a configuration may give (100 years; the server's limit is about 292).
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `SOORMA_NATS_REPLICAS`: replicas of the streams and buckets the SDK creates.
const REPLICAS_ENV: &str = "SOORMA_NATS_REPLICAS";
/// `SOORMA_NATS_STORAGE`: `file` or `memory`.
const STORAGE_ENV: &str = "SOORMA_NATS_STORAGE";
/// `SOORMA_NATS_EVENT_MAX_AGE`: how long the event streams keep events.
const EVENT_MAX_AGE_ENV: &str = "SOORMA_NATS_EVENT_MAX_AGE";
/// `SOORMA_NATS_DLQ_MAX_AGE`: how long the dead-letter stream keeps dead letters.
const DLQ_MAX_AGE_ENV: &str = "SOORMA_NATS_DLQ_MAX_AGE";
/// `SOORMA_NATS_DLQ_MAX_BYTES`: how many bytes the dead-letter stream keeps at most.
const DLQ_MAX_BYTES_ENV: &str = "SOORMA_NATS_DLQ_MAX_BYTES";
/// `SOORMA_NATS_ACK_WAIT`: how long a delivery may stay unacknowledged.
const ACK_WAIT_ENV: &str = "SOORMA_NATS_ACK_WAIT";
/// The de-duplication window of the event streams soorma creates.
pub(super) const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How much longer than the failover retry a stream's de-duplication window must be: the
/// last retry's acknowledgement timeout (as [`MAX_FAILOVER_RETRY`] leaves inside
/// [`DUPLICATE_WINDOW`]).
pub(super) const DUPLICATE_WINDOW_MARGIN: Duration = Duration::from_secs(20);
/// The longest failover retry: its last attempt (plus an acknowledgement timeout) stays inside
/// the de-duplication window (120 s) of the streams soorma creates.
const MAX_FAILOVER_RETRY: Duration = DUPLICATE_WINDOW.saturating_sub(DUPLICATE_WINDOW_MARGIN);
/// `SOORMA_NATS_MAX_IN_FLIGHT_BYTES`: the bytes of received events a subscription holds.
const MAX_IN_FLIGHT_BYTES_ENV: &str = "SOORMA_NATS_MAX_IN_FLIGHT_BYTES";
/// `SOORMA_NATS_FAILOVER_RETRY`: how long publishes are retried through a failover.
const FAILOVER_RETRY_ENV: &str = "SOORMA_NATS_FAILOVER_RETRY";

/// Connects to NATS and returns the engine's parts. Fails with a clear error when the server
/// is unreachable or JetStream is not enabled.
pub(crate) async fn connect(config: NatsConfig) -> Result<EngineParts> {
    let servers = config.validate()?;
    // Connection events feed the core subscriptions' catch-up after a reconnect.
    let (link, link_rx) = tokio::sync::watch::channel(catchup::Link::default());
    let mut options = async_nats::ConnectOptions::new()
        .name("soorma")
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            catchup::on_event(&link, &event);
            std::future::ready(())
        });
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
        .connect(servers)
        .await
        .map_err(|e| connect_error(&redacted_url(&config.url), e))?;
    let js = async_nats::jetstream::new(client.clone());
    // Fail early and clearly when JetStream is off.
    js.query_account()
        .await
        .map_err(|e| account_error(&redacted_url(&config.url), e))?;
    let config = Arc::new(config);
    let bus = NatsBus::new(client.clone(), js.clone(), config.clone(), link_rx);
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

/// How long a state operation is repeated while its bucket has no leader: longer than a
/// cluster takes to elect a new one after losing a server (about 5 s).
const FAILOVER: Duration = Duration::from_secs(15);

/// Runs `op`, repeating it (100 ms doubling to 1 s, for up to [`FAILOVER`]) while no server
/// answers it — a JetStream asset without a leader, as while a cluster elects one: such a
/// request was not processed, so repeating it is safe. Handlers then ride out a failover
/// instead of spending their retries on it.
pub(crate) async fn during_failover<T, E, F>(mut op: impl FnMut() -> F) -> std::result::Result<T, E>
where
    E: std::error::Error + 'static,
    F: std::future::Future<Output = std::result::Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + FAILOVER;
    let mut delay = Duration::from_millis(100);
    loop {
        match op().await {
            Err(e) if is_no_responders(&e) && tokio::time::Instant::now() + delay < deadline => {
                tracing::debug!(error = %e, "no NATS server answered; repeating the request");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            outcome => return outcome,
        }
    }
}

/// Whether no server answered a request (NATS "no responders").
fn is_no_responders(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context;
    let mut current = Some(error);
    while let Some(e) = current {
        let none = e
            .downcast_ref::<async_nats::RequestError>()
            .is_some_and(|r| r.kind() == async_nats::RequestErrorKind::NoResponders)
            || e.downcast_ref::<context::RequestError>()
                .is_some_and(|r| r.kind() == context::RequestErrorKind::NoResponders)
            // A publish (a bucket's create, update, put or delete) answered "no responders":
            // async-nats reports it as a stream not found, as it does for a subject no stream
            // takes; the buckets exist, so here it is one without a leader.
            || e.downcast_ref::<context::PublishError>()
                .is_some_and(|p| p.kind() == context::PublishErrorKind::StreamNotFound)
            // Some KV errors keep only the server's status text.
            || e.to_string().contains("no responders");
        if none {
            return true;
        }
        current = e.source();
    }
    false
}

/// Why JetStream's account query failed: JetStream off (for the server or the account) is a
/// configuration error; no answer in time may be a busy server or a user not allowed to ask
/// (`$JS.API.INFO`), and is said so.
fn account_error(url: &str, e: async_nats::jetstream::context::AccountError) -> Error {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::context::AccountErrorKind;
    match e.kind() {
        AccountErrorKind::JetStreamUnavailable => jetstream_unavailable(url, e),
        AccountErrorKind::JetStream(js) if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED => {
            jetstream_unavailable(url, e)
        }
        AccountErrorKind::JetStream(js)
            if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
        {
            Error::Config(format!(
                "JetStream is not enabled for this user's account on the NATS server at {url} ({e}); enable it in the account's configuration"
            ))
        }
        AccountErrorKind::TimedOut => engine_error(
            EngineErrorKind::Connect,
            format!(
                "the NATS server at {url} did not answer JetStream's account query in time: it may be busy, or this user may not publish to `$JS.API.INFO` (see docs/nats.md for the permissions an agent needs)"
            ),
            e,
        ),
        _ => engine_error(
            EngineErrorKind::Connect,
            format!("JetStream's account query failed on the NATS server at {url}"),
            e,
        ),
    }
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

    /// A bucket write to a stream without a leader is answered "no responders", which
    /// async-nats reports as a stream not found: it is repeated through the failover (a
    /// 3-node cluster test lost its workers' results when it was not: each result handler
    /// spent its five deliveries in 1.5 s of the election).
    #[test]
    fn a_bucket_write_no_server_answered_is_repeated() {
        let unanswered = context::PublishError::new(context::PublishErrorKind::StreamNotFound);
        assert!(is_no_responders(&kv::UpdateError::from(unanswered)));
        let conflict = context::PublishError::new(context::PublishErrorKind::WrongLastSequence);
        assert!(!is_no_responders(&kv::UpdateError::from(conflict)));
        let timed_out = context::PublishError::new(context::PublishErrorKind::TimedOut);
        assert!(!is_no_responders(&kv::UpdateError::from(timed_out)));
    }

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

    fn from_vars(vars: &[(&str, &str)]) -> Result<Option<NatsConfig>> {
        NatsConfig::from_vars(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn url_lists_parse_each_entry_and_name_a_bad_one() {
        let config = from_vars(&[("SOORMA_NATS_URL", " nats://a:4222 ,nats://b:4223,, c ")])
            .unwrap()
            .unwrap();
        let servers = config.servers().unwrap();
        assert_eq!(servers.len(), 3);
        assert_eq!(servers[1].port(), 4223);
        assert_eq!(servers[2].host(), "c");
        let err = from_vars(&[("SOORMA_NATS_URL", "nats://a:4222,nats://b:x")]).unwrap_err();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("`nats://b:x`")),
            "{err:?}"
        );
        let err = NatsConfig::new(" , ").servers().unwrap_err();
        assert!(matches!(&err, Error::Config(m) if m.contains("no NATS server URL")));
        assert!(from_vars(&[("SOORMA_NATS_URL", "  ")]).unwrap().is_none());
    }

    #[test]
    fn storage_settings_come_from_the_environment() {
        let url = ("SOORMA_NATS_URL", "nats://127.0.0.1:4222");
        let defaults = from_vars(&[url]).unwrap().unwrap();
        assert_eq!(defaults.replicas, 1);
        assert_eq!(defaults.storage, StorageType::File);
        assert_eq!(defaults.event_max_age, Duration::from_secs(24 * 3600));
        let config = from_vars(&[
            url,
            ("SOORMA_NATS_REPLICAS", "3"),
            ("SOORMA_NATS_STORAGE", "Memory"),
            ("SOORMA_NATS_EVENT_MAX_AGE", "7d"),
            ("SOORMA_NATS_ACK_WAIT", "45s"),
            ("SOORMA_NATS_DLQ_MAX_AGE", "30d"),
            ("SOORMA_NATS_DLQ_MAX_BYTES", "1048576"),
            ("SOORMA_NATS_FAILOVER_RETRY", "0"),
            ("SOORMA_NATS_MAX_IN_FLIGHT_BYTES", "1048576"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.max_in_flight_bytes, 1 << 20);
        assert_eq!(defaults.max_in_flight_bytes, 16 << 20);
        assert_eq!(config.dead_letter_max_age, Duration::from_secs(30 * 86_400));
        assert_eq!(config.dead_letter_max_bytes, 1 << 20);
        assert_eq!(
            defaults.dead_letter_max_age,
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(defaults.dead_letter_max_bytes, 1 << 30);
        assert_eq!(config.replicas, 3);
        assert_eq!(config.storage, StorageType::Memory);
        assert_eq!(config.event_max_age, Duration::from_secs(7 * 86_400));
        assert_eq!(config.ack_wait, Duration::from_secs(45));
        assert_eq!(config.failover_retry, Duration::ZERO);
        assert_eq!(defaults.failover_retry, Duration::from_secs(15));
        for (var, value) in [
            ("SOORMA_NATS_REPLICAS", "0"),
            ("SOORMA_NATS_REPLICAS", "6"),
            ("SOORMA_NATS_REPLICAS", "three"),
            ("SOORMA_NATS_STORAGE", "disk"),
            ("SOORMA_NATS_EVENT_MAX_AGE", "1 week"),
            ("SOORMA_NATS_ACK_WAIT", "0s"),
            ("SOORMA_NATS_ACK_WAIT", "-5s"),
            ("SOORMA_NATS_DLQ_MAX_AGE", "forever"),
            ("SOORMA_NATS_DLQ_MAX_BYTES", "0"),
            ("SOORMA_NATS_DLQ_MAX_BYTES", "1GB"),
            ("SOORMA_NATS_FAILOVER_RETRY", "soon"),
            ("SOORMA_NATS_MAX_IN_FLIGHT_BYTES", "0"),
            ("SOORMA_NATS_MAX_IN_FLIGHT_BYTES", "16MiB"),
            ("SOORMA_NATS_MAX_IN_FLIGHT_BYTES", "99999999999"),
        ] {
            let err = from_vars(&[url, (var, value)]).unwrap_err();
            assert!(
                matches!(&err, Error::Config(m) if m.contains(var)),
                "{var}={value}: {err:?}"
            );
        }
    }

    #[test]
    fn unusable_settings_are_refused_before_connecting() {
        let ok = NatsConfig::new("nats://127.0.0.1:4222");
        assert_eq!(ok.validate().unwrap().len(), 1);
        let too_many = ok.clone().with_replicas(7);
        assert!(matches!(too_many.validate(), Err(Error::Config(m)) if m.contains("replicas 7")));
        let ttl = ok
            .clone()
            .with_registry_ttl(Duration::from_secs(5), Duration::from_secs(5));
        assert!(matches!(ttl.validate(), Err(Error::Config(m)) if m.contains("registry TTL")));
        for short in [Duration::ZERO, Duration::from_millis(99)] {
            let ack = ok.clone().with_ack_wait(short);
            assert!(matches!(ack.validate(), Err(Error::Config(m)) if m.contains("ack wait")));
        }
        assert!(ok.clone().with_ack_wait(MIN_ACK_WAIT).validate().is_ok());
        for bytes in [0, -1] {
            let dlq = ok.clone().with_dead_letter_limits(Duration::ZERO, bytes);
            assert!(matches!(dlq.validate(), Err(Error::Config(m)) if m.contains("byte limit")));
        }
        let retry = ok.clone().with_failover_retry(Duration::from_secs(120));
        assert!(matches!(retry.validate(), Err(Error::Config(m)) if m.contains("failover retry")));
        let young = ok.clone().with_event_max_age(Duration::from_secs(60));
        assert!(matches!(young.validate(), Err(Error::Config(m)) if m.contains("event max age")));
        for kept in [DUPLICATE_WINDOW, Duration::ZERO, MAX_DURATION] {
            assert!(ok.clone().with_event_max_age(kept).validate().is_ok());
        }
        // Past 100 years (a day past, and what wraps on the wire: 2^63 ns and more).
        for long in [
            MAX_DURATION + Duration::from_secs(86_400),
            Duration::from_nanos(u64::MAX),
            Duration::MAX,
        ] {
            let configs = [
                ("ack wait", ok.clone().with_ack_wait(long)),
                ("event max age", ok.clone().with_event_max_age(long)),
                (
                    "dead-letter max age",
                    ok.clone().with_dead_letter_limits(long, 1 << 30),
                ),
                (
                    "registry TTL",
                    ok.clone().with_registry_ttl(long, Duration::from_secs(5)),
                ),
            ];
            for (what, config) in configs {
                assert!(
                    matches!(config.validate(), Err(Error::Config(m)) if m.contains(what) && m.contains("100 years")),
                    "{what} {long:?}"
                );
            }
        }
    }

    #[test]
    fn credentials_are_not_shown() {
        assert_eq!(
            redacted_url("nats://alice:s3cret@a:4222, tls://t0ken@b:4222,c:4222"),
            "nats://***@a:4222, tls://***@b:4222,c:4222"
        );
        let config =
            NatsConfig::new("nats://alice:s3cret@a:4222").with_auth(NatsAuth::UserPassword {
                user: "bob".into(),
                password: "hunter2".into(),
            });
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(
            shown.contains("bob") && shown.contains("nats://***@a:4222"),
            "{shown}"
        );
        let bad = NatsConfig::new("nats://alice:s3cret@a:42x22")
            .servers()
            .unwrap_err();
        assert!(!bad.to_string().contains("s3cret"), "{bad}");
    }

    #[tokio::test(start_paused = true)]
    async fn requests_nobody_answers_are_repeated_for_a_while() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let no_responders =
            || async_nats::RequestError::new(async_nats::RequestErrorKind::NoResponders);
        // Answered on the fourth try.
        let outcome = during_failover(|| async {
            match calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                0..=2 => Err(no_responders()),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(outcome.unwrap(), 3);
        // Other failures are not repeated; no answer at all gives up after FAILOVER.
        calls.store(0, std::sync::atomic::Ordering::Relaxed);
        let timed_out = during_failover(|| async {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err::<(), _>(async_nats::RequestError::new(
                async_nats::RequestErrorKind::TimedOut,
            ))
        })
        .await;
        assert!(timed_out.is_err());
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        let started = tokio::time::Instant::now();
        let never = during_failover(|| async { Err::<(), _>(no_responders()) }).await;
        assert!(never.is_err());
        assert!(started.elapsed() <= FAILOVER);
        assert!(started.elapsed() >= FAILOVER - Duration::from_secs(2));
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 15m "), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5y").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("99999999999999999999d").is_err());
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
