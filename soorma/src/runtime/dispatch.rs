//! Dispatch: each delivery goes through the agent's service stack, built once per start:
//!
//! ```text
//! concurrency limit → route (find the handler; none: ack) → tracing span → settle (keep the
//! delivery alive while handling, drop the handler when its request is canceled; ack, reply,
//! failure policy, retry or dead-letter) → catch panic → the user's layers → catch panic →
//! the handler
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::json;
use soorma_common::events::DEAD_LETTERED;
use soorma_common::{ActionReply, EventEnvelope, Topic};
use tokio::sync::{Semaphore, watch};
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tracing::Instrument;
use tracing::instrument::Instrumented;

use super::cancel::InFlight;
use super::extract::{AgentRuntime, HandlerInput};
use super::handler::Handler;
use super::service::{
    CatchPanic, CatchPanicLayer, HandlerError, HandlerRequest, HandlerResponse, HandlerService,
    UserLayer, handler_service,
};
use crate::protocol::reply::{ReplyRoute, reply_envelope, send_reply};
use crate::spi::bus::{Delivery, Settlement, Subscription};
use crate::spi::envelope::check_envelope;
use crate::util::{BoxFuture, MAX_REASON_BYTES, bounded};

/// The most events one agent handles at once ([`AgentBuilder::concurrency`](crate::AgentBuilder::concurrency)).
pub(crate) const MAX_CONCURRENCY: usize = 1 << 20;

/// Problems with an agent's dispatch limits, for the start-time configuration check.
pub(crate) fn limit_problems(concurrency: usize, max_deliver: u32) -> Vec<String> {
    let mut problems = Vec::new();
    if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
        problems.push(format!(
            "concurrency({concurrency}) is out of range: an agent handles 1 to {MAX_CONCURRENCY} events at once"
        ));
    }
    if max_deliver == 0 {
        problems.push(
            "max_deliver(0) is out of range: an event is delivered at least once (1 to u32::MAX)"
                .to_owned(),
        );
    }
    problems
}

/// The agent's handlers by topic and event (`"*"`: every event of the topic).
#[derive(Default)]
pub(crate) struct Table {
    pub(crate) exact: HashMap<Topic, HashMap<String, Arc<Handler>>>,
    pub(crate) wildcard: HashMap<Topic, Arc<Handler>>,
}

impl Table {
    fn find(&self, topic: Topic, event_type: &str) -> Option<&Arc<Handler>> {
        self.exact
            .get(&topic)
            .and_then(|m| m.get(event_type))
            .or_else(|| self.wildcard.get(&topic))
    }
}

/// An agent's service stack: one `call` per delivery; its future settles the delivery.
pub(crate) type Stack = ConcurrencyLimit<Route<Trace<Settle<CatchPanic<HandlerService>>>>>;

/// Builds the agent's stack. `inflight` is the concurrency limit, shared by the agent's
/// subscriptions (its permits all back = nothing in flight); `running` the deliveries being
/// handled, for cancellation.
pub(crate) fn stack(
    runtime: Arc<AgentRuntime>,
    table: Arc<Table>,
    inflight: Arc<Semaphore>,
    running: Arc<InFlight>,
    max_deliver: u32,
    layers: &[UserLayer],
) -> Stack {
    ServiceBuilder::new()
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(inflight))
        .layer(RouteLayer { table, runtime })
        .layer(TraceLayer)
        .layer(SettleLayer {
            max_deliver,
            running,
        })
        .layer(CatchPanicLayer)
        .service(handler_service(layers))
}

/// Takes deliveries from `sub` until stopped, each handled in a task of its own. At the
/// agent's concurrency limit (or while a user layer is not ready) it waits before taking the
/// next delivery, so back-pressure reaches the bus.
pub(crate) async fn dispatch_loop(
    mut sub: Box<dyn Subscription>,
    mut service: Stack,
    mut stop: watch::Receiver<bool>,
) {
    while let Some(delivery) = next_until_stopped(&mut sub, &mut stop).await {
        // Waiting for a free handler is kept alive like handling, so the event is not
        // redelivered meanwhile.
        match delivery.keep_alive_while(service.ready()).await {
            Ok(ready) => {
                tokio::spawn(ready.call(delivery));
            }
            Err(e) => {
                // A tower service that fails `poll_ready` is broken for good.
                tracing::error!(error = %e, event_id = %delivery.envelope.id, "the agent's service stack failed; it stops taking events from this subscription");
                settle(
                    delivery,
                    Settlement::Retry {
                        delay: Duration::from_secs(1),
                    },
                )
                .await;
                break;
            }
        }
    }
    // Closing the subscription stops delivery to this instance (other instances keep serving)
    // and settles what it holds for this one.
    sub.close().await;
    drop(sub);
}

/// The next delivery of `sub`, or `None` once the agent is stopped or the subscription ends
/// (a stop wins over a delivery ready at the same time).
pub(crate) async fn next_until_stopped(
    sub: &mut Box<dyn Subscription>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Delivery> {
    tokio::select! {
        biased;
        _ = stop.changed() => None,
        d = sub.next() => d,
    }
}

/// A delivery with its handler found.
pub(crate) struct Routed {
    delivery: Delivery,
    request: HandlerRequest,
}

/// Finds each delivery's handler; deliveries no handler takes are acknowledged.
pub(crate) struct RouteLayer {
    table: Arc<Table>,
    runtime: Arc<AgentRuntime>,
}

impl<S> Layer<S> for RouteLayer {
    type Service = Route<S>;

    fn layer(&self, inner: S) -> Route<S> {
        Route {
            inner,
            table: self.table.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

/// See [`RouteLayer`].
#[derive(Clone)]
pub(crate) struct Route<S> {
    inner: S,
    table: Arc<Table>,
    runtime: Arc<AgentRuntime>,
}

impl<S> Service<Delivery> for Route<S>
where
    S: Service<Routed, Response = (), Error = HandlerError>,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = HandlerError;
    type Future = BoxFuture<'static, Result<(), HandlerError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, delivery: Delivery) -> Self::Future {
        let env = &delivery.envelope;
        let Some(handler) = self.table.find(env.topic, &env.event_type).cloned() else {
            tracing::debug!(agent = %self.runtime.name, event_type = %env.event_type, "no handler for event; acknowledged");
            return Box::pin(async move {
                settle(delivery, Settlement::Ack).await;
                Ok(())
            });
        };
        let request = HandlerRequest {
            input: HandlerInput {
                envelope: env.clone(),
                runtime: self.runtime.clone(),
                attempt: delivery.attempt,
            },
            handler,
            attempt: delivery.attempt,
        };
        Box::pin(self.inner.call(Routed { delivery, request }))
    }
}

/// A span per handled event (`soorma.handle`: agent, event type, correlation id, event id,
/// handler kind) around its handling and settlement.
pub(crate) struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = Trace<S>;

    fn layer(&self, inner: S) -> Trace<S> {
        Trace(inner)
    }
}

/// See [`TraceLayer`].
#[derive(Clone)]
pub(crate) struct Trace<S>(S);

impl<S: Service<Routed>> Service<Routed> for Trace<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, routed: Routed) -> Self::Future {
        let req = &routed.request;
        let env = req.envelope();
        let span = tracing::info_span!(
            "soorma.handle",
            agent = %req.agent(),
            event_type = %env.event_type,
            correlation_id = env.correlation_id.as_deref().unwrap_or(""),
            event_id = %env.id,
            handler = req.handler_kind().attribute(),
        );
        let fut = span.in_scope(|| self.0.call(routed));
        fut.instrument(span)
    }
}

/// Runs the handler service while keeping the delivery alive, turns its outcome into a
/// settlement (ack; a tool's reply; the failure policy of the handler's layer; retry with
/// backoff; dead letter with an `event.dead_lettered` notice) and settles the delivery.
///
/// When the delivery's request is canceled (see [`super::cancel`]) the handler's future is
/// dropped and the delivery acknowledged: no reply, no retry, no failure policy (the one who
/// canceled knows; a worker's cancel hook marks its task canceled).
pub(crate) struct SettleLayer {
    max_deliver: u32,
    running: Arc<InFlight>,
}

impl<S> Layer<S> for SettleLayer {
    type Service = Settle<S>;

    fn layer(&self, inner: S) -> Settle<S> {
        Settle {
            inner,
            max_deliver: self.max_deliver,
            running: self.running.clone(),
        }
    }
}

/// See [`SettleLayer`].
#[derive(Clone)]
pub(crate) struct Settle<S> {
    inner: S,
    max_deliver: u32,
    running: Arc<InFlight>,
}

impl<S> Service<Routed> for Settle<S>
where
    S: Service<HandlerRequest, Response = HandlerResponse, Error = HandlerError>,
    S::Future: Send + 'static,
{
    type Response = ();
    type Error = HandlerError;
    type Future = BoxFuture<'static, Result<(), HandlerError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, routed: Routed) -> Self::Future {
        let Routed { delivery, request } = routed;
        let input = request.input.clone();
        let handler = request.handler.clone();
        let env = &delivery.envelope;
        // Only requests can be canceled: a cancel naming a result's id (a reply id is derived
        // from its request's) must not make the result be dropped unrecorded.
        let mut registration = (env.topic == Topic::ActionRequests)
            .then(|| self.running.register(env.tenant(), &env.id));
        let work = self.inner.call(request);
        let max_deliver = self.max_deliver;
        Box::pin(async move {
            // A slow handler keeps its delivery alive, and so does publishing its outcome (a
            // reply retried through a failover, say), so the platform does not hand the event
            // to another instance while this one is still working on it.
            let next = delivery
                .keep_alive_while(async {
                    let outcome = tokio::select! {
                        biased;
                        () = async {
                            match registration.as_mut() {
                                Some(r) => r.canceled().await,
                                None => std::future::pending().await,
                            }
                        } => None,
                        outcome = work => Some(outcome),
                    };
                    drop(registration);
                    // Copies of the event the platform sent while it was handled count as
                    // deliveries: the failure policy, not the bus, decides the last one.
                    let attempt = delivery.current_attempt();
                    match outcome {
                        // `work` (the handler's future) is dropped by now.
                        None => Next::Canceled,
                        // A batch's replies are stored together, by the platform, once all
                        // are handled.
                        Some(Ok(HandlerResponse {
                            reply: Some(value), ..
                        })) if delivery.batches_replies() => {
                            let reply = ActionReply::success(&input.envelope.id, value);
                            let route = ReplyRoute::of_request(&input.envelope);
                            // Checked here: one reply the bus refuses must not fail its batch.
                            let reply =
                                reply_envelope(&input.bus(), &input.envelope.id, route, reply)
                                    .and_then(|r| r.map(checked).transpose());
                            match reply {
                                Ok(reply) => Next::BatchReply(reply),
                                Err(e) => Next::Settle(
                                    retry_or_dead_letter(
                                        &input,
                                        e.to_string(),
                                        e.is_retryable(),
                                        attempt,
                                        max_deliver,
                                    )
                                    .await,
                                ),
                            }
                        }
                        Some(outcome) => Next::Settle(
                            settlement(&input, &handler, outcome, attempt, max_deliver).await,
                        ),
                    }
                })
                .await;
            let settled = match next {
                Next::Canceled => {
                    tracing::info!(
                        "request canceled: the handler was dropped; acknowledged without a reply"
                    );
                    delivery.settle(Settlement::Ack).await
                }
                Next::BatchReply(Some(reply)) => delivery.settle_with_reply(reply).await,
                Next::BatchReply(None) => delivery.settle(Settlement::Ack).await,
                Next::Settle(s) => delivery.settle(s).await,
            };
            if let Err(e) = settled {
                tracing::warn!(error = %e, "could not settle delivery");
            }
            Ok(())
        })
    }
}

/// `envelope` when the bus would take it (see [`check_envelope`]).
fn checked(envelope: EventEnvelope) -> crate::error::Result<EventEnvelope> {
    check_envelope(&envelope)?;
    Ok(envelope)
}

/// What becomes of a handled delivery.
// Made once per delivery and moved once: boxing the reply would cost an allocation.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// Its request was canceled: acknowledged, nothing else.
    Canceled,
    /// Its reply (none when the request named no reply event), to be stored with its batch's.
    BatchReply(Option<EventEnvelope>),
    /// Settled as this.
    Settle(Settlement),
}

/// How a handled event is settled.
async fn settlement(
    input: &HandlerInput,
    handler: &Handler,
    outcome: Result<HandlerResponse, HandlerError>,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    let env = &input.envelope;
    match outcome {
        Ok(HandlerResponse {
            reply: Some(value), ..
        }) => {
            let reply = ActionReply::success(&env.id, value);
            reply_or_retry(input, reply, attempt, max_deliver).await
        }
        Ok(_) => Settlement::Ack,
        Err(HandlerError::InvalidPayload(err)) => {
            tracing::warn!(error = %err, "rejected event: payload does not match the handler's type");
            if env.response_event.is_some()
                && let Err(e) = send_reply(
                    &input.bus(),
                    env,
                    ActionReply::failure(&env.id, err.to_string()),
                )
                .await
            {
                tracing::error!(error = %e, "could not publish the error reply");
            }
            dead_letter(input, err.to_string(), attempt).await
        }
        Err(HandlerError::Failed { message, retryable }) => {
            on_handler_error(input, handler, message, retryable, attempt, max_deliver).await
        }
        Err(panicked @ HandlerError::Panicked(_)) => {
            let message = panicked.to_string();
            tracing::error!(%message, "handler panicked; the agent keeps serving");
            on_handler_error(input, handler, message, false, attempt, max_deliver).await
        }
    }
}

async fn on_handler_error(
    input: &HandlerInput,
    handler: &Handler,
    message: String,
    retryable: bool,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    // A transient failure (the platform briefly unreachable, a lost revision race, a
    // `ToolError::retryable()`) is redelivered while attempts remain; handlers are re-entrant
    // (sub-task ids are derived from the event, publishes are de-duplicated by event id).
    if retryable && attempt < max_deliver {
        tracing::warn!(error = %message, attempt, "transient handler failure; redelivering");
        return retry_or_dead_letter(input, message, retryable, attempt, max_deliver).await;
    }
    let Some(policy) = handler.on_failure else {
        tracing::warn!(error = %message, retryable, attempt, "handler failed");
        return retry_or_dead_letter(input, message, retryable, attempt, max_deliver).await;
    };
    match policy(input, message.clone()).await {
        Ok(true) => Settlement::Ack,
        Ok(false) => retry_or_dead_letter(input, message, false, attempt, max_deliver).await,
        Err(e) => {
            tracing::error!(error = %e, "could not apply the handler's failure policy");
            retry_or_dead_letter(input, e.to_string(), e.is_retryable(), attempt, max_deliver).await
        }
    }
}

async fn retry_or_dead_letter(
    input: &HandlerInput,
    reason: String,
    retryable: bool,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    if retryable && attempt < max_deliver {
        let delay = Duration::from_millis(50u64.saturating_mul(1 << attempt.min(8)));
        Settlement::Retry { delay }
    } else {
        dead_letter(input, reason, attempt).await
    }
}

/// Publishes `event.dead_lettered` on `system-events` and returns the dead-letter settlement;
/// the reason (which may quote hostile input) is cut to [`MAX_REASON_BYTES`].
async fn dead_letter(input: &HandlerInput, reason: String, attempt: u32) -> Settlement {
    let reason = bounded(&reason, MAX_REASON_BYTES);
    let env = &input.envelope;
    let data = json!({
        "event_id": bounded(&env.id, MAX_REASON_BYTES),
        "event_type": bounded(&env.event_type, MAX_REASON_BYTES),
        "topic": env.topic,
        "agent": &*input.runtime.name,
        "reason": reason,
        "attempt": attempt,
    });
    if let Err(e) = input
        .bus()
        .publish(Topic::SystemEvents, DEAD_LETTERED, data)
        .await
    {
        tracing::error!(error = %e, "could not publish the dead-letter notice");
    }
    Settlement::DeadLetter { reason }
}

/// Publishes a tool's reply; the request is acknowledged only once the reply is stored, so a
/// failed publish (the platform briefly unreachable) redelivers the request instead of losing
/// the reply.
async fn reply_or_retry(
    input: &HandlerInput,
    reply: ActionReply,
    attempt: u32,
    max_deliver: u32,
) -> Settlement {
    match send_reply(&input.bus(), &input.envelope, reply).await {
        Ok(()) => Settlement::Ack,
        Err(e) => {
            tracing::warn!(error = %e, attempt, "could not publish the reply; redelivering the request");
            retry_or_dead_letter(input, e.to_string(), e.is_retryable(), attempt, max_deliver).await
        }
    }
}

async fn settle(delivery: Delivery, settlement: Settlement) {
    if let Err(e) = delivery.settle(settlement).await {
        tracing::warn!(error = %e, "could not settle delivery");
    }
}
