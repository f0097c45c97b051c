//! The agent registry: who is running and what they can do.

use soorma_common::{AgentCapability, AgentDefinition};

use crate::error::Result;
use crate::util::BoxFuture;

/// A platform's registry of running agents.
pub trait Registry: Send + Sync + 'static {
    /// Registers (or refreshes) an agent.
    fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, Result<()>>;
    /// Removes an agent by id.
    fn deregister<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<()>>;
    /// Every registered agent.
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
    pub async fn by_capability(&self, task_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.task_name == task_name).await
    }

    /// Agents with a capability consuming `event_name`.
    pub async fn by_consumed_event(&self, event_name: &str) -> Result<Vec<AgentDefinition>> {
        self.filter(|c| c.consumed_event.event_name == event_name)
            .await
    }

    /// Every registered agent.
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
