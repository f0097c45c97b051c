//! Durable timers: an event to publish at a due time, kept in the `timers` bucket until it
//! fires (or is cancelled), so a restarted process fires the timers of the one that stopped.
//! Timer events have stable ids: when two processes fire the same timer, the bus keeps one.
//! A timer event is stamped when it fires: its envelope's `time` is the firing time, and its
//! payload (a JSON object) gets `scheduled_for`, the time it was due.
//!
//! Each platform has one timer service: one task firing the timers it knows in due order
//! (one schedule entry per timer, however often it is armed). It starts with the first agent
//! that needs it (workers and planners; a process that only runs a client fires nothing),
//! recovers the stored timers of every tenant once, and stops at [`Platform::shutdown`] or
//! when the last clone of the platform is dropped.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use soorma_common::EventEnvelope;
use tokio::sync::{Notify, OnceCell};
use tokio::task::JoinHandle;

use super::Platform;
use crate::error::Result;
use crate::spi::bus::EventBus;
use crate::spi::envelope::check_envelope;
use crate::spi::state::{self, StateKey, StateStore};
use crate::util::{BoxFuture, now_rfc3339, rfc3339_of_millis};

/// The state bucket holding pending timers (`<tenant>.<timer id>`).
pub const TIMERS_BUCKET: &str = "timers";

/// The longest wait before firing a timer again whose publish failed.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TimerRecord {
    /// When to fire, in milliseconds since the Unix epoch.
    due_at_ms: u64,
    /// What to publish.
    envelope: EventEnvelope,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn key(tenant: &str, id: &str) -> StateKey {
    StateKey::new(TIMERS_BUCKET, tenant, id)
}

/// Stores a timer that publishes `envelope` after `after`, and arms it on the platform's timer
/// service. The envelope's id is the timer id; scheduling an id again replaces the timer.
pub(crate) async fn schedule(
    platform: &Platform,
    envelope: EventEnvelope,
    after: Duration,
) -> Result<()> {
    // Refused now, not retried for ever when it fires.
    check_envelope(&envelope)?;
    let tenant = envelope.tenant().to_owned();
    let record = TimerRecord {
        due_at_ms: now_ms().saturating_add(millis(after)),
        envelope,
    };
    let key = key(&tenant, &record.envelope.id);
    platform
        .state()
        .put(&key, state::encode("timer", &record)?)
        .await?;
    platform.timers().arm(key, record.due_at_ms);
    Ok(())
}

/// Forgets a timer (it may still fire if it is due right now; timer events must be idempotent).
pub(crate) async fn cancel(platform: &Platform, tenant: &str, id: &str) -> Result<()> {
    let key = key(tenant, id);
    platform.state().delete(&key).await?;
    platform.timers().disarm(&key);
    Ok(())
}

/// Makes sure the platform's timer service runs and has recovered the stored timers of every
/// tenant, those of agent instances that stopped included (idempotent): the start hook of the
/// layers whose handlers schedule timers (workers, planners).
pub(crate) fn ensure_running(platform: &Platform) -> BoxFuture<'_, ()> {
    Box::pin(platform.timers().ensure_running())
}

/// The timers a service knows, in due order; one entry per timer.
#[derive(Default)]
struct Schedule {
    due: BTreeSet<(u64, StateKey)>,
    /// Each timer's due time and how many times firing it failed.
    by_key: HashMap<StateKey, (u64, u32)>,
}

impl Schedule {
    fn insert(&mut self, key: StateKey, due_at_ms: u64, failures: u32) {
        if let Some((old, _)) = self.by_key.insert(key.clone(), (due_at_ms, failures)) {
            self.due.remove(&(old, key.clone()));
        }
        self.due.insert((due_at_ms, key));
    }

    fn remove(&mut self, key: &StateKey) -> Option<(u64, u32)> {
        let entry = self.by_key.remove(key)?;
        self.due.remove(&(entry.0, key.clone()));
        Some(entry)
    }
}

/// What the firing task shares with the service.
struct Shared {
    bus: Arc<dyn EventBus>,
    state: Arc<dyn StateStore>,
    schedule: Mutex<Schedule>,
    wake: Notify,
}

impl Shared {
    fn schedule(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn arm(&self, key: StateKey, due_at_ms: u64, failures: u32) {
        self.schedule().insert(key, due_at_ms, failures);
        self.wake.notify_one();
    }

    /// Fires the timers in due order, for ever.
    async fn run(self: Arc<Self>) {
        loop {
            let next = self.schedule().due.first().cloned();
            let Some((due_at_ms, key)) = next else {
                self.wake.notified().await;
                continue;
            };
            let now = now_ms();
            if due_at_ms > now {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(due_at_ms - now)) => {}
                    () = self.wake.notified() => {}
                }
                continue;
            }
            let Some((_, failures)) = self.schedule().remove(&key) else {
                continue;
            };
            self.fire(key, failures).await;
        }
    }

    /// Publishes a due timer's event and deletes the timer; a failure arms it again with
    /// backoff (the timer stays stored meanwhile).
    async fn fire(&self, key: StateKey, failures: u32) {
        let record = match state::load::<TimerRecord>(&*self.state, "timer", &key).await {
            // Cancelled meanwhile (answered): nothing to do.
            Ok(None) => return,
            Ok(Some(stored)) => stored.value,
            Err(e) if !e.is_retryable() => {
                tracing::warn!(error = %e, timer = %key, "skipping an unreadable timer");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, timer = %key, "cannot read a due timer; trying again");
                return self.retry(key, failures);
            }
        };
        // A timer fires in its own tenant only: one stored under a tenant for another's event
        // (which only a writer of the state bucket could store) is dropped.
        if record.envelope.tenant() != key.tenant {
            tracing::warn!(timer = %key, event_tenant = %record.envelope.tenant(), "dropping a timer whose event is another tenant's");
            if let Err(e) = self.state.delete(&key).await {
                tracing::debug!(error = %e, timer = %key, "could not delete a foreign timer");
            }
            return;
        }
        // Scheduled again meanwhile, for later.
        if record.due_at_ms > now_ms() {
            return self.arm(key, record.due_at_ms, 0);
        }
        let envelope = stamped(record.envelope, record.due_at_ms, now_rfc3339());
        let id = envelope.id.clone();
        match self.bus.publish(envelope).await {
            Ok(()) => {
                tracing::debug!(timer = %id, "timer fired");
                if let Err(e) = self.state.delete(&key).await {
                    tracing::debug!(error = %e, timer = %id, "could not delete a fired timer");
                }
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, timer = %id, "could not fire a timer; trying again");
                self.retry(key, failures);
            }
            Err(e) => {
                // Its event would be refused every time (one stored before the rule it breaks).
                tracing::error!(error = %e, timer = %id, "a timer's event cannot be published; the timer is dropped");
                if let Err(e) = self.state.delete(&key).await {
                    tracing::debug!(error = %e, timer = %id, "could not delete a dropped timer");
                }
            }
        }
    }

    fn retry(&self, key: StateKey, failures: u32) {
        let delay = Duration::from_secs(1)
            .saturating_mul(1 << failures.min(6))
            .min(MAX_RETRY_DELAY);
        self.arm(
            key,
            now_ms().saturating_add(millis(delay)),
            failures.saturating_add(1),
        );
    }

    /// Arms every stored timer of every tenant; returns how many. A tenant whose timers
    /// cannot be listed does not hold up the others: the first such error is returned once
    /// they are armed (and the next start tries again; arming a timer twice fires it once).
    async fn recover(&self) -> Result<usize> {
        let mut armed = 0;
        let mut failed = None;
        for tenant in self.state.tenants(TIMERS_BUCKET).await? {
            let ids = match self.state.keys(TIMERS_BUCKET, &tenant).await {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(error = %e, %tenant, "could not list a tenant's timers");
                    failed.get_or_insert(e);
                    continue;
                }
            };
            for id in ids {
                let key = key(&tenant, &id);
                match state::load::<TimerRecord>(&*self.state, "timer", &key).await {
                    Ok(Some(stored)) => {
                        self.arm(key, stored.value.due_at_ms, 0);
                        armed += 1;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, timer = %key, "skipping an unreadable timer")
                    }
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(armed),
        }
    }
}

/// A timer's event as it fires at `fired_at`: the envelope's time is the firing time, and an
/// object payload gets `scheduled_for` (the due time, RFC 3339).
fn stamped(mut envelope: EventEnvelope, due_at_ms: u64, fired_at: String) -> EventEnvelope {
    if let serde_json::Value::Object(data) = &mut envelope.data {
        data.insert("scheduled_for".into(), rfc3339_of_millis(due_at_ms).into());
    }
    envelope.time = Some(fired_at);
    envelope
}

enum Run {
    /// Not needed yet.
    Idle,
    Running(JoinHandle<()>),
    /// Shut down: timers are stored but no longer fired here.
    Stopped,
}

/// A platform's timer service (see the module documentation).
pub(crate) struct Timers {
    shared: Arc<Shared>,
    run: Mutex<Run>,
    recovered: OnceCell<()>,
}

impl Timers {
    pub(crate) fn new(bus: Arc<dyn EventBus>, state: Arc<dyn StateStore>) -> Self {
        Self {
            shared: Arc::new(Shared {
                bus,
                state,
                schedule: Mutex::default(),
                wake: Notify::new(),
            }),
            run: Mutex::new(Run::Idle),
            recovered: OnceCell::new(),
        }
    }

    fn run(&self) -> MutexGuard<'_, Run> {
        self.run.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the firing task unless running or stopped; `false` once stopped.
    fn start(&self) -> bool {
        let mut run = self.run();
        match &*run {
            Run::Stopped => false,
            Run::Running(_) => true,
            Run::Idle => {
                *run = Run::Running(tokio::spawn(self.shared.clone().run()));
                true
            }
        }
    }

    /// Starts the service and recovers the stored timers of every tenant, once (a failed
    /// recovery is tried again by the next call).
    pub(crate) async fn ensure_running(&self) {
        if !self.start() {
            tracing::debug!("the platform is shut down; its timers are not fired here");
            return;
        }
        let recovered = self
            .recovered
            .get_or_try_init(|| async {
                let armed = self.shared.recover().await?;
                if armed > 0 {
                    tracing::info!(timers = armed, "pending timers restored");
                }
                Ok::<(), crate::error::Error>(())
            })
            .await;
        if let Err(e) = recovered {
            tracing::warn!(error = %e, "could not restore pending timers; the next agent start tries again");
        }
    }

    /// Fires the timer at `key` at `due_at_ms` (replacing its earlier due time).
    pub(crate) fn arm(&self, key: StateKey, due_at_ms: u64) {
        if self.start() {
            self.shared.arm(key, due_at_ms, 0);
        }
    }

    /// Stops waiting for the timer at `key`.
    pub(crate) fn disarm(&self, key: &StateKey) {
        self.shared.schedule().remove(key);
    }

    /// Stops firing timers (they stay stored for the next process); waits for the firing task
    /// to end.
    pub(crate) async fn shutdown(&self) {
        let previous = std::mem::replace(&mut *self.run(), Run::Stopped);
        self.shared.schedule().by_key.clear();
        self.shared.schedule().due.clear();
        if let Run::Running(task) = previous {
            task.abort();
            let _ = task.await;
        }
    }

    /// How many timers the service waits for.
    #[cfg(test)]
    pub(crate) fn armed(&self) -> usize {
        self.shared.schedule().by_key.len()
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Run::Running(task) = &*self.run() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use soorma_common::{EventEnvelope, Topic};

    use super::*;
    use crate::engine::EngineParts;
    use crate::engine::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    use crate::spi::bus::{Subscription, SubscriptionSpec};

    /// A bus recording every publish (the embedded bus would hide a doubled one: it drops a
    /// republished id).
    #[derive(Default)]
    struct Recording {
        inner: EmbeddedBus,
        published: Mutex<Vec<String>>,
    }

    impl Recording {
        fn published(&self) -> Vec<String> {
            let mut ids = self.published.lock().unwrap().clone();
            ids.sort();
            ids
        }
    }

    impl EventBus for Recording {
        fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
            self.published.lock().unwrap().push(envelope.id.clone());
            self.inner.publish(envelope)
        }

        fn subscribe(
            &self,
            spec: SubscriptionSpec,
        ) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
            self.inner.subscribe(spec)
        }

        fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
            self.inner.observe(topic)
        }
    }

    fn platform(bus: &Arc<Recording>, store: &MemoryStore) -> Platform {
        Platform::from_parts(EngineParts::new(
            "recording",
            bus.clone(),
            Arc::new(store.clone()),
            Arc::new(MemoryRegistry::new()),
        ))
    }

    fn timer(tenant: &str, id: &str) -> EventEnvelope {
        EventEnvelope::new(id, "test", Topic::ActionResults, "task.timeout").with_tenant_id(tenant)
    }

    /// Stores a timer as an earlier process did (without arming it here).
    async fn stored(store: &MemoryStore, tenant: &str, id: &str, due_at_ms: u64) {
        let record = TimerRecord {
            due_at_ms,
            envelope: timer(tenant, id),
        };
        store
            .put(&key(tenant, id), state::encode("timer", &record).unwrap())
            .await
            .unwrap();
    }

    /// A store whose listing of one tenant's timers fails (its keys cannot be read).
    #[derive(Clone)]
    struct UnlistableTenant {
        inner: MemoryStore,
        tenant: &'static str,
    }

    impl StateStore for UnlistableTenant {
        fn get<'a>(
            &'a self,
            key: &'a StateKey,
        ) -> BoxFuture<'a, Result<Option<state::Versioned<Vec<u8>>>>> {
            self.inner.get(key)
        }
        fn create<'a>(
            &'a self,
            key: &'a StateKey,
            value: Vec<u8>,
        ) -> BoxFuture<'a, Result<state::Revision>> {
            self.inner.create(key, value)
        }
        fn update<'a>(
            &'a self,
            key: &'a StateKey,
            value: Vec<u8>,
            expected: state::Revision,
        ) -> BoxFuture<'a, Result<state::Revision>> {
            self.inner.update(key, value, expected)
        }
        fn put<'a>(
            &'a self,
            key: &'a StateKey,
            value: Vec<u8>,
        ) -> BoxFuture<'a, Result<state::Revision>> {
            self.inner.put(key, value)
        }
        fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<()>> {
            self.inner.delete(key)
        }
        fn keys<'a>(
            &'a self,
            bucket: &'static str,
            tenant: &'a str,
        ) -> BoxFuture<'a, Result<Vec<String>>> {
            if tenant == self.tenant {
                return Box::pin(async {
                    Err(crate::error::EngineError::new(
                        crate::error::EngineErrorKind::StateRead,
                        "the listing stalled",
                    )
                    .into())
                });
            }
            self.inner.keys(bucket, tenant)
        }
        fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Vec<String>>> {
            self.inner.tenants(bucket)
        }
    }

    #[tokio::test]
    async fn a_tenant_whose_timers_cannot_be_listed_does_not_stop_the_others_from_firing() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        // `aaa` is listed first.
        stored(&store, "aaa", "stuck", now_ms() - 10).await;
        stored(&store, "acme", "overdue", now_ms() - 10).await;
        let failing = UnlistableTenant {
            inner: store.clone(),
            tenant: "aaa",
        };
        let platform = Platform::from_parts(EngineParts::new(
            "recording",
            bus.clone(),
            Arc::new(failing),
            Arc::new(MemoryRegistry::new()),
        ));
        ensure_running(&platform).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(bus.published(), ["overdue"], "acme's timer fired");
    }

    #[tokio::test]
    async fn one_service_recovers_every_tenant_once_and_fires_each_timer_once() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        stored(&store, "acme", "overdue", now_ms() - 10).await;
        stored(&store, "default", "soon", now_ms() + 100).await;
        stored(&store, "globex", "later", now_ms() + 3_600_000).await;
        let platform = platform(&bus, &store);
        // Two agents starting at once, and a third later: one recovery, one entry per timer.
        tokio::join!(ensure_running(&platform), ensure_running(&platform));
        ensure_running(&platform).await;
        schedule(
            &platform,
            timer("globex", "later"),
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(bus.published(), ["overdue", "soon"]);
        assert!(store.keys(TIMERS_BUCKET, "acme").await.unwrap().is_empty());
        assert!(
            store
                .keys(TIMERS_BUCKET, "default")
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(platform.timers().armed(), 1);
        cancel(&platform, "globex", "later").await.unwrap();
        assert_eq!(platform.timers().armed(), 0);
        assert!(store.tenants(TIMERS_BUCKET).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_timer_whose_event_the_bus_would_refuse_is_refused_or_dropped_not_retried() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        let platform = platform(&bus, &store);
        let long = "t".repeat(crate::spi::envelope::MAX_ID_LEN + 1);
        let refused = schedule(&platform, timer("acme", &long), Duration::from_millis(10)).await;
        assert!(
            matches!(refused, Err(crate::error::Error::InvalidArgument(_))),
            "{refused:?}"
        );
        assert!(store.keys(TIMERS_BUCKET, "acme").await.unwrap().is_empty());
        // One stored before the rule, due now: dropped when it fires, not re-armed.
        stored(&store, "acme", &long, now_ms() - 10).await;
        ensure_running(&platform).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(store.keys(TIMERS_BUCKET, "acme").await.unwrap().is_empty());
        assert_eq!(platform.timers().armed(), 0);
        // Tried once (the bus refused it), not again.
        assert_eq!(bus.published().len(), 1);
    }

    #[tokio::test]
    async fn a_timer_stored_under_one_tenant_for_anothers_event_is_dropped_unfired() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        let record = TimerRecord {
            due_at_ms: now_ms() - 10,
            envelope: timer("globex", "forged"),
        };
        store
            .put(
                &key("acme", "forged"),
                state::encode("timer", &record).unwrap(),
            )
            .await
            .unwrap();
        stored(&store, "acme", "own", now_ms() - 10).await;
        let platform = platform(&bus, &store);
        ensure_running(&platform).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(bus.published(), ["own"]);
        assert!(store.keys(TIMERS_BUCKET, "acme").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_rescheduled_timer_fires_once_at_its_new_time() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        let platform = platform(&bus, &store);
        ensure_running(&platform).await;
        schedule(&platform, timer("acme", "t"), Duration::from_millis(50))
            .await
            .unwrap();
        schedule(&platform, timer("acme", "t"), Duration::from_millis(250))
            .await
            .unwrap();
        assert_eq!(platform.timers().armed(), 1);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(bus.published().is_empty());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(bus.published(), ["t"]);
    }

    #[tokio::test]
    async fn a_shut_down_platform_fires_nothing_and_the_next_one_fires_its_timers() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        let first = platform(&bus, &store);
        ensure_running(&first).await;
        schedule(&first, timer("acme", "t"), Duration::from_millis(100))
            .await
            .unwrap();
        first.shutdown().await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(bus.published().is_empty());
        assert_eq!(store.keys(TIMERS_BUCKET, "acme").await.unwrap(), ["t"]);
        // Started again after shutdown: still nothing.
        ensure_running(&first).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(bus.published().is_empty());

        let next = platform(&bus, &store);
        ensure_running(&next).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(bus.published(), ["t"]);
    }

    #[test]
    fn a_fired_timer_event_carries_the_time_it_fired_and_the_time_it_was_due() {
        let scheduled = timer("acme", "t")
            .with_time("2026-01-01T00:00:00.000Z")
            .with_data(serde_json::json!({"task_id": "x"}));
        // Due at 2026-01-01T00:00:05.250Z, fired a little later.
        let due = 1_767_225_605_250;
        let fired = stamped(scheduled, due, "2026-01-01T00:00:05.300Z".into());
        assert_eq!(fired.time.as_deref(), Some("2026-01-01T00:00:05.300Z"));
        assert_eq!(fired.data["scheduled_for"], "2026-01-01T00:00:05.250Z");
        assert_eq!(fired.data["task_id"], "x");
        // A payload that is not an object is kept as it is.
        let fired = stamped(
            timer("acme", "t").with_data(serde_json::json!(7)),
            due,
            "z".into(),
        );
        assert_eq!(fired.data, serde_json::json!(7));
    }

    #[tokio::test]
    async fn a_client_only_process_fires_nothing() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        stored(&store, "acme", "t", now_ms()).await;
        let platform = platform(&bus, &store);
        platform
            .bus()
            .publish(EventEnvelope::new("e", "cli", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(bus.published(), ["e"]);
    }

    #[tokio::test]
    async fn dropping_the_last_platform_clone_stops_its_timer_task() {
        let (bus, store) = (Arc::new(Recording::default()), MemoryStore::new());
        let platform = platform(&bus, &store);
        ensure_running(&platform).await;
        schedule(&platform, timer("acme", "t"), Duration::from_secs(3600))
            .await
            .unwrap();
        let task = Arc::downgrade(&platform.timers().shared);
        drop(platform);
        tokio::time::timeout(Duration::from_secs(1), async {
            while task.upgrade().is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the timer task ends with the platform");
    }
}
