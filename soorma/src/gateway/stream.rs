//! Server-sent event streams of task updates, and progress routed to tasks.

use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use soorma_common::a2a::{StreamResponse, Task};
use soorma_common::{ActionReply, Topic};
use tokio::sync::{broadcast, watch};

use super::GatewayState;
use super::rpc;
use super::tasks::Outcome;
use crate::spi::bus::{Settlement, Subscription};

/// The task streams open per tenant, each limited to `max` (see
/// [`TaskLimits::max_streams_per_tenant`](super::TaskLimits::max_streams_per_tenant)).
pub(super) struct StreamSlots {
    open: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    max: usize,
}

/// One open stream of a tenant, until dropped.
pub(super) struct StreamSlot {
    slots: Arc<StreamSlots>,
    tenant: String,
}

impl StreamSlots {
    pub(super) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            open: std::sync::Mutex::default(),
            max,
        })
    }

    /// A slot for one more stream of `tenant`, or the error refusing it.
    pub(super) fn open(self: &Arc<Self>, tenant: &str) -> Result<StreamSlot, rpc::RpcError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(tenant.to_owned()).or_default();
        if *n >= self.max {
            return Err(rpc::RpcError::too_many_streams(*n, tenant));
        }
        *n += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            tenant: tenant.to_owned(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

/// Server-sent events: the task, then its updates until it finishes or the gateway stops
/// (`stopping` set). `v0_3`: the events in the A2A v0.3 shape.
pub(super) fn stream(
    id: Value,
    task: Task,
    rx: broadcast::Receiver<StreamResponse>,
    v0_3: bool,
    stopping: watch::Receiver<bool>,
    slot: StreamSlot,
) -> Response {
    let shape = move |response: StreamResponse| {
        let value = serde_json::to_value(response).unwrap_or(Value::Null);
        if v0_3 {
            super::v0_3::stream_out(value)
        } else {
            value
        }
    };
    let first = rpc::success(&id, shape(StreamResponse::Task(task)));
    let events = futures_util::stream::unfold(
        (Some(first), rx, id, false, (stopping, slot)),
        move |(first, mut rx, id, done, (mut stopping, slot))| async move {
            if let Some(first) = first {
                return Some((sse(&first), (None, rx, id, false, (stopping, slot))));
            }
            if done {
                return None;
            }
            loop {
                let update = tokio::select! {
                    update = rx.recv() => update,
                    _ = stopping.wait_for(|stopping| *stopping) => return None,
                };
                match update {
                    Ok(update) => {
                        let finished = matches!(&update, StreamResponse::StatusUpdate(u) if u.status.state.is_terminal());
                        let body = rpc::success(&id, shape(update));
                        return Some((sse(&body), (None, rx, id, finished, (stopping, slot))));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(skipped = n, "a slow A2A stream missed updates");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn sse(body: &Value) -> std::result::Result<SseEvent, std::convert::Infallible> {
    Ok(SseEvent::default().data(body.to_string()))
}

/// Routes `task.progress` events of the gateway's tasks to their status (only those of the
/// task's tenant and agent).
pub(super) async fn route_progress(state: Arc<GatewayState>) {
    let mut sub = match state
        .gateway
        .platform
        .bus()
        .observe(Some(Topic::SystemEvents))
        .await
    {
        Ok(sub) => sub,
        Err(e) => {
            tracing::warn!(error = %e, "the A2A gateway cannot observe task progress; streams show start and end only");
            return;
        }
    };
    while let Some(delivery) = sub.next().await {
        let env = &delivery.envelope;
        let Some(progress) = crate::protocol::progress::progress_report(env) else {
            continue;
        };
        // Progress is published by the agent the task went to, or by one it delegated to;
        // the tenant is the check that matters.
        if let Some(task_id) = state.tasks.by_request(&progress.task_id) {
            state.tasks.apply_from(
                &task_id,
                env.tenant(),
                None,
                Outcome::Progress(progress.progress, progress.message),
            );
        }
    }
}

/// Routes the agents' replies to their tasks: a reply counts only from the task's tenant and
/// from the agent the task was sent to; any other is logged and ignored.
pub(super) async fn route_replies(state: Arc<GatewayState>, mut sub: Box<dyn Subscription>) {
    while let Some(delivery) = sub.next().await {
        let env = delivery.envelope.clone();
        if let Some(task_id) = env.correlation_id.as_deref() {
            let reply = ActionReply::from_data(&env.data, task_id);
            let outcome = if reply.success {
                Outcome::Completed(reply.result.unwrap_or(Value::Null))
            } else {
                Outcome::Failed(reply.error.unwrap_or_default())
            };
            state
                .tasks
                .apply_from(task_id, env.tenant(), Some(&env.source), outcome);
        }
        if let Err(e) = delivery.settle(Settlement::Ack).await {
            tracing::debug!(error = %e, "acknowledging an A2A reply failed");
        }
    }
}

/// Fails, once a second, the tasks that have had no reply within the task timeout.
pub(super) async fn expire_tasks(state: Arc<GatewayState>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let expired = state.tasks.expire();
        if expired > 0 {
            tracing::warn!(
                expired,
                "A2A tasks failed: no reply within the task timeout"
            );
        }
    }
}
