//! The platform: a bus, a state store and a registry behind one handle.

use std::sync::Arc;

use crate::bus::EventBus;
use crate::client::Client;
use crate::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
use crate::error::{Error, Result};
use crate::registry::{Discovery, Registry};
use crate::state::StateStore;
use crate::task::GroupMarks;
use crate::validation::RequestValidator;

/// The environment variable that selects the NATS platform.
pub const NATS_URL_ENV: &str = "SOORMA_NATS_URL";

struct Inner {
    kind: &'static str,
    bus: Arc<dyn EventBus>,
    state: Arc<dyn StateStore>,
    registry: Arc<dyn Registry>,
    embedded_bus: Option<EmbeddedBus>,
    #[cfg(feature = "nats")]
    nats_client: Option<async_nats::Client>,
    group_marks: Arc<GroupMarks>,
    validator: Arc<RequestValidator>,
}

/// Where agents run: a bus, a state store and a registry. Cheap to clone.
///
/// ```
/// let platform = soorma::Platform::embedded();
/// assert_eq!(platform.kind(), "embedded");
/// ```
#[derive(Clone)]
pub struct Platform {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Platform")
            .field("kind", &self.inner.kind)
            .finish()
    }
}

impl Platform {
    /// The in-process platform: zero setup.
    pub fn embedded() -> Self {
        let bus = EmbeddedBus::new();
        Self::build(
            "embedded",
            Arc::new(bus.clone()),
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryRegistry::new()),
            Some(bus),
        )
    }

    fn build(
        kind: &'static str,
        bus: Arc<dyn EventBus>,
        state: Arc<dyn StateStore>,
        registry: Arc<dyn Registry>,
        embedded_bus: Option<EmbeddedBus>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                kind,
                bus,
                state,
                validator: Arc::new(RequestValidator::new(registry.clone())),
                registry,
                embedded_bus,
                #[cfg(feature = "nats")]
                nats_client: None,
                group_marks: Arc::default(),
            }),
        }
    }

    /// The platform the environment selects: embedded unless `SOORMA_NATS_URL` is set.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// // With SOORMA_NATS_URL unset:
    /// # unsafe { std::env::remove_var("SOORMA_NATS_URL"); }
    /// let platform = soorma::Platform::from_env().await?;
    /// assert_eq!(platform.kind(), "embedded");
    /// # Ok(()) }
    /// ```
    pub async fn from_env() -> Result<Self> {
        match std::env::var(NATS_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => Self::nats_from_env(url).await,
            _ => Ok(Self::embedded()),
        }
    }

    #[cfg(feature = "nats")]
    async fn nats_from_env(_url: String) -> Result<Self> {
        let config = crate::nats::NatsConfig::from_env()?
            .ok_or_else(|| Error::Config(format!("{NATS_URL_ENV} is not set")))?;
        crate::nats::connect(config).await
    }

    #[cfg(not(feature = "nats"))]
    async fn nats_from_env(url: String) -> Result<Self> {
        Err(Error::Config(format!(
            "{NATS_URL_ENV}={url} selects the NATS platform, but soorma was built without its `nats` feature; \
             enable it (`soorma = {{ features = [\"nats\"] }}`) or unset {NATS_URL_ENV} to run embedded"
        )))
    }

    /// The NATS client, on the NATS platform.
    ///
    /// ```
    /// assert!(soorma::Platform::embedded().nats_client().is_none());
    /// ```
    #[cfg(feature = "nats")]
    pub fn nats_client(&self) -> Option<&async_nats::Client> {
        self.inner.nats_client.as_ref()
    }

    #[cfg(feature = "nats")]
    pub(crate) fn nats(
        bus: Arc<dyn EventBus>,
        state: Arc<dyn StateStore>,
        registry: Arc<dyn Registry>,
        client: async_nats::Client,
    ) -> Self {
        let mut platform = Self::build("nats", bus, state, registry, None);
        if let Some(inner) = Arc::get_mut(&mut platform.inner) {
            inner.nats_client = Some(client);
        }
        platform
    }

    /// A platform from custom parts.
    pub fn from_parts(
        kind: &'static str,
        bus: Arc<dyn EventBus>,
        state: Arc<dyn StateStore>,
        registry: Arc<dyn Registry>,
    ) -> Self {
        Self::build(kind, bus, state, registry, None)
    }

    /// `"embedded"`, `"nats"`, or the name given to [`from_parts`](Self::from_parts).
    pub fn kind(&self) -> &'static str {
        self.inner.kind
    }

    /// The bus.
    pub fn bus(&self) -> &Arc<dyn EventBus> {
        &self.inner.bus
    }

    /// The state store.
    pub fn state(&self) -> &Arc<dyn StateStore> {
        &self.inner.state
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<dyn Registry> {
        &self.inner.registry
    }

    /// Discovery queries over the registry.
    pub fn discovery(&self) -> Discovery {
        Discovery::new(self.inner.registry.clone())
    }

    /// A bus client publishing as `source`, validating requests against registered schemas.
    pub(crate) fn bus_client(&self, source: &str) -> crate::BusClient {
        crate::BusClient::new(self.inner.bus.clone(), source)
            .with_validator(self.inner.validator.clone())
    }

    pub(crate) fn group_marks(&self) -> &Arc<GroupMarks> {
        &self.inner.group_marks
    }

    /// The embedded bus, when this is the embedded platform (for taps).
    pub fn embedded_bus(&self) -> Option<&EmbeddedBus> {
        self.inner.embedded_bus.as_ref()
    }

    /// The sessions of the default tenant (`.for_tenant(..)` for another): create, get, list.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// platform.sessions().create(soorma::common::SessionRecord::new("chat-1")).await?;
    /// assert_eq!(platform.sessions().list().await?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn sessions(&self) -> crate::planner::Sessions {
        crate::planner::Sessions::new(self)
    }

    /// Queries over the stored plans of the default tenant (`.for_tenant(..)` for another): by
    /// id, session, status, parent plan.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// assert!(platform.plans().get("plan-1").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn plans(&self) -> crate::planner::Plans {
        crate::planner::Plans::new(self)
    }

    /// A client for code outside agents: publish, and request with awaited replies.
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let client = platform.client("cli");
    /// # let _ = client;
    /// ```
    pub fn client(&self, name: impl Into<String>) -> Client {
        Client::new(self.clone(), name)
    }
}
