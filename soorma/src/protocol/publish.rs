//! Publishing: [`BusClient`] fills envelope fields consistently (tenant, trace, parent) and
//! checks requests against their consumer's schema; [`Publish`] is one pending publication.

use std::future::IntoFuture;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use soorma_common::events::CANCEL_REQUESTED;
use soorma_common::{EventEnvelope, Topic};

use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::platform::validation::RequestValidator;
use crate::spi::bus::EventBus;
use crate::spi::envelope::check_envelope;
use crate::spi::tenant::validate_tenant;
use crate::util::{BoxFuture, new_id, now_rfc3339};

impl Platform {
    /// A bus client publishing as `source`, validating requests against registered schemas.
    pub(crate) fn bus_client(&self, source: &str) -> BusClient {
        BusClient::new(self.bus().clone(), source).with_validator(self.validator().clone())
    }
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

    /// Fails with [`Error::NoConsumer`] when no registered agent consumes the action request
    /// `envelope` for its tenant, so that a caller waiting for a reply learns at once that
    /// none will come (a no-op for clients made with [`BusClient::new`] and for other topics).
    pub(crate) async fn check_consumer(&self, envelope: &EventEnvelope) -> Result<()> {
        let Some(v) = &self.validator else {
            return Ok(());
        };
        if envelope.topic != Topic::ActionRequests
            || v.has_consumer(&envelope.event_type, envelope.tenant())
                .await
        {
            return Ok(());
        }
        tracing::warn!(event_type = %envelope.event_type, tenant = envelope.tenant(), "no registered agent consumes the request");
        Err(Error::NoConsumer {
            event: envelope.event_type.clone(),
        })
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

    /// Asks every instance of every agent to stop the work of the request event `request_id`
    /// ([`CANCEL_REQUESTED`](soorma_common::events::CANCEL_REQUESTED) on `system-events`). Only
    /// the work of the publication's tenant stops: set it with
    /// [`tenant_id`](Publish::tenant_id) (on NATS the subject's tenant is authoritative).
    /// [`Client::cancel`](crate::Client::cancel) is the usual way to call it.
    ///
    /// ```
    /// # async fn demo(bus: soorma::BusClient) -> soorma::Result<()> {
    /// bus.cancel("req-1").tenant_id("acme").await?;
    /// # Ok(()) }
    /// ```
    pub fn cancel(&self, request_id: impl Into<String>) -> Publish {
        let request_id = request_id.into();
        let mut p = self.start(
            Kind::Publish,
            Topic::SystemEvents,
            CANCEL_REQUESTED.to_owned(),
            serde_json::json!({ "request_id": request_id }),
        );
        if let Ok(env) = &mut p.envelope {
            env.correlation_id = Some(request_id);
        }
        p
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

    /// Publishes several prepared envelopes ([`EventBus::publish_batch`]).
    pub(crate) async fn publish_envelopes(&self, envelopes: Vec<EventEnvelope>) -> Result<()> {
        self.bus.publish_batch(envelopes).await
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

    /// A new event (a random id) in this client's context; a root event starts a trace of
    /// its own id.
    pub(crate) fn envelope(&self, topic: Topic, event_type: String, data: Value) -> EventEnvelope {
        let id = new_id();
        self.build(id.clone(), topic, event_type, data, || id)
    }

    /// An event with a given id (a derived one: a reply's, a sub-task's) in this client's
    /// context; a root event starts a new trace.
    pub(crate) fn envelope_with_id(
        &self,
        id: String,
        topic: Topic,
        event_type: String,
        data: Value,
    ) -> EventEnvelope {
        self.build(id, topic, event_type, data, new_id)
    }

    fn build(
        &self,
        id: String,
        topic: Topic,
        event_type: String,
        data: Value,
        root_trace: impl FnOnce() -> String,
    ) -> EventEnvelope {
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
            None => env.trace_id = Some(root_trace()),
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
        let env = self
            .envelope
            .as_ref()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        validate_tenant(env.tenant())?;
        Ok(env)
    }

    fn validate(kind: Kind, env: &EventEnvelope) -> Result<()> {
        // The tenant, the event type (not empty, a subject's tokens) and every id's bounds.
        check_envelope(env)?;
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
            if self.kind == Kind::Request {
                // A new id (see `start`): may be stored with other requests of its subject.
                self.bus.publish_coalesced(env).await?;
            } else {
                self.bus.publish(env).await?;
            }
            Ok(id)
        })
    }
}
