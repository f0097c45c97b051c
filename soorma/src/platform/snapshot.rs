//! The registry as the platform reads it: one shared snapshot per platform, used by the
//! request checks of every client (schemas, consumers, capability names), the A2A gateway and
//! the MCP server. Requests (some of which anyone who reaches a server may send) share registry
//! reads instead of each making one.

use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use soorma_common::AgentDefinition;
use tokio::sync::watch;

use super::discovery::Discovery;

/// One successful registry read: when it began, the agents it found, by name, then instance
/// id (where several agents name one capability, its users take the first).
#[derive(Debug)]
pub(crate) struct Read {
    began: Instant,
    agents: Vec<AgentDefinition>,
}

impl Read {
    /// The read begun at `began` that found `agents`.
    pub(crate) fn new(began: Instant, mut agents: Vec<AgentDefinition>) -> Self {
        agents.sort_by(|a, b| (&a.name, &a.agent_id).cmp(&(&b.name, &b.agent_id)));
        Self { began, agents }
    }

    /// When the read began: nothing registered or gone before then is missed.
    pub(crate) fn began(&self) -> Instant {
        self.began
    }
}

impl Deref for Read {
    type Target = [AgentDefinition];

    fn deref(&self) -> &[AgentDefinition] {
        &self.agents
    }
}

/// A successful read, shared (one `Arc` per read: compared by pointer, it says whether two
/// users hold the same read).
pub(crate) type AgentsRead = Arc<Read>;

/// A value derived from registry reads (the request checks' tables, the MCP catalog), built
/// once per read: a read no newer than the one last derived from gets that one's value.
pub(crate) struct PerRead<T> {
    last: Mutex<Option<(AgentsRead, Arc<T>)>>,
}

impl<T> Default for PerRead<T> {
    fn default() -> Self {
        Self {
            last: Mutex::default(),
        }
    }
}

impl<T> PerRead<T> {
    /// The value derived from `read` (by `derive`, unless it or a newer read was derived from
    /// already: callers racing on one read may derive it a few times alike, and the first
    /// stored stays).
    pub(crate) fn of(&self, read: AgentsRead, derive: impl FnOnce(&Read) -> T) -> Arc<T> {
        if let Some(value) = self.at_least(&read) {
            return value;
        }
        let value = Arc::new(derive(&read));
        let mut last = self.lock();
        match &*last {
            Some((taken, newer)) if taken.began >= read.began => newer.clone(),
            _ => {
                *last = Some((read, value.clone()));
                value
            }
        }
    }

    /// The last value derived, with the read it came from.
    pub(crate) fn last(&self) -> Option<(AgentsRead, Arc<T>)> {
        self.lock().clone()
    }

    /// The last value derived, if its read is `read` or newer.
    fn at_least(&self, read: &Read) -> Option<Arc<T>> {
        self.lock()
            .as_ref()
            .filter(|(taken, _)| taken.began >= read.began)
            .map(|(_, value)| value.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(AgentsRead, Arc<T>)>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The registered agents as one read found them, or why it failed.
pub(crate) type Agents = std::result::Result<AgentsRead, String>;

/// The longest a registry read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How much longer than the read's own timeout its waiters give it before they count it as
/// failed themselves (its task may never run: its runtime is no longer driven).
const WAIT_GRACE: Duration = Duration::from_secs(1);

/// A registry read in progress.
struct Reading {
    number: u64,
    /// When it began (the `Instant` its result carries).
    began: Instant,
    /// When it fails, on tokio's clock (the one its timeout runs on, paused in tests).
    deadline: tokio::time::Instant,
    /// Its result once it is done (`None` until then; the channel closes without one if the
    /// task recording it is gone, e.g. when its runtime shuts down).
    result: watch::Receiver<Option<Agents>>,
}

/// The last registry read, shared: at most one read runs at a time, and a request takes the
/// result of a read that began after it arrived (or, through [`recent`](Self::recent), one
/// young enough) instead of making its own. A flood of requests thus costs one read at a time
/// on the registry, and a failed read is shared like a successful one (though a young enough
/// successful read is taken over a later failed one). A read runs in a task of its own: a
/// request that goes away while waiting does not cancel it for the others. Cheap to clone:
/// clones share the reads.
///
/// ```text
/// let agents = platform.agents().current().await?; // read after this call began
/// ```
#[derive(Clone)]
pub(crate) struct AgentsSnapshot {
    discovery: Discovery,
    state: Arc<Mutex<State>>,
    read_timeout: Duration,
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
    /// The last successful read (the same as `last` unless that one failed).
    last_ok: Option<AgentsRead>,
    /// The read in progress.
    reading: Option<Reading>,
    /// How many reads were started.
    reads: u64,
}

impl State {
    /// Records read `number`, begun at `began`, as done with `agents` (once: by the task
    /// recording it, or by its waiters when it does not answer in time).
    fn done(&mut self, number: u64, began: Instant, agents: &Agents) {
        if self.end(number) {
            self.last = Some((began, agents.clone()));
            if let Ok(read) = agents {
                self.last_ok = Some(read.clone());
            }
        }
    }

    /// Ends read `number` if it is the one in progress (else it ended already), with or
    /// without a result: whether it did.
    fn end(&mut self, number: u64) -> bool {
        let in_progress = self.reading.as_ref().is_some_and(|r| r.number == number);
        if in_progress {
            self.reading = None;
        }
        in_progress
    }

    /// The last read, if `reusable` takes when it began; a successful one first.
    fn reusable(&self, reusable: &impl Fn(Instant) -> bool) -> Option<Agents> {
        if let Some(read) = &self.last_ok
            && reusable(read.began)
        {
            return Some(Ok(read.clone()));
        }
        self.last
            .as_ref()
            .filter(|(began, _)| reusable(*began))
            .map(|(_, agents)| agents.clone())
    }
}

impl AgentsSnapshot {
    pub(crate) fn new(discovery: Discovery) -> Self {
        Self {
            discovery,
            state: Arc::default(),
            read_timeout: READ_TIMEOUT,
        }
    }

    /// The same with reads failing after `timeout` (the tests' short reads).
    #[cfg(test)]
    fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// The agents from a read that began after this call: nothing registered or gone before
    /// it is missed.
    pub(crate) async fn current(&self) -> Agents {
        let asked = Instant::now();
        self.read_unless(|began| began >= asked).await
    }

    /// The agents from a read that began at most `max_age` ago (or after this call: however
    /// small `max_age`, a caller waits for two reads at most).
    pub(crate) async fn recent(&self, max_age: Duration) -> Agents {
        let asked = Instant::now();
        self.read_unless(|began| began >= asked || began.elapsed() <= max_age)
            .await
    }

    /// A read at most `max_age` old when `enough` holds for it (say, it lists the agent a
    /// request names); else a read begun after this call, whatever it holds. One read at
    /// most: a read begun after the call is taken as it is, and a failed one is the answer.
    #[cfg_attr(not(any(feature = "gateway", feature = "mcp")), allow(dead_code))]
    pub(crate) async fn recent_with(
        &self,
        max_age: Duration,
        enough: impl Fn(&AgentsRead) -> bool,
    ) -> Agents {
        let asked = Instant::now();
        match self.recent(max_age).await? {
            read if read.began >= asked || enough(&read) => Ok(read),
            _ => self.read_unless(|began| began >= asked).await,
        }
    }

    /// The last read when `reusable` takes when it began; else that of a read in progress
    /// it takes, or of a new read (once the read in progress, if any, is done).
    async fn read_unless(&self, reusable: impl Fn(Instant) -> bool) -> Agents {
        loop {
            // (the read to wait for, its number, start and deadline, whether its result is
            // this caller's)
            let (mut result, number, began, deadline, started, taken) = {
                let mut state = self.lock();
                let state = &mut *state;
                if let Some(agents) = state.reusable(&reusable) {
                    return agents;
                }
                let (reads, mut started) = (&mut state.reads, false);
                let reading = state.reading.get_or_insert_with(|| {
                    (*reads, started) = (*reads + 1, true);
                    self.start_read(*reads)
                });
                (
                    reading.result.clone(),
                    reading.number,
                    reading.began,
                    reading.deadline,
                    started,
                    // A read this caller started is its own, however young it must be.
                    started || reusable(reading.began),
                )
            };
            let done =
                tokio::time::timeout_at(deadline + WAIT_GRACE, result.wait_for(Option::is_some))
                    .await
                    .map(|done| done.ok().and_then(|d| d.clone()));
            let agents = match done {
                Ok(Some(agents)) => agents,
                // The task recording the read is gone without a result: its runtime shut
                // down (that of another caller, when the platform serves several). Not a
                // registry failure: a caller that did not start it reads again, on its own
                // runtime.
                Ok(None) => {
                    self.lock().end(number);
                    if !started {
                        continue;
                    }
                    Err("cannot read the registry: the read was stopped".to_owned())
                }
                // The read has not answered in time (its task may never run: its runtime is
                // no longer driven): a failed read, recorded so that no caller waits on it
                // again.
                Err(_) => {
                    let failed: Agents = Err(format!(
                        "cannot read the registry: no answer within {:?}",
                        self.read_timeout
                    ));
                    self.lock().done(number, began, &failed);
                    failed
                }
            };
            if taken {
                return agents;
            }
            // Too old for this caller: it waited for it, and now reads again.
        }
    }

    /// Read `number`, begun now, in a task of its own (a caller that goes away cancels
    /// nothing), failing at its deadline. A second task records its result as the last read
    /// and hands it to the waiters, however the read ended (a read that panicked is a failed
    /// read).
    fn start_read(&self, number: u64) -> Reading {
        let (began, deadline) = (
            Instant::now(),
            tokio::time::Instant::now() + self.read_timeout,
        );
        let (discovery, state) = (self.discovery.clone(), self.state.clone());
        let timeout = self.read_timeout;
        let (tx, result) = watch::channel(None);
        let read = tokio::spawn(async move {
            match tokio::time::timeout_at(deadline, discovery.all()).await {
                Ok(Ok(agents)) => Ok(Arc::new(Read::new(began, agents))),
                Ok(Err(e)) => Err(format!("cannot read the registry: {e}")),
                Err(_) => Err(format!(
                    "cannot read the registry: no answer within {timeout:?}"
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
        Reading {
            number,
            began,
            deadline,
            result,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use soorma_common::AgentKind;

    use super::*;
    use crate::platform::test_registries::{Counting, Panicking, Scripted};
    use crate::spi::registry::Registry;

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

    /// Starts a read of `snapshot` on a runtime of its own, on another thread, and returns
    /// that runtime once the read is under way there, no longer driven.
    fn read_started_on_another_runtime(snapshot: &AgentsSnapshot) -> tokio::runtime::Runtime {
        let snapshot = snapshot.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let started = tokio::time::timeout(Duration::from_millis(5), snapshot.current());
                assert!(started.await.is_err(), "the read is still under way");
            });
            runtime
        })
        .join()
        .unwrap()
    }

    #[tokio::test]
    async fn a_read_whose_runtime_is_no_longer_driven_fails_in_time_for_the_others() {
        let snapshot = AgentsSnapshot::new(Discovery::new(Arc::new(
            Scripted::answering_after_the_first(),
        )))
        .with_read_timeout(Duration::from_millis(100));
        let idle = read_started_on_another_runtime(&snapshot);
        // Waiting for that read: it fails once its time (and the grace) is up, not never.
        let waited = tokio::time::timeout(Duration::from_secs(5), snapshot.recent(Duration::MAX))
            .await
            .expect("the waiters give up on the read");
        assert!(waited.unwrap_err().contains("no answer within"));
        // The next read runs here, and succeeds.
        let next = tokio::time::timeout(Duration::from_secs(5), snapshot.current());
        assert!(next.await.expect("not waiting on the failed read").is_ok());
        idle.shutdown_background();
    }

    #[tokio::test]
    async fn a_read_whose_runtime_shut_down_is_made_again_by_its_waiters() {
        let snapshot = AgentsSnapshot::new(Discovery::new(Arc::new(
            Scripted::answering_after_the_first(),
        )));
        read_started_on_another_runtime(&snapshot).shutdown_background();
        // Not a registry failure: the waiter reads again, on its own runtime.
        let waited = tokio::time::timeout(Duration::from_secs(5), snapshot.recent(Duration::MAX))
            .await
            .expect("answered at once");
        assert!(waited.is_ok(), "{waited:?}");
    }

    #[tokio::test]
    async fn a_read_given_up_on_does_not_end_the_next_one_when_it_answers_late() {
        let registry = Arc::new(Scripted::default());
        // Read 1 is given up on after 4 s; read 2 then has 3 s, to outlive what follows.
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()))
            .with_read_timeout(Duration::from_secs(3));
        let idle = read_started_on_another_runtime(&snapshot);
        let test = async {
            // A caller gives up on read 1 (its runtime is idle) and makes read 2, which waits.
            let second = tokio::spawn({
                let snapshot = snapshot.clone();
                async move { snapshot.current().await }
            });
            while registry.listings.load(Ordering::SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Read 1's runtime runs again until read 1 has failed at last and its result has
            // been handed on (to nobody: it ended).
            let first_dropped = registry.first_dropped.clone();
            let idle = tokio::task::spawn_blocking(move || {
                idle.block_on(async {
                    while !first_dropped.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                });
                idle
            })
            .await
            .unwrap();
            // Read 2 is still the one in progress: a caller waits for it, and makes no other.
            let third = tokio::time::timeout(Duration::from_millis(300), snapshot.current()).await;
            assert!(third.is_err(), "waits for read 2: {third:?}");
            assert_eq!(registry.listings.load(Ordering::SeqCst), 2);
            registry.release.notify_one();
            assert!(second.await.unwrap().is_ok());
            idle
        };
        tokio::time::timeout(Duration::from_secs(20), test)
            .await
            .expect("the test ends within 20 s")
            .shutdown_background();
    }

    #[tokio::test]
    async fn callers_that_join_a_read_begun_before_them_take_the_next_however_young_they_want_it() {
        let registry = Arc::new(Counting::default());
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()));
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let snapshot = snapshot.clone();
                tokio::spawn(async move { snapshot.recent(Duration::ZERO).await })
            })
            .collect();
        for caller in callers {
            let read = tokio::time::timeout(Duration::from_secs(5), caller).await;
            assert!(read.expect("answered").unwrap().is_ok());
        }
        // The first caller's read, then one begun after the two others asked: theirs.
        assert_eq!(registry.listings.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_young_successful_read_is_taken_over_a_later_failed_one() {
        let registry = Arc::new(Counting::default());
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()));
        assert!(snapshot.current().await.is_ok());
        registry.failing.store(true, Ordering::SeqCst);
        assert!(snapshot.current().await.is_err());
        assert!(snapshot.recent(Duration::from_secs(60)).await.is_ok());
        assert_eq!(registry.listings.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_read_is_the_answer_when_a_young_read_is_wanted() {
        let registry = Arc::new(Counting::default());
        registry.failing.store(true, Ordering::SeqCst);
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()));
        let read = snapshot
            .recent_with(Duration::from_secs(60), |_| false)
            .await;
        assert!(read.is_err());
        assert_eq!(registry.listings.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_young_enough_read_that_lacks_what_is_wanted_costs_one_more_read_at_most() {
        let registry = Arc::new(Counting::default());
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()));
        let lists_calc = |read: &AgentsRead| read.iter().any(|a| a.name == "calc");
        // Nothing read yet: the read made for the call is taken as it is.
        let read = snapshot
            .recent_with(Duration::from_secs(60), lists_calc)
            .await
            .unwrap();
        assert!(read.is_empty());
        assert_eq!(registry.listings.load(Ordering::SeqCst), 1);

        registry
            .register(AgentDefinition::new("calc-1", "calc", AgentKind::Tool))
            .await
            .unwrap();
        // Young enough but without calc: one read begun after the call.
        let read = snapshot
            .recent_with(Duration::from_secs(60), lists_calc)
            .await
            .unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(registry.listings.load(Ordering::SeqCst), 2);
        // With calc: no read.
        snapshot
            .recent_with(Duration::from_secs(60), lists_calc)
            .await
            .unwrap();
        assert_eq!(registry.listings.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_read_a_caller_starts_is_its_own_however_young_it_must_be() {
        let registry = Arc::new(Counting::default());
        let snapshot = AgentsSnapshot::new(Discovery::new(registry.clone()));
        for reads in 1..=3 {
            let read =
                tokio::time::timeout(Duration::from_secs(5), snapshot.recent(Duration::ZERO));
            assert!(read.await.expect("one read, taken").is_ok());
            assert_eq!(registry.listings.load(Ordering::SeqCst), reads);
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
