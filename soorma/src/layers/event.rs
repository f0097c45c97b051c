//! The event layer (`#[on_event]`): raw events on a topic, the base of every other layer.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use soorma_common::{AgentKind, EventEnvelope, Topic};

use crate::runtime::agent::AgentBuilder;
use crate::runtime::context::context_accessors;
use crate::runtime::extract::{AgentRuntime, HandlerInput};
use crate::runtime::handler::{
    Handler, HandlerFn, HandlerKind, HandlerOutput, HandlerPayload, payload_call, schema_of,
};

/// Raw event handlers (`#[on_event]`): the base layer.
///
/// ```
/// let agent = soorma::Agent::new("audit-log");
/// # let _ = agent;
/// ```
#[derive(Debug)]
pub struct Agent;

impl Agent {
    /// A builder for an agent named `name`.
    ///
    /// ```
    /// let agent = soorma::Agent::new("audit-log");
    /// assert_eq!(agent.definition().kind, soorma::AgentKind::Agent);
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder::new(name, AgentKind::Agent)
    }
}

/// A raw event, for `#[on_event]` handlers (the Agent layer).
///
/// ```
/// use soorma::prelude::*;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct OrderPlaced { order_id: String }
///
/// #[on_event(topic = "business-facts", event = "order.placed", agent = "shipping")]
/// async fn ship(event: Event<OrderPlaced>) -> soorma::Result<()> {
///     event.bus().announce("order.shipped", serde_json::json!({"order_id": event.data.order_id})).await?;
///     Ok(())
/// }
/// ```
pub struct Event<T = Value> {
    /// The decoded payload.
    pub data: T,
    envelope: Arc<EventEnvelope>,
    runtime: Arc<AgentRuntime>,
}

impl<T> Event<T> {
    pub(crate) fn new(data: T, input: &HandlerInput) -> Self {
        Self {
            data,
            envelope: input.envelope.clone(),
            runtime: input.runtime.clone(),
        }
    }

    /// The topic the event arrived on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// # use soorma::prelude::*;
    /// async fn audit(event: Event) -> soorma::Result<()> {
    ///     event.bus().publish(Topic::SystemEvents, "audited", event.topic()).await?;
    ///     Ok(())
    /// }
    ///
    /// let mut t = soorma::testing::TestPlatform::new();
    /// t.start(Agent::new("auditor").use_registered_handlers(false)
    ///     .handler(Handler::on_event(Topic::BusinessFacts, "*", audit))).await?;
    /// t.client().publish(Topic::BusinessFacts, "order.placed", ()).await?;
    /// let audited = t.expect_event("audited", std::time::Duration::from_secs(1)).await?;
    /// assert_eq!(audited.data, "business-facts");
    /// # t.shutdown().await }
    /// ```
    pub fn topic(&self) -> Topic {
        self.envelope.topic
    }
}

context_accessors!(Event);

impl<T: fmt::Debug> fmt::Debug for Event<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("event_type", &self.envelope.event_type)
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

impl Handler {
    /// A raw event handler on `topic` for `event` (`"*"` = every event on the topic).
    ///
    /// ```
    /// use soorma::prelude::*;
    ///
    /// async fn audit(event: Event) {
    ///     println!("{} on {}", event.event_type(), event.topic());
    /// }
    ///
    /// let every_fact = Handler::on_event(Topic::BusinessFacts, "*", audit);
    /// assert_eq!((every_fact.topic(), every_fact.event()), (Topic::BusinessFacts, "*"));
    /// ```
    pub fn on_event<H, T, Args>(topic: Topic, event: impl Into<String>, handler: H) -> Self
    where
        H: HandlerFn<Event<T>, Args>,
        H::Output: HandlerOutput,
        T: HandlerPayload,
    {
        let call = payload_call(handler, Event::new);
        Handler::new(
            HandlerKind::Event,
            topic,
            event.into(),
            schema_of::<T>,
            H::checks(),
            call,
        )
    }
}
