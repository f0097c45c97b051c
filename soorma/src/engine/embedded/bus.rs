//! The in-process bus: consumer groups with bounded queues and back-pressure, observers that
//! never slow publishers down, and a duplicate window.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, Instant};

use soorma_common::events::DEAD_LETTERED;
use soorma_common::{EventEnvelope, Topic};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, TryAcquireError, broadcast, mpsc};

use crate::error::{Error, Result};
use crate::spi::bus::{
    Acker, Delivery, EventBus, EventFilter, Settlement, Subscription, SubscriptionSpec,
    still_failing,
};
use crate::spi::envelope::check_envelope;
use crate::spi::tenant::validate_tenant;
use crate::util::{BoxFuture, new_id, now_rfc3339};

type Tap = Arc<dyn Fn(&Arc<EventEnvelope>) + Send + Sync>;

/// How the embedded bus bounds its queues.
///
/// Every consumer group (an agent's subscription to a topic, per tenant filter) has a queue of
/// at most `queue_capacity` events; an event holds its place from publication until its
/// delivery is settled (queued, being handled, or waiting to be redelivered), as NATS bounds
/// a consumer's pending acknowledgements. A publisher waits for room in every queue the event
/// goes to, for at most `publish_timeout`; then the publish fails with a retryable
/// [`Error::Timeout`] and nothing is delivered.
///
/// The wait is bounded so that a cycle cannot hang for ever: an agent whose handler publishes
/// into a full queue whose consumer is itself blocked publishing back (a worker and its tool,
/// each queue full) gets the timeout error; its handler fails, the runtime redelivers the event
/// with backoff and, after `max_deliver` attempts, dead-letters it, which frees its place. A
/// full queue of a healthy consumer only delays publishers; size `queue_capacity` above the
/// agents' concurrency and `publish_timeout` above their slowest handling.
///
/// Observers ([`EventBus::observe`]) never slow publishers down: each has a buffer of
/// `observer_capacity` events; one that falls behind loses its oldest events (counted by
/// [`EmbeddedBus::observer_dropped`] and logged).
///
/// ```
/// use std::time::Duration;
/// use soorma::embedded::{EmbeddedBus, EmbeddedConfig};
///
/// let config = EmbeddedConfig::new()
///     .with_queue_capacity(100)
///     .with_publish_timeout(Duration::from_millis(500));
/// let bus = EmbeddedBus::with_config(config)?;
/// # let _ = bus;
/// assert!(EmbeddedBus::with_config(EmbeddedConfig::new().with_queue_capacity(0)).is_err());
/// # Ok::<(), soorma::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmbeddedConfig {
    /// The most events a consumer group's queue holds (queued, in flight or awaiting
    /// redelivery); default [`DEFAULT_QUEUE_CAPACITY`](Self::DEFAULT_QUEUE_CAPACITY).
    pub queue_capacity: usize,
    /// How long a publish waits for room; default
    /// [`DEFAULT_PUBLISH_TIMEOUT`](Self::DEFAULT_PUBLISH_TIMEOUT).
    pub publish_timeout: Duration,
    /// How many events an observer buffers before it loses the oldest; default
    /// [`DEFAULT_OBSERVER_CAPACITY`](Self::DEFAULT_OBSERVER_CAPACITY).
    pub observer_capacity: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl EmbeddedConfig {
    /// The default queue capacity per consumer group.
    pub const DEFAULT_QUEUE_CAPACITY: usize = 10_000;
    /// The default publish timeout.
    pub const DEFAULT_PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default observer buffer.
    pub const DEFAULT_OBSERVER_CAPACITY: usize = 16_384;
    /// The largest queue capacity.
    pub const MAX_QUEUE_CAPACITY: usize = Semaphore::MAX_PERMITS;
    /// The largest observer buffer (allocated when the first observer starts).
    pub const MAX_OBSERVER_CAPACITY: usize = 1 << 20;

    /// The defaults.
    ///
    /// ```
    /// let config = soorma::embedded::EmbeddedConfig::new();
    /// assert_eq!(config.queue_capacity, soorma::embedded::EmbeddedConfig::DEFAULT_QUEUE_CAPACITY);
    /// ```
    pub fn new() -> Self {
        Self {
            queue_capacity: Self::DEFAULT_QUEUE_CAPACITY,
            publish_timeout: Self::DEFAULT_PUBLISH_TIMEOUT,
            observer_capacity: Self::DEFAULT_OBSERVER_CAPACITY,
        }
    }

    /// Sets the queue capacity per consumer group (1 to
    /// [`MAX_QUEUE_CAPACITY`](Self::MAX_QUEUE_CAPACITY)).
    ///
    /// ```
    /// let config = soorma::embedded::EmbeddedConfig::new().with_queue_capacity(64);
    /// assert_eq!(config.queue_capacity, 64);
    /// ```
    #[must_use]
    pub fn with_queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity;
        self
    }

    /// Sets how long a publish waits for room in a full queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// let config = soorma::embedded::EmbeddedConfig::new().with_publish_timeout(Duration::from_secs(1));
    /// assert_eq!(config.publish_timeout, Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn with_publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Sets each observer's buffer (1 to [`MAX_OBSERVER_CAPACITY`](Self::MAX_OBSERVER_CAPACITY)).
    ///
    /// ```
    /// let config = soorma::embedded::EmbeddedConfig::new().with_observer_capacity(1024);
    /// assert_eq!(config.observer_capacity, 1024);
    /// ```
    #[must_use]
    pub fn with_observer_capacity(mut self, capacity: usize) -> Self {
        self.observer_capacity = capacity;
        self
    }

    fn check(&self) -> Result<()> {
        if !(1..=Self::MAX_QUEUE_CAPACITY).contains(&self.queue_capacity) {
            return Err(Error::InvalidArgument(format!(
                "embedded bus queue capacity {} is out of range 1..={}",
                self.queue_capacity,
                Self::MAX_QUEUE_CAPACITY
            )));
        }
        if !(1..=Self::MAX_OBSERVER_CAPACITY).contains(&self.observer_capacity) {
            return Err(Error::InvalidArgument(format!(
                "embedded bus observer capacity {} is out of range 1..={}",
                self.observer_capacity,
                Self::MAX_OBSERVER_CAPACITY
            )));
        }
        Ok(())
    }
}

/// One consumer group's queue, as [`EmbeddedBus::queue_stats`] reports it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::bus::{EventBus, EventFilter, SubscriptionSpec};
/// use soorma::{EventEnvelope, Topic};
///
/// let bus = soorma::embedded::EmbeddedBus::new();
/// let _sub = bus.subscribe(SubscriptionSpec::new("audit", Topic::BusinessFacts, EventFilter::All)).await?;
/// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
/// let stats = &bus.queue_stats()[0];
/// assert_eq!((stats.group.as_str(), stats.queued, stats.in_use), ("audit", 1, 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// The consumer group.
    pub group: String,
    /// The topic.
    pub topic: Topic,
    /// The tenant filter of the group's subscription.
    pub tenant: Option<String>,
    /// Events waiting to be delivered.
    pub queued: usize,
    /// Places taken: queued, being handled, or waiting to be redelivered.
    pub in_use: usize,
    /// The queue's capacity.
    pub capacity: usize,
    /// Subscriptions sharing the queue.
    pub members: usize,
}

struct Queued {
    envelope: Arc<EventEnvelope>,
    attempt: u32,
    /// The event's place in the queue, held until its delivery is settled.
    place: OwnedSemaphorePermit,
}

/// One consumer group's queue; its members compete for the events in it. The channel is
/// unbounded but every item holds one of `places`, so it never holds more than the capacity.
struct GroupQueue {
    group: String,
    topic: Topic,
    tenant: Option<String>,
    places: Arc<Semaphore>,
    capacity: usize,
    tx: mpsc::UnboundedSender<Queued>,
    rx: Mutex<mpsc::UnboundedReceiver<Queued>>,
    queued: AtomicUsize,
    members: AtomicUsize,
}

impl GroupQueue {
    fn push(&self, item: Queued) {
        self.queued.fetch_add(1, Ordering::Relaxed);
        // The queue owns its receiver, so the send cannot fail.
        let _ = self.tx.send(item);
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            group: self.group.clone(),
            topic: self.topic,
            tenant: self.tenant.clone(),
            queued: self.queued.load(Ordering::Relaxed),
            in_use: self.capacity - self.places.available_permits().min(self.capacity),
            capacity: self.capacity,
            members: self.members.load(Ordering::Relaxed),
        }
    }

    fn full(&self, timeout: Duration) -> Error {
        let tenant = self
            .tenant
            .as_deref()
            .map(|t| format!(" (tenant `{t}`)"))
            .unwrap_or_default();
        Error::Timeout {
            after: timeout,
            what: format!(
                "room in the queue of consumer group `{}` on `{}`{tenant}, full at {} events",
                self.group, self.topic, self.capacity
            ),
        }
    }
}

struct Route {
    group: String,
    tenant: Option<String>,
    filter: EventFilter,
    queue: Arc<GroupQueue>,
}

/// Event ids published recently: a republished id is dropped, as NATS does with `Nats-Msg-Id`.
#[derive(Default)]
struct DuplicateWindow {
    /// Each remembered id with the sequence number of its entry in `order`.
    ids: HashMap<String, u64>,
    order: VecDeque<(Instant, String, u64)>,
    next: u64,
}

/// What the duplicate window remembers of an event: its id within its tenant, topic and type
/// (as NATS keeps a de-duplication id only for messages of the same subject), so one tenant
/// cannot suppress another's event by publishing its id first.
fn duplicate_key(envelope: &EventEnvelope) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{}",
        envelope.tenant(),
        envelope.topic,
        envelope.event_type,
        envelope.id
    )
}

/// How long an id is remembered (NATS's default duplicate window).
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// At most this many ids are remembered; under heavier load the window is shorter.
const DUPLICATE_WINDOW_IDS: usize = 100_000;

impl DuplicateWindow {
    /// Records `id`; `false` if it was published within the window.
    fn first_seen(&mut self, id: &str) -> bool {
        let now = Instant::now();
        while let Some((at, _, _)) = self.order.front() {
            if now.duration_since(*at) > DUPLICATE_WINDOW
                || self.order.len() >= DUPLICATE_WINDOW_IDS
            {
                if let Some((_, old, seq)) = self.order.pop_front()
                    && self.ids.get(&old) == Some(&seq)
                {
                    self.ids.remove(&old);
                }
            } else {
                break;
            }
        }
        if self.ids.contains_key(id) {
            return false;
        }
        self.next += 1;
        self.ids.insert(id.to_owned(), self.next);
        self.order.push_back((now, id.to_owned(), self.next));
        true
    }

    /// Forgets `id` (its publish failed), so publishing it again delivers it.
    fn forget(&mut self, id: &str) {
        self.ids.remove(id);
    }
}

#[derive(Default)]
struct Routes {
    by_topic: HashMap<Topic, Vec<Route>>,
    taps: Vec<Tap>,
}

/// The in-process bus.
///
/// Consumer-group queues are bounded, with back-pressure on publishers, and observers never
/// block them; see [`EmbeddedConfig`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::bus::{EventBus, EventFilter, SubscriptionSpec};
/// use soorma::embedded::EmbeddedBus;
/// use soorma::{EventEnvelope, Topic};
///
/// let bus = EmbeddedBus::new();
/// let mut sub = bus.subscribe(SubscriptionSpec::new("audit", Topic::BusinessFacts, EventFilter::All)).await?;
/// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
/// let delivery = sub.next().await.unwrap();
/// assert_eq!(delivery.envelope.event_type, "order.placed");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EmbeddedBus {
    routes: Arc<RwLock<Routes>>,
    recent: Arc<std::sync::Mutex<DuplicateWindow>>,
    observers: Arc<OnceLock<broadcast::Sender<Arc<EventEnvelope>>>>,
    observer_dropped: Arc<AtomicU64>,
    config: Arc<EmbeddedConfig>,
}

impl Default for EmbeddedBus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for EmbeddedBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedBus")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EmbeddedBus {
    /// A new, empty bus with the default [`EmbeddedConfig`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    ///
    /// let bus = Arc::new(EmbeddedBus::new());
    /// let parts = soorma::EngineParts::new("in-process", bus, Arc::new(MemoryStore::new()), Arc::new(MemoryRegistry::new()));
    /// let platform = soorma::Platform::from_parts(parts);
    /// assert_eq!(platform.kind(), "in-process");
    /// ```
    pub fn new() -> Self {
        Self::build(EmbeddedConfig::new())
    }

    /// A new, empty bus bounded by `config`; [`Error::InvalidArgument`] for a capacity out of
    /// range.
    ///
    /// ```
    /// use soorma::embedded::{EmbeddedBus, EmbeddedConfig};
    /// let bus = EmbeddedBus::with_config(EmbeddedConfig::new().with_queue_capacity(16))?;
    /// assert_eq!(bus.config().queue_capacity, 16);
    /// # Ok::<(), soorma::Error>(())
    /// ```
    pub fn with_config(config: EmbeddedConfig) -> Result<Self> {
        config.check()?;
        Ok(Self::build(config))
    }

    fn build(config: EmbeddedConfig) -> Self {
        Self {
            routes: Arc::default(),
            recent: Arc::default(),
            observers: Arc::default(),
            observer_dropped: Arc::default(),
            config: Arc::new(config),
        }
    }

    /// The bus's bounds.
    ///
    /// ```
    /// let bus = soorma::embedded::EmbeddedBus::new();
    /// assert_eq!(bus.config().observer_capacity, soorma::embedded::EmbeddedConfig::DEFAULT_OBSERVER_CAPACITY);
    /// ```
    pub fn config(&self) -> &EmbeddedConfig {
        &self.config
    }

    /// The queue of every consumer group with a live subscription, sorted by topic, group and
    /// tenant.
    ///
    /// ```
    /// assert!(soorma::embedded::EmbeddedBus::new().queue_stats().is_empty());
    /// ```
    pub fn queue_stats(&self) -> Vec<QueueStats> {
        let mut stats: Vec<QueueStats> = self
            .read()
            .by_topic
            .values()
            .flatten()
            .map(|r| r.queue.stats())
            .collect();
        stats.sort_by(|a, b| {
            (a.topic.as_str(), &a.group, &a.tenant).cmp(&(b.topic.as_str(), &b.group, &b.tenant))
        });
        stats
    }

    /// How many events observers have lost so far by falling behind.
    ///
    /// ```
    /// assert_eq!(soorma::embedded::EmbeddedBus::new().observer_dropped(), 0);
    /// ```
    pub fn observer_dropped(&self) -> u64 {
        self.observer_dropped.load(Ordering::Relaxed)
    }

    /// Calls `tap` synchronously with every event published from now on (for tests and tools);
    /// it runs on the publisher's task, so it must be quick.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::EventBus;
    /// use std::sync::{Arc, Mutex};
    /// let bus = soorma::embedded::EmbeddedBus::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// bus.tap(move |e| s.lock().unwrap().push(e.event_type.clone()));
    /// bus.publish(soorma::EventEnvelope::new("1", "x", soorma::Topic::SystemEvents, "ping")).await?;
    /// assert_eq!(seen.lock().unwrap().as_slice(), ["ping"]);
    /// # Ok(()) }
    /// ```
    pub fn tap(&self, tap: impl Fn(&Arc<EventEnvelope>) + Send + Sync + 'static) {
        self.write().taps.push(Arc::new(tap));
    }

    fn read(&self) -> RwLockReadGuard<'_, Routes> {
        self.routes.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Routes> {
        self.routes.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, DuplicateWindow> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes `envelope`: into every matching group's queue (waiting for room in each, all
    /// or nothing), to every tap and to the observers.
    async fn deliver(&self, envelope: EventEnvelope) -> Result<()> {
        check_envelope(&envelope)?;
        if !self.recent().first_seen(&duplicate_key(&envelope)) {
            tracing::debug!(event_id = %envelope.id, "duplicate event id within the window; dropped");
            return Ok(());
        }
        let envelope = Arc::new(envelope);
        let (queues, taps) = {
            let routes = self.read();
            let tenant = envelope.tenant();
            let queues: Vec<Arc<GroupQueue>> = routes
                .by_topic
                .get(&envelope.topic)
                .into_iter()
                .flatten()
                .filter(|route| {
                    route.filter.matches(&envelope.event_type)
                        && route.tenant.as_deref().is_none_or(|t| t == tenant)
                })
                .map(|route| route.queue.clone())
                .collect();
            (queues, routes.taps.clone())
        };
        let places = match self.reserve(&queues).await {
            Ok(places) => places,
            Err(e) => {
                // Not delivered anywhere: publishing it again must not be taken for a duplicate.
                self.recent().forget(&duplicate_key(&envelope));
                tracing::warn!(event_id = %envelope.id, event_type = %envelope.event_type, error = %e, "publish failed: a consumer group's queue stayed full");
                return Err(e);
            }
        };
        for tap in &taps {
            tap(&envelope);
        }
        if let Some(observers) = self.observers.get() {
            // Fails only when nobody observes.
            let _ = observers.send(envelope.clone());
        }
        for (queue, place) in queues.iter().zip(places) {
            if let Some(place) = place {
                queue.push(Queued {
                    envelope: envelope.clone(),
                    attempt: 1,
                    place,
                });
            }
        }
        Ok(())
    }

    /// A place in each queue (`None` for a queue whose group left meanwhile), waiting for room
    /// for at most the publish timeout in all.
    async fn reserve(
        &self,
        queues: &[Arc<GroupQueue>],
    ) -> Result<Vec<Option<OwnedSemaphorePermit>>> {
        let mut places = Vec::with_capacity(queues.len());
        let mut deadline = None;
        for queue in queues {
            let place = match queue.places.clone().try_acquire_owned() {
                Ok(place) => Some(place),
                Err(TryAcquireError::Closed) => None,
                Err(TryAcquireError::NoPermits) => {
                    let timeout = self.config.publish_timeout;
                    let until =
                        *deadline.get_or_insert_with(|| tokio::time::Instant::now() + timeout);
                    tracing::debug!(group = %queue.group, topic = %queue.topic, "queue full; the publisher waits for room");
                    match tokio::time::timeout_at(until, queue.places.clone().acquire_owned()).await
                    {
                        Ok(place) => place.ok(),
                        Err(_) => return Err(queue.full(timeout)),
                    }
                }
            };
            places.push(place);
        }
        Ok(places)
    }

    fn join(&self, spec: &SubscriptionSpec) -> Arc<GroupQueue> {
        let mut routes = self.write();
        let list = routes.by_topic.entry(spec.topic).or_default();
        if let Some(route) = list
            .iter_mut()
            .find(|r| r.group == spec.group && r.tenant == spec.tenant)
        {
            route.filter = route.filter.union(&spec.events);
            route.queue.members.fetch_add(1, Ordering::SeqCst);
            return route.queue.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let capacity = self.config.queue_capacity;
        let queue = Arc::new(GroupQueue {
            group: spec.group.clone(),
            topic: spec.topic,
            tenant: spec.tenant.clone(),
            places: Arc::new(Semaphore::new(capacity)),
            capacity,
            tx,
            rx: Mutex::new(rx),
            queued: AtomicUsize::new(0),
            members: AtomicUsize::new(1),
        });
        list.push(Route {
            group: spec.group.clone(),
            tenant: spec.tenant.clone(),
            filter: spec.events.clone(),
            queue: queue.clone(),
        });
        queue
    }

    fn leave(&self, topic: Topic, queue: &Arc<GroupQueue>) {
        let mut routes = self.write();
        if queue.members.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(list) = routes.by_topic.get_mut(&topic) {
                list.retain(|r| !Arc::ptr_eq(&r.queue, queue));
            }
            // Publishers waiting for room in it skip it; its events go with it.
            queue.places.close();
        }
    }
}

/// Deliveries to one observer: a bounded buffer that loses its oldest events when the observer
/// falls behind, so it never slows publishers down.
struct Observer {
    rx: broadcast::Receiver<Arc<EventEnvelope>>,
    topic: Option<Topic>,
    dropped: Arc<AtomicU64>,
}

impl Subscription for Observer {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            loop {
                match self.rx.recv().await {
                    Ok(env) if self.topic.is_none_or(|t| t == env.topic) => {
                        return Some(Delivery::new(env, 1, None));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(n)) => {
                        self.dropped.fetch_add(n, Ordering::Relaxed);
                        tracing::warn!(
                            dropped = n,
                            "an observer of the embedded bus fell behind; its oldest events were dropped"
                        );
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        })
    }
}

impl EventBus for EmbeddedBus {
    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        let rx = self
            .observers
            .get_or_init(|| broadcast::channel(self.config.observer_capacity).0)
            .subscribe();
        let sub: Box<dyn Subscription> = Box::new(Observer {
            rx,
            topic,
            dropped: self.observer_dropped.clone(),
        });
        Box::pin(std::future::ready(Ok(sub)))
    }

    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.deliver(envelope))
    }

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        if let Some(Err(e)) = spec.tenant.as_deref().map(validate_tenant) {
            return Box::pin(std::future::ready(Err(e)));
        }
        let queue = self.join(&spec);
        let sub: Box<dyn Subscription> = Box::new(EmbeddedSubscription {
            bus: self.clone(),
            topic: spec.topic,
            queue,
            max_deliver: spec.max_deliver.max(1),
        });
        Box::pin(std::future::ready(Ok(sub)))
    }
}

struct EmbeddedSubscription {
    bus: EmbeddedBus,
    topic: Topic,
    queue: Arc<GroupQueue>,
    max_deliver: u32,
}

impl Subscription for EmbeddedSubscription {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            let queued = self.queue.rx.lock().await.recv().await?;
            self.queue.queued.fetch_sub(1, Ordering::Relaxed);
            let Queued {
                envelope,
                attempt,
                place,
            } = queued;
            let acker = EmbeddedAcker {
                bus: self.bus.clone(),
                queue: Arc::downgrade(&self.queue),
                envelope: envelope.clone(),
                attempt,
                max_deliver: self.max_deliver,
                place,
            };
            Some(Delivery::new(envelope, attempt, Some(Box::new(acker))))
        })
    }
}

impl Drop for EmbeddedSubscription {
    fn drop(&mut self) {
        self.bus.leave(self.topic, &self.queue);
    }
}

struct EmbeddedAcker {
    bus: EmbeddedBus,
    queue: Weak<GroupQueue>,
    envelope: Arc<EventEnvelope>,
    attempt: u32,
    max_deliver: u32,
    place: OwnedSemaphorePermit,
}

impl EmbeddedAcker {
    /// Drops an event whose last delivery asked for a retry (as NATS dead-letters it) and
    /// announces it as `event.dead_lettered` on `system-events`.
    async fn give_up(self) -> Result<()> {
        let Self {
            bus,
            queue,
            envelope,
            attempt,
            max_deliver,
            place,
        } = self;
        drop(place);
        let group = queue.upgrade().map(|q| q.group.clone()).unwrap_or_default();
        let reason = still_failing(attempt, max_deliver);
        tracing::warn!(event_id = %envelope.id, %group, %reason, "dead-lettering event");
        let notice =
            EventEnvelope::new(new_id(), group.as_str(), Topic::SystemEvents, DEAD_LETTERED)
                .with_tenant_id(envelope.tenant())
                .with_time(now_rfc3339())
                .with_data(serde_json::json!({
                    "event_id": envelope.id,
                    "event_type": envelope.event_type,
                    "topic": envelope.topic,
                    "consumer": group,
                    "reason": reason,
                    "attempt": attempt,
                }));
        if let Err(e) = bus.deliver(notice).await {
            tracing::error!(error = %e, "could not publish the dead-letter notice");
        }
        Ok(())
    }
}

impl Acker for EmbeddedAcker {
    fn settle(self: Box<Self>, settlement: Settlement) -> BoxFuture<'static, Result<()>> {
        if matches!(settlement, Settlement::Retry { .. }) && self.attempt >= self.max_deliver {
            return Box::pin(self.give_up());
        }
        if let Settlement::Retry { delay } = settlement {
            // Redeliver to the same group after the delay, if it still has members. The event
            // keeps its place meanwhile: a retry counts against the queue (so there are never
            // more waiting retries than places) and never waits for room.
            let Self {
                queue,
                envelope,
                attempt,
                place,
                ..
            } = *self;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(queue) = queue.upgrade() {
                    queue.push(Queued {
                        envelope,
                        attempt: attempt + 1,
                        place,
                    });
                }
            });
        }
        // Acknowledged or dead-lettered: dropping the acker frees the event's place.
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn env(id: &str, topic: Topic, ty: &str) -> EventEnvelope {
        EventEnvelope::new(id, "test", topic, ty)
    }

    async fn next_id(sub: &mut Box<dyn Subscription>) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(100), sub.next())
            .await
            .ok()
            .flatten()
            .map(|d| d.envelope.id.clone())
    }

    #[tokio::test]
    async fn groups_share_work_and_different_groups_each_receive() {
        let bus = EmbeddedBus::new();
        let spec = |g: &str| SubscriptionSpec::new(g, Topic::BusinessFacts, EventFilter::All);
        let mut a1 = bus.subscribe(spec("a")).await.unwrap();
        let mut a2 = bus.subscribe(spec("a")).await.unwrap();
        let mut b = bus.subscribe(spec("b")).await.unwrap();
        for i in 0..10 {
            bus.publish(env(&i.to_string(), Topic::BusinessFacts, "x"))
                .await
                .unwrap();
        }
        let mut got_b = 0;
        while next_id(&mut b).await.is_some() {
            got_b += 1;
        }
        assert_eq!(got_b, 10);
        let mut got_a = Vec::new();
        loop {
            let x = next_id(&mut a1).await;
            let y = next_id(&mut a2).await;
            if x.is_none() && y.is_none() {
                break;
            }
            got_a.extend(x);
            got_a.extend(y);
        }
        got_a.sort();
        got_a.dedup();
        assert_eq!(got_a.len(), 10, "each event exactly once within the group");
    }

    #[tokio::test]
    async fn filters_by_event_type_topic_and_tenant() {
        let bus = EmbeddedBus::new();
        let mut only = bus
            .subscribe(
                SubscriptionSpec::new("g", Topic::ActionRequests, EventFilter::only(["a.b"]))
                    .with_tenant("t1"),
            )
            .await
            .unwrap();
        bus.publish(env("1", Topic::ActionRequests, "a.b"))
            .await
            .unwrap(); // default tenant
        bus.publish(env("2", Topic::ActionRequests, "a.b").with_tenant_id("t2"))
            .await
            .unwrap();
        bus.publish(env("3", Topic::ActionRequests, "c.d").with_tenant_id("t1"))
            .await
            .unwrap();
        bus.publish(env("4", Topic::BusinessFacts, "a.b").with_tenant_id("t1"))
            .await
            .unwrap();
        bus.publish(env("5", Topic::ActionRequests, "a.b").with_tenant_id("t1"))
            .await
            .unwrap();
        assert_eq!(next_id(&mut only).await.as_deref(), Some("5"));
        assert_eq!(next_id(&mut only).await, None);
    }

    #[tokio::test]
    async fn retry_redelivers_with_attempt_count() {
        let bus = EmbeddedBus::new();
        let mut sub = bus
            .subscribe(SubscriptionSpec::new(
                "g",
                Topic::SystemEvents,
                EventFilter::All,
            ))
            .await
            .unwrap();
        bus.publish(env("1", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        let d = sub.next().await.unwrap();
        assert_eq!(d.attempt, 1);
        d.settle(Settlement::Retry {
            delay: Duration::from_millis(5),
        })
        .await
        .unwrap();
        let d = sub.next().await.unwrap();
        assert_eq!((d.envelope.id.as_str(), d.attempt), ("1", 2));
    }

    #[tokio::test]
    async fn a_retry_on_the_last_delivery_dead_letters_with_a_notice() {
        let bus = EmbeddedBus::new();
        let mut notices = bus.observe(Some(Topic::SystemEvents)).await.unwrap();
        let spec =
            SubscriptionSpec::new("g", Topic::BusinessFacts, EventFilter::All).with_max_deliver(2);
        let mut sub = bus.subscribe(spec).await.unwrap();
        bus.publish(env("1", Topic::BusinessFacts, "x").with_tenant_id("acme"))
            .await
            .unwrap();
        for attempt in 1..=2 {
            let d = sub.next().await.unwrap();
            assert_eq!(d.attempt, attempt);
            d.settle(Settlement::Retry {
                delay: Duration::from_millis(1),
            })
            .await
            .unwrap();
        }
        let notice = notices.next().await.unwrap().envelope;
        assert_eq!(
            (notice.event_type.as_str(), notice.tenant()),
            (DEAD_LETTERED, "acme")
        );
        assert!(notice.data["reason"].as_str().unwrap().contains("2 of 2"));
        let again = tokio::time::timeout(Duration::from_millis(50), sub.next()).await;
        assert!(again.is_err(), "delivered a third time");
        let stats = &bus.queue_stats()[0];
        assert_eq!((stats.queued, stats.in_use), (0, 0));
    }

    #[tokio::test]
    async fn a_republished_event_id_is_delivered_once() {
        let bus = EmbeddedBus::new();
        let mut sub = bus
            .subscribe(SubscriptionSpec::new(
                "g",
                Topic::SystemEvents,
                EventFilter::All,
            ))
            .await
            .unwrap();
        bus.publish(env("same", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        bus.publish(env("same", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        bus.publish(env("other", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        assert_eq!(next_id(&mut sub).await.as_deref(), Some("same"));
        assert_eq!(next_id(&mut sub).await.as_deref(), Some("other"));
        assert_eq!(next_id(&mut sub).await, None);
    }

    #[tokio::test]
    async fn last_member_leaving_removes_the_group() {
        let bus = EmbeddedBus::new();
        let sub = bus
            .subscribe(SubscriptionSpec::new(
                "g",
                Topic::SystemEvents,
                EventFilter::All,
            ))
            .await
            .unwrap();
        drop(sub);
        assert!(bus.routes.read().unwrap().by_topic[&Topic::SystemEvents].is_empty());
    }

    fn bounded(capacity: usize, timeout_ms: u64) -> EmbeddedBus {
        EmbeddedBus::with_config(
            EmbeddedConfig::new()
                .with_queue_capacity(capacity)
                .with_publish_timeout(Duration::from_millis(timeout_ms)),
        )
        .unwrap()
    }

    fn spec(group: &str, topic: Topic) -> SubscriptionSpec {
        SubscriptionSpec::new(group, topic, EventFilter::All)
    }

    #[test]
    fn capacities_out_of_range_are_rejected() {
        for config in [
            EmbeddedConfig::new().with_queue_capacity(0),
            EmbeddedConfig::new().with_queue_capacity(usize::MAX),
            EmbeddedConfig::new().with_observer_capacity(0),
            EmbeddedConfig::new().with_observer_capacity(usize::MAX),
        ] {
            let err = EmbeddedBus::with_config(config).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        }
    }

    #[tokio::test]
    async fn a_slow_consumer_never_holds_more_than_the_queue_capacity() {
        let bus = bounded(4, 20);
        let _slow = bus
            .subscribe(spec("slow", Topic::BusinessFacts))
            .await
            .unwrap();
        let mut failed = 0;
        for i in 0..50 {
            match bus
                .publish(env(&i.to_string(), Topic::BusinessFacts, "x"))
                .await
            {
                Ok(()) => {}
                Err(e) => {
                    assert!(
                        matches!(e, Error::Timeout { .. }) && e.is_retryable(),
                        "{e}"
                    );
                    assert!(e.to_string().contains("consumer group `slow`"), "{e}");
                    failed += 1;
                }
            }
            let stats = &bus.queue_stats()[0];
            assert!(stats.queued <= 4 && stats.in_use <= 4, "{stats:?}");
        }
        assert_eq!(failed, 46);
        assert_eq!(bus.queue_stats()[0].queued, 4);
    }

    #[tokio::test]
    async fn a_publisher_waits_for_room_and_proceeds_when_the_consumer_catches_up() {
        let bus = bounded(1, 10_000);
        let mut sub = bus
            .subscribe(spec("g", Topic::BusinessFacts))
            .await
            .unwrap();
        bus.publish(env("1", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        let publisher = tokio::spawn({
            let bus = bus.clone();
            async move { bus.publish(env("2", Topic::BusinessFacts, "x")).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !publisher.is_finished(),
            "the queue is full: the publisher waits"
        );
        // Taken but not settled: the event still holds its place.
        let first = sub.next().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!publisher.is_finished());
        first.settle(Settlement::Ack).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), publisher)
            .await
            .expect("the publisher proceeds once there is room")
            .unwrap()
            .unwrap();
        assert_eq!(next_id(&mut sub).await.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn a_publish_that_timed_out_delivers_nothing_and_can_be_retried() {
        let bus = bounded(1, 10);
        let mut full = bus
            .subscribe(spec("full", Topic::BusinessFacts))
            .await
            .unwrap();
        let mut roomy = bus
            .subscribe(spec("roomy", Topic::BusinessFacts))
            .await
            .unwrap();
        bus.publish(env("1", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        let roomy_first = roomy.next().await.unwrap();
        roomy_first.settle(Settlement::Ack).await.unwrap();
        // `full` still holds event 1: event 2 goes nowhere, not even to `roomy`.
        assert!(
            bus.publish(env("2", Topic::BusinessFacts, "x"))
                .await
                .is_err()
        );
        assert_eq!(next_id(&mut roomy).await, None);
        full.next()
            .await
            .unwrap()
            .settle(Settlement::Ack)
            .await
            .unwrap();
        // Publishing the same id again is not taken for a duplicate.
        bus.publish(env("2", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        assert_eq!(next_id(&mut roomy).await.as_deref(), Some("2"));
        assert_eq!(next_id(&mut full).await.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn a_retry_keeps_its_place_in_the_queue() {
        let bus = bounded(1, 10);
        let mut sub = bus.subscribe(spec("g", Topic::SystemEvents)).await.unwrap();
        bus.publish(env("1", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        sub.next()
            .await
            .unwrap()
            .settle(Settlement::Retry {
                delay: Duration::from_millis(100),
            })
            .await
            .unwrap();
        // Waiting for redelivery, it counts against the queue.
        assert_eq!(bus.queue_stats()[0].in_use, 1);
        assert!(
            bus.publish(env("2", Topic::SystemEvents, "x"))
                .await
                .is_err()
        );
        let again = sub.next().await.unwrap();
        assert_eq!((again.envelope.id.as_str(), again.attempt), ("1", 2));
        again
            .settle(Settlement::DeadLetter {
                reason: "no".into(),
            })
            .await
            .unwrap();
        assert_eq!(bus.queue_stats()[0].in_use, 0);
        bus.publish(env("2", Topic::SystemEvents, "x"))
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cycle_of_full_queues_ends_with_an_error_not_a_hang() {
        // Two consumers, each handling an event of its own queue by publishing into the other's;
        // both queues are full, so each waits for the other.
        let bus = bounded(1, 100);
        let mut a = bus
            .subscribe(spec("a", Topic::BusinessFacts))
            .await
            .unwrap();
        let mut b = bus
            .subscribe(spec("b", Topic::ActionRequests))
            .await
            .unwrap();
        bus.publish(env("a1", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        bus.publish(env("b1", Topic::ActionRequests, "x"))
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let (to_b, to_a) = tokio::join!(
            async {
                let handling = a.next().await.unwrap();
                let out = bus.publish(env("a-out", Topic::ActionRequests, "x")).await;
                (handling, out)
            },
            async {
                let handling = b.next().await.unwrap();
                let out = bus.publish(env("b-out", Topic::BusinessFacts, "x")).await;
                (handling, out)
            },
        );
        assert!(matches!(to_b.1, Err(Error::Timeout { .. })), "{:?}", to_b.1);
        assert!(matches!(to_a.1, Err(Error::Timeout { .. })), "{:?}", to_a.1);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn an_observer_that_never_reads_does_not_block_publishing() {
        let bus = EmbeddedBus::with_config(
            EmbeddedConfig::new()
                .with_observer_capacity(8)
                .with_publish_timeout(Duration::from_millis(10)),
        )
        .unwrap();
        let mut idle = bus.observe(None).await.unwrap();
        for i in 0..100 {
            bus.publish(env(&i.to_string(), Topic::SystemEvents, "x"))
                .await
                .unwrap();
        }
        // It kept the newest events and counts the ones it lost.
        assert_eq!(next_id(&mut idle).await.as_deref(), Some("92"));
        assert_eq!(bus.observer_dropped(), 92);
        for i in 93..100 {
            assert_eq!(next_id(&mut idle).await, Some(i.to_string()));
        }
    }

    #[tokio::test]
    async fn an_observer_sees_its_topic_and_ends_with_the_bus() {
        let bus = EmbeddedBus::new();
        let mut system = bus.observe(Some(Topic::SystemEvents)).await.unwrap();
        bus.publish(env("1", Topic::BusinessFacts, "x"))
            .await
            .unwrap();
        bus.publish(env("2", Topic::SystemEvents, "x"))
            .await
            .unwrap();
        assert_eq!(next_id(&mut system).await.as_deref(), Some("2"));
        drop(bus);
        assert!(system.next().await.is_none());
    }
}
