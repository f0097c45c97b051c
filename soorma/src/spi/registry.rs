//! The agent registry: who is running and what they can do.

use soorma_common::AgentDefinition;

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
