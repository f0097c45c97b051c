//! Replies: the one place a reply to a request is built and published. The reply's `data` is
//! an [`ActionReply`]; it is decoded with [`ActionReply::outcome_of`].

use soorma_common::{ActionReply, EventEnvelope, Topic};

use super::publish::BusClient;
use crate::error::{Error, Result};
use crate::util::{MAX_REASON_BYTES, bounded};

/// Where the reply to one request goes, and the envelope fields it carries (those of the
/// request, or of the task or plan record that answers it).
#[derive(Debug, Clone)]
pub(crate) struct ReplyRoute {
    /// The reply event the caller asked for.
    pub(crate) event: Option<String>,
    /// The reply topic (default `action-results`).
    pub(crate) topic: Option<Topic>,
    /// The caller's correlation id.
    pub(crate) correlation_id: Option<String>,
    pub(crate) tenant_id: Option<String>,
    pub(crate) user_id: Option<String>,
    pub(crate) session_id: Option<String>,
    /// The plan the reply belongs to (a sub-plan's reply moves its parent plan).
    pub(crate) plan_id: Option<String>,
}

impl ReplyRoute {
    /// The route of a reply to `request`, which is being handled.
    pub(crate) fn of_request(request: &EventEnvelope) -> Self {
        Self {
            event: request.response_event.clone(),
            topic: Some(request.reply_topic()),
            correlation_id: Some(
                request
                    .correlation_id
                    .clone()
                    .unwrap_or_else(|| request.id.clone()),
            ),
            tenant_id: request.tenant_id.clone(),
            user_id: request.user_id.clone(),
            session_id: request.session_id.clone(),
            plan_id: request.plan_id.clone(),
        }
    }
}

/// Publishes `reply` to the request `answered` (a request, task or plan id) along `route`.
/// The reply's id is derived from `answered`, so a second reply to the same request (a
/// redelivery, two instances racing) is dropped by the bus's duplicate window. An error
/// message is cut to [`MAX_REASON_BYTES`]. Nothing is published (and a warning logged) when
/// the request named no reply event.
pub(crate) async fn publish_reply(
    bus: &BusClient,
    answered: &str,
    route: ReplyRoute,
    reply: ActionReply,
) -> Result<()> {
    match reply_envelope(bus, answered, route, reply)? {
        Some(env) => bus.publish_envelope(env).await,
        None => Ok(()),
    }
}

/// The envelope answering `answered` along `route`; `None` (logged) when the request named no
/// response event.
pub(crate) fn reply_envelope(
    bus: &BusClient,
    answered: &str,
    route: ReplyRoute,
    mut reply: ActionReply,
) -> Result<Option<EventEnvelope>> {
    let Some(event) = route.event.filter(|e| !e.trim().is_empty()) else {
        tracing::warn!(
            answered,
            "the request named no response_event; no reply sent"
        );
        return Ok(None);
    };
    // An error message may quote hostile input: an error reply stays small.
    if let Some(error) = &mut reply.error {
        *error = bounded(error, MAX_REASON_BYTES);
    }
    let data = serde_json::to_value(reply).map_err(|e| Error::serialize("reply", e))?;
    let mut env = bus.envelope_with_id(
        format!("{answered}-reply"),
        route.topic.unwrap_or(Topic::ActionResults),
        event,
        data,
    );
    env.correlation_id = route.correlation_id;
    env.tenant_id = route.tenant_id;
    env.user_id = route.user_id;
    env.session_id = route.session_id;
    env.plan_id = route.plan_id;
    Ok(Some(env))
}

pub(crate) async fn send_reply(
    bus: &BusClient,
    request: &EventEnvelope,
    reply: ActionReply,
) -> Result<()> {
    publish_reply(bus, &request.id, ReplyRoute::of_request(request), reply).await
}
