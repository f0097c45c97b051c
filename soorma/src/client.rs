//! A client for code outside agents: publish events and await replies to requests.

use std::collections::{HashMap, HashSet};
use std::future::IntoFuture;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use soorma_common::{ActionReply, DEFAULT_TENANT, EventEnvelope, Topic};
use tokio::sync::{oneshot, watch};

use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::protocol::decode_payload;
use crate::protocol::publish::{BusClient, Publish};
use crate::protocol::request::Request;
use crate::spi::bus::{EventFilter, Settlement, SubscriptionSpec};
use crate::util::{BoxFuture, new_id};

impl Platform {
    /// A client for code outside agents: publish, and request with awaited replies.
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let client = platform.client("cli");
    /// # let _ = client;
    /// ```
    pub fn client(&self, name: impl Into<String>) -> Client {
        Client::new(self.clone(), name)
    }
}

/// A call awaiting its reply: the call's token, the reply it waits for (topic and event type),
/// its request's id, and where to send the reply.
struct Waiter {
    token: u64,
    reply: (Topic, String),
    request_id: String,
    tx: oneshot::Sender<Arc<EventEnvelope>>,
}

impl Waiter {
    /// Whether `reply`, correlated with `correlation`, answers this call: its topic and event
    /// type, and, when it is an [`ActionReply`](soorma_common::ActionReply), its request id:
    /// the call's request or its correlation id (a goal's actions and sub-plans reply with the
    /// goal's correlation id too, and may share its reply event, under their own request ids).
    fn takes(&self, correlation: &str, reply: &EventEnvelope) -> bool {
        self.reply.0 == reply.topic
            && self.reply.1 == reply.event_type
            && soorma_common::ActionReply::request_id_of(&reply.data)
                .is_none_or(|id| id == self.request_id || id == correlation)
    }
}

/// The calls awaiting a reply, by correlation id.
type PendingMap = HashMap<String, Waiter>;
type Pending = Arc<Mutex<PendingMap>>;

fn lock(pending: &Pending) -> MutexGuard<'_, PendingMap> {
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call's entry in the pending map, removed when the call ends however it ends: a reply, a
/// timeout, a failed publish, or the call's future dropped (a caller's `select!` or timeout).
struct PendingEntry {
    pending: Pending,
    correlation: String,
    token: u64,
}

impl PendingEntry {
    fn insert(
        pending: &Pending,
        correlation: String,
        reply: (Topic, String),
        request_id: String,
        tx: oneshot::Sender<Arc<EventEnvelope>>,
    ) -> Self {
        static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let waiter = Waiter {
            token,
            reply,
            request_id,
            tx,
        };
        lock(pending).insert(correlation.clone(), waiter);
        Self {
            pending: pending.clone(),
            correlation,
            token,
        }
    }
}

impl Drop for PendingEntry {
    fn drop(&mut self) {
        let mut pending = lock(&self.pending);
        // Only this call's entry: a later call may have reused the correlation id.
        if pending
            .get(&self.correlation)
            .is_some_and(|waiter| waiter.token == self.token)
        {
            pending.remove(&self.correlation);
        }
    }
}

struct Inner {
    platform: Platform,
    bus: BusClient,
    group: String,
    tenant: Option<String>,
    user: Option<String>,
    session: Option<String>,
    timeout: Duration,
    pending: Pending,
    listening: tokio::sync::Mutex<HashSet<(Topic, String)>>,
    stop: watch::Sender<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Publishes events and awaits replies, from code that is not an agent (a CLI, a test, a
/// web handler). Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::prelude::*;
///
/// async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
///
/// let platform = Platform::embedded();
/// let tool = Tool::new("doubler")
///     .use_registered_handlers(false)
///     .handler(Handler::on_invoke("double.requested", double))
///     .start(&platform)
///     .await?;
/// let client = platform.client("example");
/// let four: i64 = client.invoke("double.requested", 2, "double.completed").await?;
/// assert_eq!(four, 4);
/// tool.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("source", &self.inner.bus.source())
            .field("tenant", &self.inner.tenant)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The time a request allows for its handling: a client's default timeout is this plus
    /// the platform's [`redelivery_delay`](crate::bus::EventBus::redelivery_delay) (NATS's
    /// `ack_wait`, 30 s by default), so that a caller still gets its reply when the instance
    /// handling its request dies and the platform redelivers the request to another one. On
    /// the embedded platform it is the whole default timeout; [`with_timeout`](Self::with_timeout)
    /// and [`Call::timeout`] override it.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(soorma::Client::DEFAULT_TIMEOUT, Duration::from_secs(30));
    /// let client = soorma::Platform::embedded().client("docs");
    /// assert_eq!(client.timeout(), soorma::Client::DEFAULT_TIMEOUT);
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    pub(crate) fn new(platform: Platform, name: impl Into<String>) -> Self {
        let timeout = Self::default_timeout_on(&platform);
        Self::build(platform, name.into(), None, None, None, timeout)
    }

    /// A new client's timeout on `platform`: [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT) past
    /// the platform's redelivery delay.
    pub(crate) fn default_timeout_on(platform: &Platform) -> Duration {
        let redelivery = platform.bus().redelivery_delay().unwrap_or_default();
        Self::DEFAULT_TIMEOUT.saturating_add(redelivery)
    }

    /// How long this client's requests wait for their replies (see
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let client = soorma::Platform::embedded().client("docs").with_timeout(Duration::from_secs(5));
    /// assert_eq!(client.timeout(), Duration::from_secs(5));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    fn build(
        platform: Platform,
        name: String,
        tenant: Option<String>,
        user: Option<String>,
        session: Option<String>,
        timeout: Duration,
    ) -> Self {
        let bus = platform.bus_client(&name);
        Self {
            inner: Arc::new(Inner {
                platform,
                bus,
                group: format!("{name}-client-{}", new_id()),
                tenant,
                user,
                session,
                timeout,
                pending: Arc::default(),
                listening: tokio::sync::Mutex::default(),
                stop: watch::channel(false).0,
            }),
        }
    }

    fn rebuild(
        &self,
        f: impl FnOnce(&mut (Option<String>, Option<String>, Option<String>, Duration)),
    ) -> Self {
        let i = &self.inner;
        let mut parts = (
            i.tenant.clone(),
            i.user.clone(),
            i.session.clone(),
            i.timeout,
        );
        f(&mut parts);
        Self::build(
            i.platform.clone(),
            i.bus.source().to_owned(),
            parts.0,
            parts.1,
            parts.2,
            parts.3,
        )
    }

    /// A client acting for `tenant` (its requests carry it; it only sees that tenant's replies).
    /// Its calls fail with [`Error::InvalidArgument`] when `tenant` is not a valid tenant id
    /// ([`validate_tenant`](crate::validate_tenant)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn whose(req: Invocation) -> Result<String, ToolError> {
    ///     Ok(req.tenant().to_owned())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// # let tool = Tool::new("tenants").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("whose.requested", whose)).start(&platform).await?;
    /// let acme = platform.client("docs").with_tenant("acme");
    /// let tenant: String = acme.invoke("whose.requested", (), "whose.completed").await?;
    /// assert_eq!(tenant, "acme");
    /// let bad = platform.client("docs").with_tenant("acme corp");
    /// let err = bad.invoke::<String>("whose.requested", (), "whose.completed").await;
    /// assert!(matches!(err, Err(soorma::Error::InvalidArgument(_))));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn with_tenant(&self, tenant: impl Into<String>) -> Self {
        let t = tenant.into();
        self.rebuild(|p| p.0 = Some(t))
    }

    /// A client acting for `user`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::new();
    /// let alice = t.client().with_user("alice");
    /// alice.publish(soorma::Topic::BusinessFacts, "profile.viewed", ()).await?;
    /// assert_eq!(t.events()[0].user_id.as_deref(), Some("alice"));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_user(&self, user: impl Into<String>) -> Self {
        let u = user.into();
        self.rebuild(|p| p.1 = Some(u))
    }

    /// A client acting in `session`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let t = soorma::testing::TestPlatform::new();
    /// let chat = t.client().with_session("chat-42");
    /// chat.publish(soorma::Topic::BusinessFacts, "message.sent", "hi").await?;
    /// assert_eq!(t.events()[0].session_id.as_deref(), Some("chat-42"));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_session(&self, session: impl Into<String>) -> Self {
        let s = session.into();
        self.rebuild(|p| p.2 = Some(s))
    }

    /// A client whose requests time out after `timeout` (default
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT) plus the platform's redelivery delay).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::prelude::*;
    ///
    /// async fn slow(_: Invocation) -> Result<(), ToolError> {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     Ok(())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// # let tool = Tool::new("slow").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("slow.requested", slow)).start(&platform).await?;
    /// let client = platform.client("docs").with_timeout(Duration::from_millis(20));
    /// let err = client.invoke::<()>("slow.requested", (), "slow.completed").await.unwrap_err();
    /// assert!(matches!(err, soorma::Error::Timeout { .. }));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        self.rebuild(|p| p.3 = timeout)
    }

    /// A bus client publishing as this client (no reply handling).
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let bus = platform.client("billing").bus();
    /// assert_eq!(bus.source(), "billing");
    /// ```
    pub fn bus(&self) -> BusClient {
        self.inner.bus.clone()
    }

    /// Publishes `data` as `event_type` on `topic` with this client's tenant, user and session.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::Topic;
    ///
    /// let t = soorma::testing::TestPlatform::new();
    /// let client = t.client().with_tenant("acme");
    /// let id = client.publish(Topic::BusinessFacts, "order.placed", serde_json::json!({"id": 7})).await?;
    /// let published = &t.events()[0];
    /// assert_eq!((published.id.as_str(), published.tenant()), (id.as_str(), "acme"));
    /// # Ok(()) }
    /// ```
    pub async fn publish(
        &self,
        topic: Topic,
        event_type: impl Into<String>,
        data: impl Serialize,
    ) -> Result<String> {
        let mut p = self.inner.bus.publish(topic, event_type, data);
        p = self.scope(p);
        p.await
    }

    fn scope(&self, mut p: Publish) -> Publish {
        if let Some(t) = &self.inner.tenant {
            p = p.tenant_id(t.clone());
        }
        if let Some(u) = &self.inner.user {
            p = p.user_id(u.clone());
        }
        if let Some(s) = &self.inner.session {
            p = p.session_id(s.clone());
        }
        p
    }

    /// Sends a request and resolves to its reply.
    ///
    /// ```no_run
    /// # async fn demo(client: soorma::Client) -> soorma::Result<()> {
    /// let reply = client
    ///     .request("research.requested", serde_json::json!({"topic": "rust"}), "research.completed")
    ///     .timeout(std::time::Duration::from_secs(5))
    ///     .await?;
    /// let report: serde_json::Value = reply.into_result()?;
    /// # let _ = report; Ok(()) }
    /// ```
    pub fn request(
        &self,
        event_type: impl Into<String>,
        data: impl Serialize,
        response_event: impl Into<String>,
    ) -> Call {
        let publish = self.scope(self.inner.bus.request(event_type, data, response_event));
        Call {
            client: self.clone(),
            publish,
            timeout: self.inner.timeout,
            check_consumer: true,
        }
    }

    /// Sends a request and decodes the successful reply's `result` as `R`; an error reply
    /// becomes [`Error::Remote`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// async fn divide(req: Invocation<(f64, f64)>) -> Result<f64, ToolError> {
    ///     let (a, b) = req.data;
    ///     if b == 0.0 { Err(ToolError::new("division by zero")) } else { Ok(a / b) }
    /// }
    ///
    /// let platform = Platform::embedded();
    /// # let tool = Tool::new("divider").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("divide.requested", divide)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let q: f64 = client.invoke("divide.requested", (6.0, 3.0), "divide.completed").await?;
    /// assert_eq!(q, 2.0);
    /// let err = client.invoke::<f64>("divide.requested", (1.0, 0.0), "divide.completed").await;
    /// assert!(matches!(err, Err(soorma::Error::Remote { .. })));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub async fn invoke<R: DeserializeOwned>(
        &self,
        event_type: impl Into<String>,
        data: impl Serialize,
        response_event: impl Into<String>,
    ) -> Result<R> {
        self.request(event_type, data, response_event)
            .await?
            .into_result()
    }

    /// Sends a typed request and resolves to its typed reply; an error reply becomes
    /// [`Error::Remote`], a reply of the wrong shape [`Error::InvalidPayload`] naming the field,
    /// and a request no registered agent consumes [`Error::NoConsumer`] at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use serde::{Deserialize, Serialize};
    /// use soorma::prelude::*;
    ///
    /// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    ///
    /// impl Request for Add {
    ///     const EVENT: &'static str = "add.requested";
    ///     type Reply = i64;
    /// }
    ///
    /// async fn add(req: Invocation<Add>) -> Result<i64, ToolError> {
    ///     Ok(req.data.a + req.data.b)
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("adder").use_registered_handlers(false)
    ///     .handler(Handler::invoke(add)).start(&platform).await?;
    /// let sum: i64 = platform.client("docs").call(Add { a: 2, b: 3 }).await?;
    /// assert_eq!(sum, 5);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn call<R: Request>(&self, request: R) -> TypedCall<R> {
        TypedCall {
            call: self.request(R::EVENT, request, R::reply_event()),
            reply: PhantomData,
        }
    }

    /// Stops the work of the request `request_id` (the id of its event: [`Call::envelope`],
    /// [`TypedCall::envelope`], or a worker's task id) of this client's tenant, wherever it runs.
    ///
    /// Every instance of every agent is told; the instance handling the request drops its
    /// handler's future (a handler sees cancellation as being dropped, as in tokio) and
    /// acknowledges the request without a reply; a delivery of it that comes later is dropped
    /// on arrival. A worker's task is marked [`TaskStatus::Canceled`](crate::TaskStatus): late
    /// sub-task results neither complete it nor publish a reply, and its pending sub-tasks are
    /// canceled in turn. Only requests of this client's tenant are affected: another tenant's
    /// cancel of the same id changes nothing. Canceling a finished or unknown request does
    /// nothing, and so does naming an event that is not a request (a result, say: it is still
    /// recorded). A pending [`Call`] for the request is not resolved by this: drop it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    /// use soorma::prelude::*;
    ///
    /// async fn slow(_: Invocation) -> Result<(), ToolError> {
    ///     tokio::time::sleep(Duration::from_secs(30)).await; // dropped when canceled
    ///     Ok(())
    /// }
    ///
    /// let platform = Platform::embedded();
    /// let tool = Tool::new("slow").use_registered_handlers(false)
    ///     .handler(Handler::on_invoke("slow.requested", slow)).start(&platform).await?;
    /// let client = platform.client("docs").with_tenant("acme");
    /// let call = client.request("slow.requested", (), "slow.completed");
    /// let request_id = call.envelope()?.id.clone();
    /// let waiting = tokio::spawn(async move { call.await });
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// client.cancel(&request_id).await?;
    /// waiting.abort(); // no reply comes: stop waiting
    /// tool.shutdown().await?; // returns at once: nothing is running any more
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, request_id: &str) -> Result<()> {
        self.scope(self.inner.bus.cancel(request_id))
            .await
            .map(drop)
    }

    async fn listen(&self, topic: Topic, event: &str) -> Result<()> {
        let mut listening = self.inner.listening.lock().await;
        let key = (topic, event.to_owned());
        if listening.contains(&key) {
            return Ok(());
        }
        // Ephemeral: a reply matters only while someone waits for it, and nothing is left on
        // the platform for the client (on NATS a core subscription, registered before the
        // request is published, removed when the client is dropped).
        // Only this client's tenant's replies (a client without one acts for the default
        // tenant): another tenant could otherwise answer its requests by correlation id.
        let tenant = self.inner.tenant.as_deref().unwrap_or(DEFAULT_TENANT);
        let spec =
            SubscriptionSpec::new(self.inner.group.clone(), topic, EventFilter::only([event]))
                .ephemeral()
                .with_tenant(tenant);
        let mut sub = self.inner.platform.bus().subscribe(spec).await?;
        let pending = self.inner.pending.clone();
        let mut stop = self.inner.stop.subscribe();
        tokio::spawn(async move {
            loop {
                let delivery = tokio::select! {
                    _ = stop.changed() => break,
                    d = sub.next() => match d { Some(d) => d, None => break },
                };
                // Only a call waiting for this reply event: a goal's plan correlates its own
                // actions' replies with the goal's id too. (The event's own topic and type: a
                // platform may hand a client's listener another of its listeners' events.)
                let env = &delivery.envelope;
                let waiter = env.correlation_id.as_ref().and_then(|c| {
                    let mut pending = lock(&pending);
                    let waits = pending.get(c).is_some_and(|w| w.takes(c, env));
                    if waits { pending.remove(c) } else { None }
                });
                if let Some(waiter) = waiter {
                    let _ = waiter.tx.send(delivery.envelope.clone());
                }
                let _ = delivery.settle(Settlement::Ack).await;
            }
        });
        listening.insert(key);
        Ok(())
    }
}

/// A pending request; `.await` it for the [`Reply`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # use soorma::prelude::*;
/// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
/// # let platform = Platform::embedded();
/// # let tool = Tool::new("doubler").use_registered_handlers(false)
/// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
/// let call = platform.client("docs").request("double.requested", 21, "double.completed");
/// let reply = call.timeout(std::time::Duration::from_secs(5)).await?;
/// assert_eq!(reply.into_result::<i64>()?, 42);
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[must_use = "a request does nothing until awaited"]
pub struct Call {
    client: Client,
    publish: Publish,
    timeout: Duration,
    check_consumer: bool,
}

impl Call {
    /// The request as it will be published (its `id` is the request's event id).
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let call = platform.client("docs").request("double.requested", 4, "double.completed");
    /// assert_eq!(call.envelope().unwrap().event_type, "double.requested");
    /// ```
    pub fn envelope(&self) -> Result<&EventEnvelope> {
        self.publish.envelope()
    }

    /// Sets how long to wait for the reply.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    ///
    /// let platform = soorma::Platform::embedded();
    /// // Nobody serves it yet: wait for a consumer that may start, for 20 ms.
    /// let call = platform.client("docs").request("later.requested", (), "later.completed");
    /// let outcome = call.skip_consumer_check().timeout(Duration::from_millis(20)).await;
    /// assert!(matches!(outcome, Err(soorma::Error::Timeout { .. })));
    /// # Ok(()) }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the request's correlation id (default: the request's event id).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("doubler").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let reply = client.request("double.requested", 4, "double.completed").correlation_id("order-7").await?;
    /// assert_eq!(reply.envelope.correlation_id.as_deref(), Some("order-7"));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.publish = self.publish.correlation_id(id);
        self
    }

    /// Sends the request without checking its payload against the schema its consumer
    /// registered (checked by default; a mismatch is [`Error::SchemaViolation`] and nothing is
    /// sent).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("doubler").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let err = client.request("double.requested", "four", "double.completed").await.unwrap_err();
    /// assert!(matches!(err, soorma::Error::SchemaViolation { .. })); // not sent
    /// // Unchecked, the tool itself rejects it with an error reply.
    /// let reply = client.request("double.requested", "four", "double.completed").skip_validation().await?;
    /// assert!(!reply.is_success());
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn skip_validation(mut self) -> Self {
        self.publish = self.publish.skip_validation();
        self
    }

    /// Sends the request even when no registered agent consumes its event (by default the call
    /// fails at once with [`Error::NoConsumer`] instead of waiting for a reply that cannot
    /// come) — for a consumer that is not running yet and will pick the request up when it
    /// starts (on NATS, requests wait in their stream).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use std::time::Duration;
    ///
    /// let platform = soorma::Platform::embedded();
    /// let client = platform.client("docs");
    /// let err = client.request("nobody.requested", (), "nobody.completed").await.unwrap_err();
    /// assert!(matches!(err, soorma::Error::NoConsumer { .. }));
    /// let waited = client
    ///     .request("nobody.requested", (), "nobody.completed")
    ///     .skip_consumer_check()
    ///     .timeout(Duration::from_millis(20))
    ///     .await;
    /// assert!(matches!(waited, Err(soorma::Error::Timeout { .. })));
    /// # Ok(()) }
    /// ```
    pub fn skip_consumer_check(mut self) -> Self {
        self.check_consumer = false;
        self
    }

    /// Sets the session of the request.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("doubler").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
    /// let client = platform.client("docs");
    /// let reply = client.request("double.requested", 4, "double.completed").session_id("chat-1").await?;
    /// assert_eq!(reply.envelope.session_id.as_deref(), Some("chat-1")); // the reply keeps it
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.publish = self.publish.session_id(id);
        self
    }

    /// Sets the reply topic (default `action-results`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("doubler").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
    /// let call = platform.client("docs").request("double.requested", 4, "double.completed");
    /// let reply = call.response_topic(Topic::NotificationEvents).await?;
    /// assert_eq!(reply.envelope.topic, Topic::NotificationEvents);
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn response_topic(mut self, topic: Topic) -> Self {
        self.publish = self.publish.response_topic(topic);
        self
    }

    async fn run(self) -> Result<Reply> {
        let env = self.publish.envelope()?;
        let response_event = env
            .response_event
            .clone()
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| Error::InvalidArgument("a request needs a response_event".into()))?;
        let topic = env.reply_topic();
        let correlation = env.correlation_id.clone().unwrap_or_else(|| env.id.clone());
        let event_type = env.event_type.clone();
        if self.check_consumer {
            self.client.inner.bus.check_consumer(env).await?;
        }
        self.client.listen(topic, &response_event).await?;
        let (tx, rx) = oneshot::channel();
        let _entry = PendingEntry::insert(
            &self.client.inner.pending,
            correlation,
            (topic, response_event.clone()),
            env.id.clone(),
            tx,
        );
        self.publish.await?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(envelope)) => Ok(Reply::new(envelope)),
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout {
                after: self.timeout,
                what: format!("`{response_event}` replying to `{event_type}`"),
            }),
        }
    }
}

/// A pending typed request ([`Client::call`]); `.await` it for the reply `R::Reply`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # use serde::{Deserialize, Serialize};
/// # use soorma::prelude::*;
/// # #[derive(Serialize, Deserialize, schemars::JsonSchema)]
/// # struct Add { a: i64, b: i64 }
/// # impl Request for Add { const EVENT: &'static str = "add.requested"; type Reply = i64; }
/// # async fn add(req: Invocation<Add>) -> Result<i64, ToolError> { Ok(req.data.a + req.data.b) }
/// # let platform = Platform::embedded();
/// # let tool = Tool::new("adder").use_registered_handlers(false)
/// #     .handler(Handler::invoke(add)).start(&platform).await?;
/// let sum = platform
///     .client("docs")
///     .call(Add { a: 40, b: 2 })
///     .timeout(std::time::Duration::from_secs(5))
///     .session_id("chat-1")
///     .await?;
/// assert_eq!(sum, 42);
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[must_use = "a request does nothing until awaited"]
pub struct TypedCall<R> {
    call: Call,
    reply: PhantomData<fn() -> R>,
}

impl<R: Request> TypedCall<R> {
    /// Sets how long to wait for the reply (default: the client's timeout).
    pub fn timeout(self, timeout: Duration) -> Self {
        self.map(|c| c.timeout(timeout))
    }

    /// Sets the request's correlation id (default: the request's event id).
    pub fn correlation_id(self, id: impl Into<String>) -> Self {
        self.map(|c| c.correlation_id(id))
    }

    /// Sets the session of the request.
    pub fn session_id(self, id: impl Into<String>) -> Self {
        self.map(|c| c.session_id(id))
    }

    /// Sends the request without checking its payload against its consumer's schema.
    pub fn skip_validation(self) -> Self {
        self.map(Call::skip_validation)
    }

    /// Sends the request even when no registered agent consumes it yet (see
    /// [`Call::skip_consumer_check`]).
    pub fn skip_consumer_check(self) -> Self {
        self.map(Call::skip_consumer_check)
    }

    /// The request as it will be published.
    pub fn envelope(&self) -> Result<&EventEnvelope> {
        self.call.envelope()
    }

    fn map(self, f: impl FnOnce(Call) -> Call) -> Self {
        Self {
            call: f(self.call),
            reply: PhantomData,
        }
    }
}

impl<R: Request> IntoFuture for TypedCall<R> {
    type Output = Result<R::Reply>;
    type IntoFuture = BoxFuture<'static, Result<R::Reply>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.call.run().await?.into_result() })
    }
}

impl IntoFuture for Call {
    type Output = Result<Reply>;
    type IntoFuture = BoxFuture<'static, Result<Reply>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// A reply to a request.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// # use soorma::prelude::*;
/// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
/// # let platform = Platform::embedded();
/// # let tool = Tool::new("doubler").use_registered_handlers(false)
/// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
/// let reply = platform.client("docs").request("double.requested", 21, "double.completed").await?;
/// assert_eq!(reply.envelope.event_type, "double.completed");
/// assert_eq!(reply.reply.result, Some(serde_json::json!(42)));
/// # tool.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Reply {
    /// The reply event.
    pub envelope: Arc<EventEnvelope>,
    /// The reply payload as `{request_id, success, result | error}`.
    pub reply: ActionReply,
}

impl Reply {
    fn new(envelope: Arc<EventEnvelope>) -> Self {
        let correlation = envelope.correlation_id.as_deref().unwrap_or_default();
        let reply = ActionReply::from_data(&envelope.data, correlation);
        Self { envelope, reply }
    }

    /// Whether the request succeeded.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::prelude::*;
    ///
    /// async fn refuse(_: Invocation) -> Result<(), ToolError> {
    ///     Err(ToolError::new("not today"))
    /// }
    ///
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("refuser").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("refuse.requested", refuse)).start(&platform).await?;
    /// let reply = platform.client("docs").request("refuse.requested", (), "refuse.completed").await?;
    /// assert!(!reply.is_success());
    /// assert_eq!(reply.reply.error.as_deref(), Some("not today"));
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn is_success(&self) -> bool {
        self.reply.success
    }

    /// The result decoded as `R`, or [`Error::Remote`] for an error reply.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// # async fn double(req: Invocation<i64>) -> Result<i64, ToolError> { Ok(req.data * 2) }
    /// # let platform = Platform::embedded();
    /// # let tool = Tool::new("doubler").use_registered_handlers(false)
    /// #     .handler(Handler::on_invoke("double.requested", double)).start(&platform).await?;
    /// let reply = platform.client("docs").request("double.requested", 21, "double.completed").await?;
    /// let doubled: i64 = reply.clone().into_result()?;
    /// assert_eq!(doubled, 42);
    /// assert!(reply.into_result::<String>().is_err()); // 42 is not a string
    /// # tool.shutdown().await?; Ok(()) }
    /// ```
    pub fn into_result<R: DeserializeOwned>(self) -> Result<R> {
        if self.reply.success {
            decode_payload(
                &self.envelope.event_type,
                self.reply
                    .result
                    .as_ref()
                    .unwrap_or(&serde_json::Value::Null),
            )
        } else {
            Err(Error::Remote {
                event: self.envelope.event_type.clone(),
                message: self.reply.error.unwrap_or_default(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use soorma_common::{ActionReply, EventEnvelope, Topic};

    use crate::client::Waiter;
    use crate::platform::Platform;

    #[test]
    fn a_call_takes_its_own_reply_event_and_request_only() {
        let (tx, _rx) = tokio::sync::oneshot::channel();
        let waiter = Waiter {
            token: 0,
            reply: (Topic::ActionResults, "goal.done".into()),
            request_id: "G".into(),
            tx,
        };
        let reply = |event: &str, data| {
            EventEnvelope::new("r", "x", Topic::ActionResults, event).with_data(data)
        };
        let of = |id: &str| serde_json::to_value(ActionReply::success(id, json!(1))).unwrap();
        assert!(waiter.takes("G", &reply("goal.done", of("G"))));
        assert!(waiter.takes("order-7", &reply("goal.done", of("order-7"))));
        // A plan's action (or sub-plan) replying with the goal's event and correlation.
        assert!(!waiter.takes("G", &reply("goal.done", of("G-a1"))));
        assert!(!waiter.takes("G", &reply("search.done", of("G"))));
        // Raw data: its own `request_id` field is not a reply's.
        assert!(waiter.takes("G", &reply("goal.done", json!({"request_id": "ext-42"}))));
        assert!(waiter.takes("G", &reply("goal.done", json!({"items": []}))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_dropped_before_their_reply_leave_no_pending_entry() {
        let platform = Platform::embedded();
        let client = platform.client("test");
        // Nobody serves `nobody.requested`: every call waits for a reply until dropped.
        let calls: Vec<_> = (0..1_000)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    client
                        .request("nobody.requested", (), "nobody.done")
                        .skip_consumer_check()
                        .await
                })
            })
            .collect();
        let pending = || crate::client::lock(&client.inner.pending).len();
        tokio::time::timeout(Duration::from_secs(10), async {
            while pending() < 1_000 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every call registered");
        for call in &calls {
            call.abort();
        }
        for call in calls {
            assert!(call.await.unwrap_err().is_cancelled());
        }
        assert_eq!(pending(), 0);

        // A call that ends by its own timeout or gets its reply leaves nothing either.
        let timed_out = client
            .request("nobody.requested", (), "nobody.done")
            .skip_consumer_check()
            .timeout(Duration::from_millis(10))
            .await;
        assert!(matches!(
            timed_out,
            Err(crate::error::Error::Timeout { .. })
        ));
        assert_eq!(pending(), 0);
    }
}
