//! Dispatch: each delivery goes to its handler; the outcome settles the delivery (ack, retry,
//! dead-letter) and, for a handler that answers, publishes the reply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use soorma_common::events::DEAD_LETTERED;
use soorma_common::{ActionReply, Topic};
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

use super::extract::{AgentRuntime, HandlerInput};
use super::handler::{Failure, Handler};
use crate::protocol::reply::send_reply;
use crate::spi::bus::{Delivery, Settlement, Subscription};
use crate::util::CatchUnwind;

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

/// Takes deliveries from `sub` until stopped, each handled in a task of its own.
pub(crate) async fn dispatch_loop(
    mut sub: Box<dyn Subscription>,
    runtime: Arc<AgentRuntime>,
    table: Arc<Table>,
    inflight: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    max_deliver: u32,
) {
    loop {
        let delivery = tokio::select! {
            biased;
            _ = stop.changed() => break,
            d = sub.next() => match d {
                Some(d) => d,
                None => break,
            },
        };
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let runtime = runtime.clone();
        let table = table.clone();
        tokio::spawn(async move {
            handle_delivery(runtime, table, delivery, max_deliver).await;
            drop(permit);
        });
    }
    // Dropping the subscription stops delivery to this instance; other instances keep serving.
    drop(sub);
}

async fn handle_delivery(
    runtime: Arc<AgentRuntime>,
    table: Arc<Table>,
    delivery: Delivery,
    max_deliver: u32,
) {
    let env = delivery.envelope.clone();
    let Some(handler) = table.find(env.topic, &env.event_type).cloned() else {
        tracing::debug!(agent = %runtime.name, event_type = %env.event_type, "no handler for event; acknowledged");
        settle(delivery, Settlement::Ack).await;
        return;
    };
    let span = tracing::info_span!(
        "soorma.handle",
        agent = %runtime.name,
        event_type = %env.event_type,
        correlation_id = env.correlation_id.as_deref().unwrap_or(""),
        event_id = %env.id,
        handler = handler.kind.attribute(),
    );
    async move {
        let input = HandlerInput { envelope: env.clone(), runtime: runtime.clone(), attempt: delivery.attempt };
        // A slow handler keeps its delivery alive, so the platform does not hand the event to
        // another instance while this one is still working on it.
        let outcome = delivery
            .keep_alive_while(CatchUnwind((handler.call)(input.clone())))
            .await;
        let settlement = match outcome {
            Ok(Ok(Some(value))) => {
                let reply = ActionReply::success(&env.id, value);
                reply_or_retry(&input, reply, delivery.attempt, max_deliver).await
            }
            Ok(Ok(None)) => Settlement::Ack,
            Ok(Err(Failure::Decode(err))) => {
                tracing::warn!(error = %err, "rejected event: payload does not match the handler's type");
                if env.response_event.is_some()
                    && let Err(e) = send_reply(&input.bus(), &env, ActionReply::failure(&env.id, err.to_string())).await
                {
                    tracing::error!(error = %e, "could not publish the error reply");
                }
                dead_letter(&input, err.to_string(), delivery.attempt).await
            }
            Ok(Err(Failure::Handler { message, retryable })) => {
                on_handler_error(&input, &handler, message, retryable, delivery.attempt, max_deliver).await
            }
            Err(panic) => {
                let message = format!("handler panicked: {panic}");
                tracing::error!(%message, "handler panicked; the agent keeps serving");
                on_handler_error(&input, &handler, message, false, delivery.attempt, max_deliver).await
            }
        };
        settle(delivery, settlement).await;
    }
    .instrument(span)
    .await;
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

/// Publishes `event.dead_lettered` on `system-events` and returns the dead-letter settlement.
async fn dead_letter(input: &HandlerInput, reason: String, attempt: u32) -> Settlement {
    let env = &input.envelope;
    let data = json!({
        "event_id": env.id,
        "event_type": env.event_type,
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
