//! Registries the platform's unit tests read through: counted, slow, failing, stalling or
//! panicking on purpose.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use soorma_common::AgentDefinition;

use crate::error::{Error, Result};
use crate::spi::registry::Registry;
use crate::util::BoxFuture;

/// A registry counting its listings, each taking 20 ms.
#[derive(Default)]
pub(crate) struct Counting {
    pub(crate) listings: AtomicUsize,
    pub(crate) agents: Mutex<Vec<AgentDefinition>>,
    /// Every listing fails once set.
    pub(crate) failing: AtomicBool,
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
            if self.failing.load(Ordering::SeqCst) {
                return Err(Error::Config("the registry is down".into()));
            }
            Ok(self.agents.lock().unwrap().clone())
        })
    }
}

/// A registry of no agents counting its listings: the first never answers (`first_dropped`
/// is set when it is given up), the second waits for `release`, the others answer at once.
#[derive(Default)]
pub(crate) struct Scripted {
    pub(crate) listings: AtomicUsize,
    pub(crate) first_dropped: Arc<AtomicBool>,
    pub(crate) release: tokio::sync::Notify,
}

impl Scripted {
    /// One whose first listing never answers and whose others answer at once.
    pub(crate) fn answering_after_the_first() -> Self {
        let registry = Self::default();
        registry.release.notify_one();
        registry
    }
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Registry for Scripted {
    fn register(&self, _: AgentDefinition) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn deregister<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
        let listing = self.listings.fetch_add(1, Ordering::SeqCst) + 1;
        let dropped = (listing == 1).then(|| SetOnDrop(self.first_dropped.clone()));
        Box::pin(async move {
            match listing {
                1 => {
                    let _dropped = dropped;
                    std::future::pending::<()>().await
                }
                2 => self.release.notified().await,
                _ => {}
            }
            Ok(Vec::new())
        })
    }
}

/// A registry whose listing panics.
pub(crate) struct Panicking;

impl Registry for Panicking {
    fn register(&self, _: AgentDefinition) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn deregister<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
        Box::pin(async { panic!("a registry that panics") })
    }
}
