//! The event bus: the trait engines implement (publish, subscribe in consumer groups, observe)
//! and the deliveries they hand out.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use soorma_common::{EventEnvelope, Topic};

use crate::error::Result;
use crate::util::BoxFuture;

/// Which event types of a topic a subscription receives.
///
/// ```
/// use soorma::bus::EventFilter;
/// let f = EventFilter::only(["order.placed"]);
/// assert!(f.matches("order.placed"));
/// assert!(!f.matches("order.cancelled"));
/// assert!(EventFilter::All.matches("anything"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventFilter {
    /// Every event on the topic.
    All,
    /// Only these event types.
    Only(HashSet<String>),
}

impl EventFilter {
    /// A filter for the given event types.
    ///
    /// ```
    /// # use soorma::bus::EventFilter;
    /// assert!(EventFilter::only(["a", "b"]).matches("b"));
    /// ```
    pub fn only<I, S>(events: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EventFilter::Only(events.into_iter().map(Into::into).collect())
    }

    /// Whether `event_type` passes the filter.
    ///
    /// ```
    /// # use soorma::bus::EventFilter;
    /// assert!(!EventFilter::only(["a"]).matches("b"));
    /// ```
    pub fn matches(&self, event_type: &str) -> bool {
        match self {
            EventFilter::All => true,
            EventFilter::Only(set) => set.contains(event_type),
        }
    }

    /// The union of two filters.
    ///
    /// ```
    /// # use soorma::bus::EventFilter;
    /// let u = EventFilter::only(["a"]).union(&EventFilter::only(["b"]));
    /// assert!(u.matches("a") && u.matches("b"));
    /// ```
    #[must_use]
    pub fn union(&self, other: &EventFilter) -> EventFilter {
        match (self, other) {
            (EventFilter::Only(a), EventFilter::Only(b)) => {
                EventFilter::Only(a.union(b).cloned().collect())
            }
            _ => EventFilter::All,
        }
    }
}

/// What to subscribe to. Subscriptions with the same `group` share the work (each event goes to
/// one of them); different groups each receive every matching event.
///
/// ```
/// use soorma::bus::{EventFilter, SubscriptionSpec};
/// use soorma::Topic;
/// let spec = SubscriptionSpec::new("calculator", Topic::ActionRequests, EventFilter::All)
///     .with_tenant("acme");
/// assert_eq!(spec.tenant.as_deref(), Some("acme"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SubscriptionSpec {
    /// The consumer group (the agent's name).
    pub group: String,
    /// The topic.
    pub topic: Topic,
    /// The event types wanted.
    pub events: EventFilter,
    /// Only events of this tenant (`None`: every tenant).
    pub tenant: Option<String>,
    /// Whether the group's position survives restarts (a durable consumer). Ephemeral
    /// subscriptions (e.g. a client waiting for replies) only see events published while
    /// they are live.
    pub durable: bool,
    /// How many times a durable subscription's event is delivered at most (default
    /// [`DEFAULT_MAX_DELIVER`]); a platform dead-letters an event whose last delivery is
    /// settled with [`Settlement::Retry`] rather than drop it.
    pub max_deliver: u32,
    /// How many deliveries the platform may fetch ahead of the subscriber at most (`None`:
    /// the platform's choice). An agent sets it to its concurrency limit: an event fetched
    /// ahead waits for a free handler with its redelivery timer running, so fetching no more
    /// than can be handled keeps a backlog on the server rather than on the way to redelivery.
    pub prefetch: Option<usize>,
}

/// How many times an event is delivered at most unless configured otherwise
/// ([`SubscriptionSpec::with_max_deliver`], [`AgentBuilder::max_deliver`](crate::AgentBuilder::max_deliver)).
///
/// ```
/// assert_eq!(soorma::bus::DEFAULT_MAX_DELIVER, 5);
/// ```
pub const DEFAULT_MAX_DELIVER: u32 = 5;

impl SubscriptionSpec {
    /// A subscription for every tenant.
    ///
    /// ```
    /// # use soorma::bus::{EventFilter, SubscriptionSpec};
    /// let s = SubscriptionSpec::new("g", soorma::Topic::BusinessFacts, EventFilter::All);
    /// assert!(s.tenant.is_none());
    /// ```
    pub fn new(group: impl Into<String>, topic: Topic, events: EventFilter) -> Self {
        Self {
            group: group.into(),
            topic,
            events,
            tenant: None,
            durable: true,
            max_deliver: DEFAULT_MAX_DELIVER,
            prefetch: None,
        }
    }

    /// Sets how many times an event is delivered at most (at least 1).
    ///
    /// ```
    /// # use soorma::bus::{EventFilter, SubscriptionSpec};
    /// let s = SubscriptionSpec::new("g", soorma::Topic::BusinessFacts, EventFilter::All).with_max_deliver(3);
    /// assert_eq!(s.max_deliver, 3);
    /// assert_eq!(SubscriptionSpec::new("g", soorma::Topic::BusinessFacts, EventFilter::All).with_max_deliver(0).max_deliver, 1);
    /// ```
    #[must_use]
    pub fn with_max_deliver(mut self, attempts: u32) -> Self {
        self.max_deliver = attempts.max(1);
        self
    }

    /// Sets how many deliveries the platform may fetch ahead of the subscriber at most (at
    /// least 1).
    ///
    /// ```
    /// # use soorma::bus::{EventFilter, SubscriptionSpec};
    /// let s = SubscriptionSpec::new("g", soorma::Topic::BusinessFacts, EventFilter::All).with_prefetch(8);
    /// assert_eq!(s.prefetch, Some(8));
    /// ```
    #[must_use]
    pub fn with_prefetch(mut self, deliveries: usize) -> Self {
        self.prefetch = Some(deliveries.max(1));
        self
    }

    /// Makes the subscription ephemeral: nothing is kept for it while it is not live.
    ///
    /// ```
    /// # use soorma::bus::{EventFilter, SubscriptionSpec};
    /// let s = SubscriptionSpec::new("cli-1", soorma::Topic::ActionResults, EventFilter::All).ephemeral();
    /// assert!(!s.durable);
    /// ```
    #[must_use]
    pub fn ephemeral(mut self) -> Self {
        self.durable = false;
        self
    }

    /// Restricts the subscription to one tenant.
    ///
    /// ```
    /// # use soorma::bus::{EventFilter, SubscriptionSpec};
    /// let s = SubscriptionSpec::new("g", soorma::Topic::BusinessFacts, EventFilter::All).with_tenant("t");
    /// assert_eq!(s.tenant.as_deref(), Some("t"));
    /// ```
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
}

/// How a delivery was handled; platforms with durable delivery act on it.
///
/// ```
/// use soorma::bus::Settlement;
/// let s = Settlement::DeadLetter { reason: "undecodable".into() };
/// assert!(matches!(s, Settlement::DeadLetter { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// Handled; do not deliver again.
    Ack,
    /// Failed in a way that may pass later: deliver again after `delay`.
    Retry {
        /// How long to wait before redelivery.
        delay: Duration,
    },
    /// Cannot be handled: move to the dead-letter store.
    DeadLetter {
        /// Why.
        reason: String,
    },
}

/// The dead-letter reason of an event a platform will not deliver again though its handling
/// asked for a retry: it was on delivery `attempt` of `max_deliver`.
pub(crate) fn still_failing(attempt: u32, max_deliver: u32) -> String {
    format!("still failing on delivery {attempt} of {max_deliver} (max_deliver)")
}

/// Settles one delivery with its platform.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # use std::sync::{Arc, Mutex};
/// # use soorma::{EventEnvelope, Topic};
/// use soorma::bus::{Acker, Delivery, Settlement};
///
/// struct Recorder(Arc<Mutex<Vec<Settlement>>>); // a real platform acks, naks, dead-letters
///
/// impl Acker for Recorder {
///     fn settle(self: Box<Self>, s: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
///         self.0.lock().unwrap().push(s);
///         Box::pin(std::future::ready(Ok(())))
///     }
/// }
///
/// let log = Arc::new(Mutex::new(Vec::new()));
/// # let env = Arc::new(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed"));
/// Delivery::new(env, 1, Some(Box::new(Recorder(log.clone())))).settle(Settlement::Ack).await?;
/// assert_eq!(*log.lock().unwrap(), [Settlement::Ack]);
/// # Ok(()) }
/// ```
pub trait Acker: Send + Sync {
    /// Reports how the delivery was handled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::{Acker, Settlement};
    /// use soorma::BoxFuture;
    ///
    /// struct AutoAck;
    ///
    /// impl Acker for AutoAck {
    ///     fn settle(self: Box<Self>, _: Settlement) -> BoxFuture<'static, soorma::Result<()>> {
    ///         Box::pin(std::future::ready(Ok(())))
    ///     }
    /// }
    ///
    /// Box::new(AutoAck).settle(Settlement::Ack).await?;
    /// # Ok(()) }
    /// ```
    fn settle(self: Box<Self>, settlement: Settlement) -> BoxFuture<'static, Result<()>>;

    /// How often [`in_progress`](Acker::in_progress) must be called while a handler is still
    /// working, or the platform redelivers the event to another instance. `None` (the default)
    /// means deliveries never time out.
    ///
    /// ```
    /// # use soorma::bus::{Acker, Settlement};
    /// # struct AutoAck;
    /// # impl Acker for AutoAck {
    /// #     fn settle(self: Box<Self>, _: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
    /// #         Box::pin(std::future::ready(Ok(())))
    /// #     }
    /// # }
    /// assert_eq!(AutoAck.keep_alive_interval(), None);
    /// ```
    fn keep_alive_interval(&self) -> Option<Duration> {
        None
    }

    /// Tells the platform the event is still being handled (resets its redelivery timer).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::bus::{Acker, Settlement};
    /// # struct AutoAck;
    /// # impl Acker for AutoAck {
    /// #     fn settle(self: Box<Self>, _: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
    /// #         Box::pin(std::future::ready(Ok(())))
    /// #     }
    /// # }
    /// AutoAck.in_progress().await?; // a no-op unless the platform has delivery timeouts
    /// # Ok(()) }
    /// ```
    fn in_progress(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The delivery's attempt now, when the platform may have delivered the event again while
    /// it was being handled (a copy it sent meanwhile counts as a delivery toward the
    /// subscription's `max_deliver`); `None` (the default) means as delivered.
    ///
    /// ```
    /// # use soorma::bus::{Acker, Settlement};
    /// # struct AutoAck;
    /// # impl Acker for AutoAck {
    /// #     fn settle(self: Box<Self>, _: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
    /// #         Box::pin(std::future::ready(Ok(())))
    /// #     }
    /// # }
    /// assert_eq!(AutoAck.attempt(), None);
    /// ```
    fn attempt(&self) -> Option<u32> {
        None
    }

    /// Whether this delivery came in a batch whose replies the engine stores together
    /// ([`settle_with_reply`](Acker::settle_with_reply)). `false` by default.
    ///
    /// ```
    /// # use soorma::bus::{Acker, Settlement};
    /// # struct AutoAck;
    /// # impl Acker for AutoAck {
    /// #     fn settle(self: Box<Self>, _: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
    /// #         Box::pin(std::future::ready(Ok(())))
    /// #     }
    /// # }
    /// assert!(!AutoAck.batches_replies());
    /// ```
    fn batches_replies(&self) -> bool {
        false
    }

    /// Stores `reply` (the answer to the delivered request) with the replies to the other
    /// deliveries of its batch, once every one of them is settled, then settles the batch.
    /// Called only when [`batches_replies`](Acker::batches_replies) is `true`; the default
    /// refuses.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # use soorma::bus::{Acker, Settlement};
    /// # use soorma::{EventEnvelope, Topic};
    /// # struct AutoAck;
    /// # impl Acker for AutoAck {
    /// #     fn settle(self: Box<Self>, _: Settlement) -> soorma::BoxFuture<'static, soorma::Result<()>> {
    /// #         Box::pin(std::future::ready(Ok(())))
    /// #     }
    /// # }
    /// let reply = EventEnvelope::new("r1", "tool", Topic::ActionResults, "x.done");
    /// assert!(Box::new(AutoAck).settle_with_reply(reply).await.is_err());
    /// # }
    /// ```
    fn settle_with_reply(self: Box<Self>, reply: EventEnvelope) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            Err(crate::error::Error::InvalidArgument(format!(
                "this delivery does not batch replies (reply `{}`)",
                reply.id
            )))
        })
    }
}

/// One event delivered to a subscription.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::bus::{EventBus, EventFilter, Settlement, SubscriptionSpec};
/// use soorma::{EventEnvelope, Topic};
///
/// let bus = soorma::embedded::EmbeddedBus::new();
/// let mut sub = bus.subscribe(SubscriptionSpec::new("audit", Topic::BusinessFacts, EventFilter::All)).await?;
/// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
/// let delivery = sub.next().await.unwrap();
/// assert_eq!((delivery.envelope.id.as_str(), delivery.attempt), ("e1", 1));
/// delivery.settle(Settlement::Ack).await?;
/// # Ok(()) }
/// ```
#[non_exhaustive]
pub struct Delivery {
    /// The event.
    pub envelope: Arc<EventEnvelope>,
    /// How many times it has been delivered (1 on first delivery).
    pub attempt: u32,
    acker: Option<Box<dyn Acker>>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("envelope", &self.envelope)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// A delivery; `acker` is `None` for platforms without acknowledgements.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use soorma::bus::Delivery;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed");
    /// let delivery = Delivery::new(Arc::new(env), 1, None); // no acknowledgements
    /// assert_eq!(delivery.attempt, 1);
    /// ```
    pub fn new(envelope: Arc<EventEnvelope>, attempt: u32, acker: Option<Box<dyn Acker>>) -> Self {
        Self {
            envelope,
            attempt,
            acker,
        }
    }

    /// Settles the delivery (a no-op without an acker).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::bus::{EventBus, EventFilter, Settlement, SubscriptionSpec};
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let bus = soorma::embedded::EmbeddedBus::new();
    /// let mut sub = bus.subscribe(SubscriptionSpec::new("audit", Topic::BusinessFacts, EventFilter::All)).await?;
    /// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
    /// let first = sub.next().await.unwrap();
    /// first.settle(Settlement::Retry { delay: Duration::from_millis(1) }).await?;
    /// assert_eq!(sub.next().await.unwrap().attempt, 2); // redelivered
    /// # Ok(()) }
    /// ```
    pub async fn settle(self, settlement: Settlement) -> Result<()> {
        match self.acker {
            Some(acker) => acker.settle(settlement).await,
            None => Ok(()),
        }
    }

    /// How many times the event has been delivered by now: [`attempt`](Delivery::attempt), or
    /// more when the platform delivered it again while it was being handled (see
    /// [`Acker::attempt`]). What a retry decision counts against `max_deliver`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use soorma::bus::Delivery;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed");
    /// assert_eq!(Delivery::new(Arc::new(env), 2, None).current_attempt(), 2);
    /// ```
    pub fn current_attempt(&self) -> u32 {
        self.acker
            .as_deref()
            .and_then(Acker::attempt)
            .map_or(self.attempt, |a| a.max(self.attempt))
    }

    /// Whether the platform stores this delivery's reply together with the replies to the
    /// other deliveries of its batch ([`Delivery::settle_with_reply`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use soorma::bus::Delivery;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let env = EventEnvelope::new("e1", "shop", Topic::ActionRequests, "x.requested");
    /// assert!(!Delivery::new(Arc::new(env), 1, None).batches_replies());
    /// ```
    pub fn batches_replies(&self) -> bool {
        self.acker.as_deref().is_some_and(Acker::batches_replies)
    }

    /// Hands `reply` to the platform to store with the other replies of this delivery's batch
    /// and settles the delivery as handled once they are stored (a failed store redelivers
    /// the batch). Only for a delivery that [`batches_replies`](Delivery::batches_replies).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use soorma::bus::Delivery;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let env = EventEnvelope::new("e1", "shop", Topic::ActionRequests, "x.requested");
    /// let reply = EventEnvelope::new("e1-reply", "tool", Topic::ActionResults, "x.done");
    /// // Not in a batch: the caller publishes the reply itself, then settles.
    /// assert!(Delivery::new(Arc::new(env), 1, None).settle_with_reply(reply).await.is_err());
    /// # }
    /// ```
    pub async fn settle_with_reply(self, reply: EventEnvelope) -> Result<()> {
        match self.acker {
            Some(acker) if acker.batches_replies() => acker.settle_with_reply(reply).await,
            _ => Err(crate::error::Error::InvalidArgument(format!(
                "delivery `{}` does not batch replies",
                self.envelope.id
            ))),
        }
    }

    /// Runs `work` (the handling of this delivery), telling the platform the event is still in
    /// progress often enough that it is not redelivered while `work` runs, however long it takes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::sync::Arc;
    /// use soorma::bus::{Delivery, Settlement};
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed");
    /// let delivery = Delivery::new(Arc::new(env), 1, None);
    /// let answer = delivery.keep_alive_while(async { 42 }).await;
    /// assert_eq!(answer, 42);
    /// delivery.settle(Settlement::Ack).await?;
    /// # Ok(()) }
    /// ```
    pub async fn keep_alive_while<F: Future>(&self, work: F) -> F::Output {
        let Some((acker, every)) = self
            .acker
            .as_deref()
            .and_then(|a| a.keep_alive_interval().map(|every| (a, every)))
        else {
            return work.await;
        };
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                out = &mut work => return out,
                _ = tokio::time::sleep(every) => {
                    if let Err(e) = acker.in_progress().await {
                        tracing::warn!(event_id = %self.envelope.id, error = %e, "could not extend the delivery's deadline");
                    }
                }
            }
        }
    }
}

/// A stream of deliveries for one [`SubscriptionSpec`]. Dropping it unsubscribes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::bus::{EventFilter, Subscription, SubscriptionSpec};
/// use soorma::{EventEnvelope, Topic};
///
/// let platform = soorma::Platform::embedded();
/// let spec = SubscriptionSpec::new("alerts", Topic::SystemEvents, EventFilter::only(["disk.full"]));
/// let mut sub: Box<dyn Subscription> = platform.bus().subscribe(spec).await?;
/// platform.bus().publish(EventEnvelope::new("e1", "host-1", Topic::SystemEvents, "disk.full")).await?;
/// assert_eq!(sub.next().await.unwrap().envelope.event_type, "disk.full");
/// # Ok(()) }
/// ```
pub trait Subscription: Send {
    /// The next delivery, or `None` once the bus is closed. Cancel-safe.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::bus::{EventFilter, SubscriptionSpec};
    /// use soorma::Topic;
    ///
    /// let platform = soorma::Platform::embedded();
    /// let spec = SubscriptionSpec::new("alerts", Topic::SystemEvents, EventFilter::All);
    /// let mut sub = platform.bus().subscribe(spec).await?;
    /// // Nothing published yet: waiting can be bounded (and cancelled) safely.
    /// assert!(tokio::time::timeout(Duration::from_millis(10), sub.next()).await.is_err());
    /// # Ok(()) }
    /// ```
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>>;

    /// Settles what the subscription holds that no handler will take now, before it is
    /// dropped: call it last, once no more deliveries are wanted (it may hand out nothing
    /// after). On NATS, a received batch's envelopes not handed out yet are settled as retries:
    /// their message is redelivered (to another instance) at once, or, on its last delivery,
    /// they are dead-lettered instead of the whole batch. Dropping a subscription without it
    /// does the same in a task of its own. Does nothing by default.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::{EventFilter, SubscriptionSpec};
    /// use soorma::Topic;
    ///
    /// let platform = soorma::Platform::embedded();
    /// let spec = SubscriptionSpec::new("alerts", Topic::SystemEvents, EventFilter::All);
    /// let mut sub = platform.bus().subscribe(spec).await?;
    /// sub.close().await;
    /// drop(sub);
    /// # Ok(()) }
    /// ```
    fn close(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// A platform's event transport.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::bus::{EventFilter, SubscriptionSpec};
/// use soorma::{EventEnvelope, Topic};
///
/// let platform = soorma::Platform::embedded();
/// let bus = platform.bus(); // &Arc<dyn EventBus>
/// let mut sub = bus.subscribe(SubscriptionSpec::new("audit", Topic::BusinessFacts, EventFilter::All)).await?;
/// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
/// assert_eq!(sub.next().await.unwrap().envelope.id, "e1");
/// # Ok(()) }
/// ```
pub trait EventBus: Send + Sync + 'static {
    /// Publishes one event.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::EventBus;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed").with_tenant_id("acme");
    /// t.platform().bus().publish(env).await?; // published as is
    /// assert_eq!(t.events()[0].tenant_id.as_deref(), Some("acme"));
    /// # Ok(()) }
    /// ```
    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>>;
    /// Publishes several events, as a fan-out does; an engine may store those of one subject
    /// together (NATS stores up to 64 in one message, so a server that fsyncs every write does
    /// it once for them). Subscribers still receive them one by one. On an error some may have
    /// been published: publish them all again (ids make that safe). The default publishes them
    /// one after the other.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::EventBus;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// let env = |id: &str| EventEnvelope::new(id, "shop", Topic::BusinessFacts, "order.placed");
    /// t.platform().bus().publish_batch(vec![env("e1"), env("e2")]).await?;
    /// assert_eq!(t.events().len(), 2);
    /// # Ok(()) }
    /// ```
    fn publish_batch(&self, envelopes: Vec<EventEnvelope>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            for envelope in envelopes {
                self.publish(envelope).await?;
            }
            Ok(())
        })
    }
    /// Publishes a request with a new id (never published before, and never published
    /// again), which an engine may store together with other requests of its subject
    /// published at the same moment (NATS: while one is on its way, the next ones wait and go
    /// together, so 64 concurrent callers share a few stored messages). A lone request goes at
    /// once. The default publishes it alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::EventBus;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// let env = EventEnvelope::new("r1", "app", Topic::ActionRequests, "x.requested");
    /// t.platform().bus().publish_coalesced(env).await?;
    /// assert_eq!(t.events()[0].id, "r1");
    /// # Ok(()) }
    /// ```
    fn publish_coalesced(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        self.publish(envelope)
    }
    /// Subscribes; the subscription is live when the returned future resolves.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::{EventBus, EventFilter, SubscriptionSpec};
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let bus = soorma::embedded::EmbeddedBus::new();
    /// let spec = |group: &str| SubscriptionSpec::new(group, Topic::BusinessFacts, EventFilter::All);
    /// let (mut billing, mut shipping) = (bus.subscribe(spec("billing")).await?, bus.subscribe(spec("shipping")).await?);
    /// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
    /// // Different groups each receive the event.
    /// assert_eq!(billing.next().await.unwrap().envelope.id, shipping.next().await.unwrap().envelope.id);
    /// # Ok(()) }
    /// ```
    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>>;
    /// Observes every event (of one topic, or of all), every tenant, without taking part in any
    /// consumer group: for tests, tools and `events tail`. Deliveries need no settling.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::bus::EventBus;
    /// use soorma::{EventEnvelope, Topic};
    ///
    /// let bus = soorma::embedded::EmbeddedBus::new();
    /// let mut all = bus.observe(None).await?;
    /// bus.publish(EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")).await?;
    /// assert_eq!(all.next().await.unwrap().envelope.id, "e1");
    /// # Ok(()) }
    /// ```
    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>>;
    /// How long a delivery whose handler stopped without settling it (its process died) waits
    /// before the platform redelivers it to another instance: NATS's `ack_wait`. `None` (the
    /// default) for a bus that does not redeliver unsettled work. A [`Client`](crate::Client)'s
    /// default timeout adds it, so that a caller outlives one crash of the instance handling
    /// its request.
    ///
    /// ```
    /// use soorma::bus::EventBus;
    /// assert_eq!(soorma::embedded::EmbeddedBus::new().redelivery_delay(), None);
    /// ```
    fn redelivery_delay(&self) -> Option<Duration> {
        None
    }
}
