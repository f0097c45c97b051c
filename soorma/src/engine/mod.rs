//! Engines: implementations of the [SPI](crate::spi) — the embedded engine (in process, the
//! default) and NATS JetStream (feature `nats`). Each returns its [`EngineParts`]; the
//! platform is built from them.

pub mod embedded;
#[cfg(feature = "nats")]
pub mod nats;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::spi::bus::EventBus;
use crate::spi::registry::Registry;
use crate::spi::state::StateStore;

/// The environment variable that selects the NATS engine.
pub const NATS_URL_ENV: &str = "SOORMA_NATS_URL";

/// What an engine provides: a bus, a state store and a registry.
///
/// Build your own engine's parts with [`EngineParts::new`] and turn them into a platform with
/// [`Platform::from_parts`](crate::Platform::from_parts).
///
/// ```
/// use std::sync::Arc;
/// use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
/// use soorma::EngineParts;
///
/// let parts = EngineParts::new(
///     "custom",
///     Arc::new(EmbeddedBus::new()),
///     Arc::new(MemoryStore::new()),
///     Arc::new(MemoryRegistry::new()),
/// );
/// let platform = soorma::Platform::from_parts(parts);
/// assert_eq!(platform.kind(), "custom");
/// ```
#[non_exhaustive]
pub struct EngineParts {
    /// The engine's name (`"embedded"`, `"nats"`, ...).
    pub kind: &'static str,
    /// The event bus.
    pub bus: Arc<dyn EventBus>,
    /// The state store.
    pub state: Arc<dyn StateStore>,
    /// The registry.
    pub registry: Arc<dyn Registry>,
    pub(crate) native: Native,
}

impl std::fmt::Debug for EngineParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineParts")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl EngineParts {
    /// Parts from a bus, a state store and a registry.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    /// let parts = soorma::EngineParts::new(
    ///     "in-memory",
    ///     Arc::new(EmbeddedBus::new()),
    ///     Arc::new(MemoryStore::new()),
    ///     Arc::new(MemoryRegistry::new()),
    /// );
    /// assert_eq!(parts.kind, "in-memory");
    /// ```
    pub fn new(
        kind: &'static str,
        bus: Arc<dyn EventBus>,
        state: Arc<dyn StateStore>,
        registry: Arc<dyn Registry>,
    ) -> Self {
        Self {
            kind,
            bus,
            state,
            registry,
            native: Native::None,
        }
    }
}

/// The engine's own handle, for engine-specific access (taps, the NATS client).
pub(crate) enum Native {
    None,
    Embedded(embedded::EmbeddedBus),
    #[cfg(feature = "nats")]
    Nats(async_nats::Client),
}

/// The embedded engine's parts.
pub(crate) fn embedded() -> EngineParts {
    embedded::parts()
}

/// The engine the environment selects: NATS when `SOORMA_NATS_URL` is set, else embedded.
pub(crate) async fn from_env() -> Result<EngineParts> {
    match std::env::var(NATS_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => nats_from_env(url).await,
        _ => Ok(embedded()),
    }
}

#[cfg(feature = "nats")]
async fn nats_from_env(_url: String) -> Result<EngineParts> {
    let config = nats::NatsConfig::from_env()?
        .ok_or_else(|| Error::Config(format!("{NATS_URL_ENV} is not set")))?;
    nats::connect(config).await
}

#[cfg(not(feature = "nats"))]
async fn nats_from_env(url: String) -> Result<EngineParts> {
    Err(Error::Config(format!(
        "{NATS_URL_ENV}={url} selects the NATS platform, but soorma was built without its `nats` feature; \
         enable it (`soorma = {{ features = [\"nats\"] }}`) or unset {NATS_URL_ENV} to run embedded"
    )))
}
