//! The registry as the servers facing the network read it (the A2A gateway, the MCP server):
//! their requests, which anyone who reaches them may send, share registry reads instead of
//! each making one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use soorma_common::AgentDefinition;

use super::discovery::Discovery;

/// The registered agents as one read found them, or why it failed.
pub(crate) type Agents = std::result::Result<Arc<Vec<AgentDefinition>>, String>;

/// The last registry read, shared: at most one read runs at a time, and a request takes the
/// result of a read that began after it arrived (or, through [`recent`](Self::recent), one
/// young enough) instead of making its own. A flood of requests thus costs one read at a time
/// on the registry, and a failed read is shared like a successful one.
///
/// ```text
/// let snapshot = AgentsSnapshot::new(platform.discovery());
/// let agents = snapshot.current().await?; // read after this call began
/// ```
pub(crate) struct AgentsSnapshot {
    discovery: Discovery,
    last: tokio::sync::Mutex<Option<(Instant, Agents)>>,
}

impl AgentsSnapshot {
    pub(crate) fn new(discovery: Discovery) -> Self {
        Self {
            discovery,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The agents from a read that began after this call: nothing registered or gone before
    /// it is missed.
    pub(crate) async fn current(&self) -> Agents {
        let asked = Instant::now();
        self.read_unless(|began| began >= asked).await
    }

    /// The agents from a read that began at most `max_age` ago.
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    pub(crate) async fn recent(&self, max_age: Duration) -> Agents {
        self.read_unless(|began| began.elapsed() <= max_age).await
    }

    async fn read_unless(&self, reusable: impl Fn(Instant) -> bool) -> Agents {
        // Held through the read: concurrent callers wait for it, then reuse it.
        let mut last = self.last.lock().await;
        if let Some((began, agents)) = &*last
            && reusable(*began)
        {
            return agents.clone();
        }
        let began = Instant::now();
        let agents = match self.discovery.all().await {
            Ok(agents) => Ok(Arc::new(agents)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the registry");
                Err(format!("cannot read the registry: {e}"))
            }
        };
        *last = Some((began, agents.clone()));
        agents
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use soorma_common::AgentKind;

    use super::*;
    use crate::error::Result;
    use crate::spi::registry::Registry;
    use crate::util::BoxFuture;

    /// A registry counting its listings, each taking 20 ms.
    #[derive(Default)]
    struct Counting {
        listings: AtomicUsize,
        agents: std::sync::Mutex<Vec<AgentDefinition>>,
    }

    impl Registry for Counting {
        fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, Result<()>> {
            self.agents.lock().unwrap().push(agent);
            Box::pin(async { Ok(()) })
        }
        fn deregister<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<()>> {
            Box::pin(async { Ok(()) })
        }
        fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
            Box::pin(async {
                self.listings.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(self.agents.lock().unwrap().clone())
            })
        }
    }

    #[tokio::test]
    async fn concurrent_requests_share_reads_and_see_what_came_before_them() {
        let registry = Arc::new(Counting::default());
        let snapshot = Arc::new(AgentsSnapshot::new(Discovery::new(registry.clone())));
        let askers: Vec<_> = (0..200)
            .map(|_| {
                let snapshot = snapshot.clone();
                tokio::spawn(async move { snapshot.current().await })
            })
            .collect();
        for asker in askers {
            assert!(asker.await.unwrap().unwrap().is_empty());
        }
        let reads = registry.listings.load(Ordering::SeqCst);
        assert!(
            reads <= 2,
            "200 concurrent requests made {reads} registry reads"
        );

        // Registered before the request: seen, though the last read is only just done.
        registry
            .register(AgentDefinition::new("calc-1", "calc", AgentKind::Tool))
            .await
            .unwrap();
        assert_eq!(snapshot.current().await.unwrap().len(), 1);
        // A young enough read is reused as it is.
        let before = registry.listings.load(Ordering::SeqCst);
        assert_eq!(
            snapshot
                .recent(Duration::from_secs(60))
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(registry.listings.load(Ordering::SeqCst), before);
    }
}
