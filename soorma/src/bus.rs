//! The event bus: the trait platforms implement, and the client agents publish with.

use std::collections::HashSet;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use soorma_common::{EventEnvelope, Topic};

use crate::error::{Error, Result};
use crate::util::{BoxFuture, new_id, now_rfc3339};
use crate::validation::RequestValidator;

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
}

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
        }
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
}

/// Publishes events with consistent envelope fields.
///
/// A `BusClient` obtained from a handler context inherits the handled event's tenant, user,
/// session, plan, goal and trace id, and sets `parent_event_id`; its `source` is the agent.
///
/// ```
/// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
/// use soorma::Topic;
/// bus.publish(Topic::BusinessFacts, "order.placed", serde_json::json!({"id": 1})).await?;
/// bus.request("calculate.requested", serde_json::json!({"expression": "1+1"}), "calculate.completed")
///     .correlation_id("c-1")
///     .await?;
/// bus.respond("calculate.completed", serde_json::json!({"result": 2}), "c-1").await?;
/// bus.announce("order.shipped", serde_json::json!({"id": 1})).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BusClient {
    bus: Arc<dyn EventBus>,
    source: Arc<str>,
    parent: Option<Arc<EventEnvelope>>,
    validator: Option<Arc<RequestValidator>>,
}

impl std::fmt::Debug for BusClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusClient")
            .field("source", &self.source)
            .field("parent", &self.parent.as_ref().map(|p| &p.id))
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Publish,
    Request,
    Respond,
}

impl BusClient {
    /// A client publishing as `source`, with no event being handled.
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let bus = soorma::BusClient::new(platform.bus().clone(), "my-service");
    /// # let _ = bus;
    /// ```
    pub fn new(bus: Arc<dyn EventBus>, source: impl Into<Arc<str>>) -> Self {
        Self {
            bus,
            source: source.into(),
            parent: None,
            validator: None,
        }
    }

    pub(crate) fn with_validator(mut self, validator: Arc<RequestValidator>) -> Self {
        self.validator = Some(validator);
        self
    }

    /// Checks an action request against the payload schema its consumer registered (a no-op
    /// for clients made with [`BusClient::new`]).
    pub(crate) async fn check_request(&self, envelope: &EventEnvelope) -> Result<()> {
        match &self.validator {
            Some(v) => v.check(envelope).await,
            None => Ok(()),
        }
    }

    /// The same client, publishing on behalf of the handling of `parent`.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// # let bus = soorma::BusClient::new(platform.bus().clone(), "svc");
    /// let env = soorma::EventEnvelope::new("e1", "x", soorma::Topic::BusinessFacts, "a")
    ///     .with_tenant_id("acme");
    /// let child = bus.in_context_of(std::sync::Arc::new(env));
    /// # let _ = child;
    /// ```
    #[must_use]
    pub fn in_context_of(&self, parent: Arc<EventEnvelope>) -> Self {
        Self {
            bus: self.bus.clone(),
            source: self.source.clone(),
            parent: Some(parent),
            validator: self.validator.clone(),
        }
    }

    /// The source (agent name) this client publishes as.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// let bus = soorma::BusClient::new(platform.bus().clone(), "svc");
    /// assert_eq!(bus.source(), "svc");
    /// ```
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Publishes `data` as `event_type` on `topic`.
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// bus.publish(soorma::Topic::SystemEvents, "cache.flushed", ()).await?;
    /// # Ok(()) }
    /// ```
    pub fn publish(
        &self,
        topic: Topic,
        event_type: impl Into<String>,
        data: impl Serialize,
    ) -> Publish {
        self.start(Kind::Publish, topic, event_type.into(), data)
    }

    /// Publishes an action request on `action-requests`; the responder replies with
    /// `response_event` (required, chosen by the caller).
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// let id = bus.request("web.search.requested", serde_json::json!({"q": "rust"}), "web.search.completed").await?;
    /// # let _ = id; Ok(()) }
    /// ```
    pub fn request(
        &self,
        event_type: impl Into<String>,
        data: impl Serialize,
        response_event: impl Into<String>,
    ) -> Publish {
        let mut p = self.start(
            Kind::Request,
            Topic::ActionRequests,
            event_type.into(),
            data,
        );
        if let Ok(env) = &mut p.envelope {
            env.response_event = Some(response_event.into());
            env.correlation_id = Some(env.id.clone());
        }
        p
    }

    /// Publishes a reply on `action-results` for the request with `correlation_id` (required).
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// bus.respond("web.search.completed", serde_json::json!({"items": []}), "corr-1").await?;
    /// # Ok(()) }
    /// ```
    pub fn respond(
        &self,
        event_type: impl Into<String>,
        data: impl Serialize,
        correlation_id: impl Into<String>,
    ) -> Publish {
        let mut p = self.start(Kind::Respond, Topic::ActionResults, event_type.into(), data);
        if let Ok(env) = &mut p.envelope {
            env.correlation_id = Some(correlation_id.into());
        }
        p
    }

    /// Announces a business fact on `business-facts`.
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// bus.announce("order.placed", serde_json::json!({"order_id": "123"})).await?;
    /// # Ok(()) }
    /// ```
    pub fn announce(&self, event_type: impl Into<String>, data: impl Serialize) -> Publish {
        self.start(Kind::Publish, Topic::BusinessFacts, event_type.into(), data)
    }

    /// Publishes a prepared envelope as is.
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// let env = soorma::EventEnvelope::new("id-1", "svc", soorma::Topic::BusinessFacts, "a.b");
    /// bus.publish_envelope(env).await?;
    /// # Ok(()) }
    /// ```
    pub async fn publish_envelope(&self, envelope: EventEnvelope) -> Result<()> {
        self.bus.publish(envelope).await
    }

    fn start(&self, kind: Kind, topic: Topic, event_type: String, data: impl Serialize) -> Publish {
        let envelope = serde_json::to_value(data)
            .map_err(|e| Error::serialize("event data", e))
            .map(|data| self.envelope(topic, event_type, data));
        Publish {
            bus: self.bus.clone(),
            kind,
            envelope,
            validator: self.validator.clone().filter(|_| kind == Kind::Request),
        }
    }

    pub(crate) fn envelope(&self, topic: Topic, event_type: String, data: Value) -> EventEnvelope {
        let id = new_id();
        let mut env = EventEnvelope::new(id, &*self.source, topic, event_type)
            .with_data(data)
            .with_time(now_rfc3339());
        match &self.parent {
            Some(parent) => {
                env.tenant_id.clone_from(&parent.tenant_id);
                env.user_id.clone_from(&parent.user_id);
                env.session_id.clone_from(&parent.session_id);
                env.plan_id.clone_from(&parent.plan_id);
                env.goal_id.clone_from(&parent.goal_id);
                env.correlation_id.clone_from(&parent.correlation_id);
                env.trace_id = Some(parent.trace_id.clone().unwrap_or_else(|| parent.id.clone()));
                env.parent_event_id = Some(parent.id.clone());
            }
            None => env.trace_id = Some(env.id.clone()),
        }
        env
    }
}

/// A pending publication; set optional envelope fields, then `.await` it for the event id.
///
/// ```
/// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
/// let id: String = bus
///     .request("report.requested", serde_json::json!({}), "report.ready")
///     .session_id("s-1")
///     .response_topic(soorma::Topic::ActionResults)
///     .await?;
/// # let _ = id; Ok(()) }
/// ```
#[must_use = "a publication does nothing until awaited"]
pub struct Publish {
    bus: Arc<dyn EventBus>,
    kind: Kind,
    envelope: Result<EventEnvelope>,
    validator: Option<Arc<RequestValidator>>,
}

macro_rules! publish_setters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            ///
            /// ```
            /// # let platform = soorma::Platform::embedded();
            /// # let bus = soorma::BusClient::new(platform.bus().clone(), "svc");
            #[doc = concat!("let p = bus.announce(\"order.placed\", ()).", stringify!($name), "(\"x-1\");")]
            #[doc = concat!("assert_eq!(p.envelope().unwrap().", stringify!($name), ".as_deref(), Some(\"x-1\"));")]
            /// ```
            pub fn $name(mut self, value: impl Into<String>) -> Self {
                if let Ok(env) = &mut self.envelope {
                    env.$name = Some(value.into());
                }
                self
            }
        )*
    };
}

impl Publish {
    publish_setters! {
        /// Sets the correlation id.
        correlation_id,
        /// Sets the subject.
        subject,
        /// Sets the tenant.
        tenant_id,
        /// Sets the user.
        user_id,
        /// Sets the session.
        session_id,
        /// Sets the plan.
        plan_id,
        /// Sets the goal.
        goal_id,
        /// Sets the payload schema name.
        payload_schema_name,
        /// Sets the reply schema name.
        response_schema_name,
    }

    /// Sets the reply topic (requests; default `action-results`).
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// # let bus = soorma::BusClient::new(platform.bus().clone(), "svc");
    /// use soorma::Topic;
    ///
    /// let p = bus.request("report.requested", (), "report.ready").response_topic(Topic::NotificationEvents);
    /// assert_eq!(p.envelope().unwrap().reply_topic(), Topic::NotificationEvents);
    /// ```
    pub fn response_topic(mut self, topic: Topic) -> Self {
        if let Ok(env) = &mut self.envelope {
            env.response_topic = Some(topic);
        }
        self
    }

    /// Publishes a request without checking its payload against the schema its consumer
    /// registered (requests are checked by default; see [`Error::SchemaViolation`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # let platform = soorma::Platform::embedded();
    /// let bus = platform.client("svc").bus();
    /// bus.request("legacy.requested", "free-form", "legacy.done").skip_validation().await?;
    /// # Ok(()) }
    /// ```
    pub fn skip_validation(mut self) -> Self {
        self.validator = None;
        self
    }

    /// The envelope as it will be published.
    ///
    /// ```
    /// # let platform = soorma::Platform::embedded();
    /// # let bus = soorma::BusClient::new(platform.bus().clone(), "svc");
    /// let p = bus.announce("a.b", 1);
    /// assert_eq!(p.envelope().unwrap().event_type, "a.b");
    /// ```
    pub fn envelope(&self) -> Result<&EventEnvelope> {
        self.envelope
            .as_ref()
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    }

    fn validate(kind: Kind, env: &EventEnvelope) -> Result<()> {
        if env.event_type.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "event_type must not be empty".into(),
            ));
        }
        match kind {
            Kind::Request
                if env
                    .response_event
                    .as_deref()
                    .is_none_or(|r| r.trim().is_empty()) =>
            {
                Err(Error::InvalidArgument(format!(
                    "request `{}` needs a response_event naming the reply event",
                    env.event_type
                )))
            }
            Kind::Respond
                if env
                    .correlation_id
                    .as_deref()
                    .is_none_or(|c| c.trim().is_empty()) =>
            {
                Err(Error::InvalidArgument(format!(
                    "response `{}` needs the correlation_id of the request it answers",
                    env.event_type
                )))
            }
            _ => Ok(()),
        }
    }
}

impl IntoFuture for Publish {
    type Output = Result<String>;
    type IntoFuture = BoxFuture<'static, Result<String>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let env = self.envelope?;
            Self::validate(self.kind, &env)?;
            if let Some(validator) = &self.validator {
                validator.check(&env).await?;
            }
            let id = env.id.clone();
            self.bus.publish(env).await?;
            Ok(id)
        })
    }
}
