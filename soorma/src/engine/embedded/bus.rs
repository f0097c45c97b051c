use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use soorma_common::{EventEnvelope, Topic};
use tokio::sync::{Mutex, mpsc};

use crate::error::Result;
use crate::spi::bus::{
    Acker, Delivery, EventBus, EventFilter, Settlement, Subscription, SubscriptionSpec,
};
use crate::util::BoxFuture;

type Tap = Arc<dyn Fn(&Arc<EventEnvelope>) + Send + Sync>;

struct Queued {
    envelope: Arc<EventEnvelope>,
    attempt: u32,
}

/// One consumer group's queue; its members compete for the events in it.
struct GroupQueue {
    tx: mpsc::UnboundedSender<Queued>,
    rx: Mutex<mpsc::UnboundedReceiver<Queued>>,
    members: AtomicUsize,
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
    ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<(std::time::Instant, String)>,
}

/// How long an id is remembered (NATS's default duplicate window).
const DUPLICATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(120);
/// At most this many ids are remembered; under heavier load the window is shorter.
const DUPLICATE_WINDOW_IDS: usize = 100_000;

impl DuplicateWindow {
    /// Records `id`; `false` if it was published within the window.
    fn first_seen(&mut self, id: &str) -> bool {
        let now = std::time::Instant::now();
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) > DUPLICATE_WINDOW
                || self.order.len() >= DUPLICATE_WINDOW_IDS
            {
                if let Some((_, old)) = self.order.pop_front() {
                    self.ids.remove(&old);
                }
            } else {
                break;
            }
        }
        if self.ids.contains(id) {
            return false;
        }
        self.ids.insert(id.to_owned());
        self.order.push_back((now, id.to_owned()));
        true
    }
}

#[derive(Default)]
struct Routes {
    by_topic: HashMap<Topic, Vec<Route>>,
    taps: Vec<(u64, Tap)>,
    next_tap: u64,
}

/// The in-process bus.
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
#[derive(Clone, Default)]
pub struct EmbeddedBus {
    routes: Arc<RwLock<Routes>>,
    recent: Arc<std::sync::Mutex<DuplicateWindow>>,
}

impl std::fmt::Debug for EmbeddedBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedBus").finish_non_exhaustive()
    }
}

impl EmbeddedBus {
    /// A new, empty bus.
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
        Self::default()
    }

    /// Calls `tap` synchronously with every event published from now on (for tests and tools).
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
        self.add_tap(Arc::new(tap));
    }

    fn add_tap(&self, tap: Tap) -> u64 {
        let mut routes = self.routes.write().expect("bus lock");
        routes.next_tap += 1;
        let id = routes.next_tap;
        routes.taps.push((id, tap));
        id
    }

    fn remove_tap(&self, id: u64) {
        self.routes
            .write()
            .expect("bus lock")
            .taps
            .retain(|(i, _)| *i != id);
    }

    fn deliver(&self, envelope: EventEnvelope) {
        if !self
            .recent
            .lock()
            .expect("bus lock")
            .first_seen(&envelope.id)
        {
            tracing::debug!(event_id = %envelope.id, "duplicate event id within the window; dropped");
            return;
        }
        let envelope = Arc::new(envelope);
        let routes = self.routes.read().expect("bus lock");
        for (_, tap) in &routes.taps {
            tap(&envelope);
        }
        let Some(list) = routes.by_topic.get(&envelope.topic) else {
            return;
        };
        let tenant = envelope.tenant();
        for route in list {
            if route.filter.matches(&envelope.event_type)
                && route.tenant.as_deref().is_none_or(|t| t == tenant)
            {
                // The queue owns its receiver, so the send cannot fail.
                let _ = route.queue.tx.send(Queued {
                    envelope: envelope.clone(),
                    attempt: 1,
                });
            }
        }
    }

    fn join(&self, spec: &SubscriptionSpec) -> Arc<GroupQueue> {
        let mut routes = self.routes.write().expect("bus lock");
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
        let queue = Arc::new(GroupQueue {
            tx,
            rx: Mutex::new(rx),
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
        let mut routes = self.routes.write().expect("bus lock");
        if queue.members.fetch_sub(1, Ordering::SeqCst) == 1
            && let Some(list) = routes.by_topic.get_mut(&topic)
        {
            list.retain(|r| !Arc::ptr_eq(&r.queue, queue));
        }
    }
}

/// Deliveries to one observer, fed by a tap.
struct Observer {
    rx: mpsc::UnboundedReceiver<Arc<EventEnvelope>>,
    bus: EmbeddedBus,
    tap: u64,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.bus.remove_tap(self.tap);
    }
}

impl Subscription for Observer {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move { self.rx.recv().await.map(|e| Delivery::new(e, 1, None)) })
    }
}

impl EventBus for EmbeddedBus {
    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let tap = self.add_tap(Arc::new(move |env: &Arc<EventEnvelope>| {
            if topic.is_none_or(|t| t == env.topic) {
                let _ = tx.send(env.clone());
            }
        }));
        let sub: Box<dyn Subscription> = Box::new(Observer {
            rx,
            bus: self.clone(),
            tap,
        });
        Box::pin(std::future::ready(Ok(sub)))
    }

    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        self.deliver(envelope);
        Box::pin(std::future::ready(Ok(())))
    }

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        let queue = self.join(&spec);
        let sub: Box<dyn Subscription> = Box::new(EmbeddedSubscription {
            bus: self.clone(),
            topic: spec.topic,
            queue,
        });
        Box::pin(std::future::ready(Ok(sub)))
    }
}

struct EmbeddedSubscription {
    bus: EmbeddedBus,
    topic: Topic,
    queue: Arc<GroupQueue>,
}

impl Subscription for EmbeddedSubscription {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            let queued = self.queue.rx.lock().await.recv().await?;
            let acker = EmbeddedAcker {
                queue: Arc::downgrade(&self.queue),
                envelope: queued.envelope.clone(),
                attempt: queued.attempt,
            };
            Some(Delivery::new(
                queued.envelope,
                queued.attempt,
                Some(Box::new(acker)),
            ))
        })
    }
}

impl Drop for EmbeddedSubscription {
    fn drop(&mut self) {
        self.bus.leave(self.topic, &self.queue);
    }
}

struct EmbeddedAcker {
    queue: std::sync::Weak<GroupQueue>,
    envelope: Arc<EventEnvelope>,
    attempt: u32,
}

impl Acker for EmbeddedAcker {
    fn settle(self: Box<Self>, settlement: Settlement) -> BoxFuture<'static, Result<()>> {
        if let Settlement::Retry { delay } = settlement {
            // Redeliver to the same group after the delay, if it still has members.
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(queue) = self.queue.upgrade() {
                    let _ = queue.tx.send(Queued {
                        envelope: self.envelope,
                        attempt: self.attempt + 1,
                    });
                }
            });
        }
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
}
