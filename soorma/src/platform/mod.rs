//! The platform: an engine's parts (bus, state store, registry) plus the services built on
//! them: discovery, request validation, durable timers and the fan-in coalescer.

pub(crate) mod discovery;
pub(crate) mod fanin;
pub(crate) mod snapshot;
#[cfg(test)]
pub(crate) mod test_registries;
pub(crate) mod timers;
pub(crate) mod validation;

use std::sync::Arc;

use crate::engine::{self, EngineParts, Native};
use crate::spi::bus::EventBus;
use crate::spi::registry::Registry;
use crate::spi::state::StateStore;
use discovery::Discovery;
use fanin::FanIn;
use snapshot::AgentsSnapshot;
use timers::Timers;
use validation::RequestValidator;

struct Inner {
    kind: &'static str,
    bus: Arc<dyn EventBus>,
    state: Arc<dyn StateStore>,
    registry: Arc<dyn Registry>,
    native: Native,
    fan_in: Arc<FanIn>,
    /// The registry as requests read it, shared by the request checks, the gateway and the
    /// MCP server.
    agents: AgentsSnapshot,
    validator: Arc<RequestValidator>,
    timers: Timers,
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
    ///
    /// ```
    /// assert_eq!(soorma::Platform::embedded().kind(), "embedded");
    /// ```
    pub fn embedded() -> Self {
        Self::from_parts(engine::embedded())
    }

    /// The in-process platform with its bus bounded by `config` (queue capacity per consumer
    /// group, publish timeout, observer buffer); [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a capacity out of range.
    ///
    /// ```
    /// use soorma::embedded::EmbeddedConfig;
    /// let platform = soorma::Platform::embedded_with(EmbeddedConfig::new().with_queue_capacity(256))?;
    /// assert_eq!(platform.embedded_bus().unwrap().config().queue_capacity, 256);
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn embedded_with(config: engine::embedded::EmbeddedConfig) -> crate::error::Result<Self> {
        let bus = engine::embedded::EmbeddedBus::with_config(config)?;
        Ok(Self::from_parts(engine::embedded::parts_with(bus)))
    }

    /// A platform from an engine's parts (for custom engines).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    ///
    /// let parts = soorma::EngineParts::new(
    ///     "custom",
    ///     Arc::new(EmbeddedBus::new()),
    ///     Arc::new(MemoryStore::new()),
    ///     Arc::new(MemoryRegistry::new()),
    /// );
    /// assert_eq!(soorma::Platform::from_parts(parts).kind(), "custom");
    /// ```
    pub fn from_parts(parts: EngineParts) -> Self {
        let EngineParts {
            kind,
            bus,
            state,
            registry,
            native,
        } = parts;
        let agents = AgentsSnapshot::new(Discovery::new(registry.clone()));
        Self {
            inner: Arc::new(Inner {
                kind,
                timers: Timers::new(bus.clone(), state.clone()),
                bus,
                state,
                validator: Arc::new(RequestValidator::new(agents.clone())),
                agents,
                registry,
                native,
                fan_in: Arc::default(),
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
    pub async fn from_env() -> crate::error::Result<Self> {
        engine::from_env().await.map(Self::from_parts)
    }

    /// Connects to NATS with `config` (feature `nats`).
    ///
    /// ```no_run
    /// # async fn demo() -> soorma::Result<()> {
    /// use soorma::nats::NatsConfig;
    /// let platform = soorma::Platform::nats(NatsConfig::new("nats://127.0.0.1:4222")).await?;
    /// assert_eq!(platform.kind(), "nats");
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "nats")]
    pub async fn nats(config: engine::nats::NatsConfig) -> crate::error::Result<Self> {
        engine::nats::connect(config).await.map(Self::from_parts)
    }

    /// The NATS client, on the NATS platform.
    ///
    /// ```
    /// assert!(soorma::Platform::embedded().nats_client().is_none());
    /// ```
    #[cfg(feature = "nats")]
    pub fn nats_client(&self) -> Option<&async_nats::Client> {
        match &self.inner.native {
            Native::Nats(client) => Some(client),
            _ => None,
        }
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

    /// The registry as requests read it: one snapshot shared by everything on this platform.
    #[cfg_attr(not(any(feature = "gateway", feature = "mcp")), allow(dead_code))]
    pub(crate) fn agents(&self) -> &AgentsSnapshot {
        &self.inner.agents
    }

    pub(crate) fn validator(&self) -> &Arc<RequestValidator> {
        &self.inner.validator
    }

    pub(crate) fn fan_in(&self) -> &Arc<FanIn> {
        &self.inner.fan_in
    }

    pub(crate) fn timers(&self) -> &Timers {
        &self.inner.timers
    }

    /// Stops the platform's services: its durable timers are no longer fired by this process
    /// (they stay stored, and the next process whose workers or planners start fires them).
    /// Shut the platform's agents down first; a platform's services also stop when its last
    /// clone is dropped.
    ///
    /// The timer service starts with the first worker or planner started on the platform,
    /// recovers the stored timers of every tenant once, and fires each timer once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn ask(mut task: TaskContext) -> soorma::Result<()> {
    /// #     task.request_human_input("Approve?", "approved", Some(std::time::Duration::from_secs(3600))).await?;
    /// #     Ok(())
    /// # }
    /// let platform = Platform::embedded();
    /// let worker = Worker::new("approvals").use_registered_handlers(false)
    ///     .handler(Handler::on_task("approval.requested", ask)).start(&platform).await?;
    /// // ... on SIGTERM:
    /// worker.shutdown().await?;
    /// platform.shutdown().await?; // pending timers stay stored for the next process
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> crate::error::Result<()> {
        self.inner.timers.shutdown().await;
        tracing::debug!(kind = self.inner.kind, "platform shut down");
        Ok(())
    }

    /// The embedded bus, when this is the embedded platform (for taps).
    pub fn embedded_bus(&self) -> Option<&engine::embedded::EmbeddedBus> {
        match &self.inner.native {
            Native::Embedded(bus) => Some(bus),
            _ => None,
        }
    }
}

/// Connects to NATS and builds the platform (the same as [`Platform::nats`]).
///
/// ```no_run
/// # async fn demo() -> soorma::Result<()> {
/// use soorma::nats::NatsConfig;
/// let platform = soorma::nats::connect(NatsConfig::new("nats://127.0.0.1:4222")).await?;
/// # let _ = platform; Ok(()) }
/// ```
#[cfg(feature = "nats")]
pub async fn connect_nats(config: engine::nats::NatsConfig) -> crate::error::Result<Platform> {
    Platform::nats(config).await
}
