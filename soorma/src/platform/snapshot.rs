//! The registry as the platform reads it: one shared snapshot per platform, used by the
//! request checks of every client (schemas, consumers, capability names), the A2A gateway and
//! the MCP server. Requests (some of which anyone who reaches a server may send) share registry
//! reads instead of each making one.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use soorma_common::AgentDefinition;
use tokio::sync::watch;

use super::discovery::Discovery;

/// The registered agents as one successful read found them (compared by pointer: one `Arc`
/// per read).
pub(crate) type AgentsRead = Arc<Vec<AgentDefinition>>;

/// The registered agents as one read found them, or why it failed.
pub(crate) type Agents = std::result::Result<AgentsRead, String>;

/// The longest a registry read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A registry read in progress: its result once it is done (`None` until then; the channel
/// closes without one if the read's task is gone, e.g. when the runtime shuts down).
type Reading = watch::Receiver<Option<Agents>>;

/// The last registry read, shared: at most one read runs at a time, and a request takes the
/// result of a read that began after it arrived (or, through [`recent`](Self::recent), one
/// young enough) instead of making its own. A flood of requests thus costs one read at a time
/// on the registry, and a failed read is shared like a successful one. A read runs in a task
/// of its own: a request that goes away while waiting does not cancel it for the others.
/// Cheap to clone: clones share the reads.
///
/// ```text
/// let agents = platform.agents().current().await?; // read after this call began
/// ```
#[derive(Clone)]
pub(crate) struct AgentsSnapshot {
    discovery: Discovery,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for AgentsSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentsSnapshot").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The last read done: when it began, what it found.
    last: Option<(Instant, Agents)>,
    /// The read in progress: when it began, its number.
    reading: Option<(Instant, u64, Reading)>,
    /// How many reads were started.
    reads: u64,
}

impl State {
    /// Records read `number`, begun at `began`, as done with `agents` (once: by its task, or,
    /// when its task is gone without a result, by whoever finds that out first).
    fn done(&mut self, number: u64, began: Instant, agents: &Agents) {
        if matches!(&self.reading, Some((_, n, _)) if *n == number) {
            self.reading = None;
            self.last = Some((began, agents.clone()));
        }
    }
}

impl AgentsSnapshot {
    pub(crate) fn new(discovery: Discovery) -> Self {
        Self {
            discovery,
            state: Arc::default(),
        }
    }

    /// The agents from a read that began after this call: nothing registered or gone before
    /// it is missed.
    pub(crate) async fn current(&self) -> Agents {
        let asked = Instant::now();
        self.read_unless(|began| began >= asked).await
    }

    /// The agents from a read that began at most `max_age` ago.
    pub(crate) async fn recent(&self, max_age: Duration) -> Agents {
        self.read_unless(|began| began.elapsed() <= max_age).await
    }

    /// The last read's agents when `reusable` takes when it began; else those of a read in
    /// progress it takes, or of a new read (once the read in progress, if any, is done).
    async fn read_unless(&self, reusable: impl Fn(Instant) -> bool) -> Agents {
        loop {
            // (the read to wait for, its number and start, whether its result is this caller's)
            let (mut reading, number, began, taken) = {
                let mut state = self.lock();
                if let Some((began, agents)) = &state.last
                    && reusable(*began)
                {
                    return agents.clone();
                }
                match &state.reading {
                    Some((began, number, reading)) => {
                        (reading.clone(), *number, *began, reusable(*began))
                    }
                    None => {
                        let began = Instant::now();
                        state.reads += 1;
                        let reading = self.start_read(state.reads, began);
                        state.reading = Some((began, state.reads, reading.clone()));
                        (reading, state.reads, began, true)
                    }
                }
            };
            let done = reading
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|d| d.clone());
            let agents = done.unwrap_or_else(|| {
                // The read's task is gone without a result: a failed read, recorded so that
                // no caller waits on it again.
                let failed: Agents = Err("cannot read the registry: the read was stopped".into());
                self.lock().done(number, began, &failed);
                failed
            });
            if taken {
                return agents;
            }
            // Too old for this caller: it waited for it, and now reads again.
        }
    }

    /// Read `number`, begun at `began`, in a task of its own (a caller that goes away cancels
    /// nothing). A second task records its result as the last read and hands it to the
    /// waiters, however the read ended (a read that panicked is a failed read).
    fn start_read(&self, number: u64, began: Instant) -> Reading {
        let (discovery, state) = (self.discovery.clone(), self.state.clone());
        let (tx, rx) = watch::channel(None);
        let read = tokio::spawn(async move {
            match tokio::time::timeout(READ_TIMEOUT, discovery.all()).await {
                Ok(Ok(agents)) => Ok(Arc::new(agents)),
                Ok(Err(e)) => Err(format!("cannot read the registry: {e}")),
                Err(_) => Err(format!(
                    "cannot read the registry: no answer within {READ_TIMEOUT:?}"
                )),
            }
        });
        tokio::spawn(async move {
            let agents = read
                .await
                .unwrap_or_else(|e| Err(format!("cannot read the registry: {e}")));
            if let Err(e) = &agents {
                tracing::warn!(error = %e, "registry read failed");
            }
            state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .done(number, began, &agents);
            tx.send_replace(Some(agents));
        });
        rx
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

    #[tokio::test]
    async fn a_caller_that_goes_away_does_not_cancel_the_read() {
        let registry = Arc::new(Counting::default());
        let snapshot = Arc::new(AgentsSnapshot::new(Discovery::new(registry.clone())));
        let gone = {
            let snapshot = snapshot.clone();
            tokio::spawn(async move { snapshot.current().await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        gone.abort();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The read finished all the same: a young enough one is there to reuse.
        assert!(snapshot.recent(Duration::from_secs(60)).await.is_ok());
        assert_eq!(registry.listings.load(Ordering::SeqCst), 1);
    }

    /// A registry whose listing panics.
    struct Panicking;

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

    #[tokio::test]
    async fn a_read_that_panics_is_a_failed_read_not_a_stuck_one() {
        let snapshot = AgentsSnapshot::new(Discovery::new(Arc::new(Panicking)));
        for _ in 0..3 {
            let read = tokio::time::timeout(Duration::from_secs(5), snapshot.current())
                .await
                .expect("answered, not spinning");
            assert!(read.unwrap_err().contains("cannot read the registry"));
        }
    }
}
