//! The agent registry: who is running and what they can do.

use soorma_common::{AgentCapability, AgentDefinition};

use crate::error::Result;
use crate::util::BoxFuture;

/// A platform's registry of running agents.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::{AgentDefinition, AgentKind};
///
/// let platform = soorma::Platform::embedded();
/// let registry = platform.registry();
/// registry.register(AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)).await?;
/// assert_eq!(registry.agents().await?[0].name, "calculator");
/// registry.deregister("calc-1").await?;
/// assert!(registry.agents().await?.is_empty());
/// # Ok(()) }
/// ```
pub trait Registry: Send + Sync + 'static {
    /// Registers (or refreshes) an agent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::registry::Registry;
    /// use soorma::{AgentDefinition, AgentKind};
    ///
    /// let registry = soorma::embedded::MemoryRegistry::new();
    /// let def = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool);
    /// registry.register(def.clone().with_version("1.0.0")).await?;
    /// registry.register(def.with_version("1.1.0")).await?; // same id: refreshed
    /// assert_eq!(registry.agents().await?[0].version, "1.1.0");
    /// # Ok(()) }
    /// ```
    fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, Result<()>>;
    /// Removes an agent by id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::registry::Registry;
    /// use soorma::{AgentDefinition, AgentKind};
    ///
    /// let registry = soorma::embedded::MemoryRegistry::new();
    /// registry.register(AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)).await?;
    /// registry.deregister("calc-1").await?;
    /// assert!(registry.agents().await?.is_empty());
    /// # Ok(()) }
    /// ```
    fn deregister<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Every registered agent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::registry::Registry;
    /// use soorma::{AgentDefinition, AgentKind};
    ///
    /// let registry = soorma::embedded::MemoryRegistry::new();
    /// registry.register(AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)).await?;
    /// registry.register(AgentDefinition::new("calc-2", "calculator", AgentKind::Tool)).await?;
    /// assert_eq!(registry.agents().await?.len(), 2); // two instances
    /// # Ok(()) }
    /// ```
    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>>;
}

/// Discovery queries over a [`Registry`].
///
/// ```
/// # async fn demo() -> soorma::Result<()> {
/// let platform = soorma::Platform::embedded();
/// let tools = platform.discovery().by_consumed_event("calculate.requested").await?;
/// assert!(tools.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Discovery {
    registry: std::sync::Arc<dyn Registry>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

impl Discovery {
    pub(crate) fn new(registry: std::sync::Arc<dyn Registry>) -> Self {
        Self { registry }
    }

    /// Agents with a capability named `task_name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
    /// platform.registry().register(calc).await?;
    /// assert_eq!(platform.discovery().by_capability("add").await?[0].name, "calculator");
    /// # Ok(()) }
    /// ```
    pub async fn by_capability(&self, task_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.task_name == task_name).await
    }

    /// Agents with a capability consuming `event_name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentCapability, AgentDefinition, AgentKind, EventDefinition, Topic};
    ///
    /// let platform = soorma::Platform::embedded();
    /// let add = AgentCapability::new("add", EventDefinition::new("add.requested", Topic::ActionRequests));
    /// let calc = AgentDefinition::new("calc-1", "calculator", AgentKind::Tool).with_capability(add);
    /// platform.registry().register(calc).await?;
    /// let found = platform.discovery().by_consumed_event("add.requested").await?;
    /// assert_eq!(found[0].agent_id, "calc-1");
    /// # Ok(()) }
    /// ```
    pub async fn by_consumed_event(&self, event_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.consumed_event.event_name == event_name)
            .await
    }

    /// Every registered agent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::{AgentDefinition, AgentKind};
    ///
    /// let platform = soorma::Platform::embedded();
    /// platform.registry().register(AgentDefinition::new("log-1", "audit-log", AgentKind::Agent)).await?;
    /// assert_eq!(platform.discovery().all().await?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn all(&self) -> Result<Vec<AgentDefinition>> {
        self.registry.agents().await
    }

    async fn filter(&self, f: impl Fn(&AgentCapability) -> bool) -> Result<Vec<AgentDefinition>> {
        Ok(self
            .registry
            .agents()
            .await?
            .into_iter()
            .filter(|a| a.capabilities.iter().any(&f))
            .collect())
    }
}
