use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use soorma_common::AgentDefinition;

use crate::error::Result;
use crate::spi::registry::Registry;
use crate::util::BoxFuture;

/// The in-memory registry.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::embedded::MemoryRegistry;
/// use soorma::registry::Registry;
/// use soorma::{AgentDefinition, AgentKind};
/// let registry = MemoryRegistry::new();
/// registry.register(AgentDefinition::new("calc-1", "calculator", AgentKind::Tool)).await?;
/// assert_eq!(registry.agents().await?.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryRegistry {
    agents: Arc<Mutex<BTreeMap<String, AgentDefinition>>>,
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegistry").finish_non_exhaustive()
    }
}

impl MemoryRegistry {
    /// An empty registry.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::registry::Registry;
    ///
    /// let registry = soorma::embedded::MemoryRegistry::new();
    /// assert!(registry.agents().await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }
}

impl Registry for MemoryRegistry {
    fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, Result<()>> {
        self.agents
            .lock()
            .expect("registry lock")
            .insert(agent.agent_id.clone(), agent);
        Box::pin(std::future::ready(Ok(())))
    }

    fn deregister<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<()>> {
        self.agents.lock().expect("registry lock").remove(agent_id);
        Box::pin(std::future::ready(Ok(())))
    }

    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
        let all = self
            .agents
            .lock()
            .expect("registry lock")
            .values()
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(all)))
    }
}
