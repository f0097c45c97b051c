//! Server-sent event streams of task updates, and progress routed to tasks.

use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use soorma_common::Topic;
use soorma_common::a2a::{StreamResponse, Task};
use tokio::sync::broadcast;

use super::GatewayState;
use super::rpc;
use super::tasks::Outcome;

/// Server-sent events: the task, then its updates until it finishes.
pub(super) fn stream(id: Value, task: Task, rx: broadcast::Receiver<StreamResponse>) -> Response {
    let first = rpc::success(
        &id,
        serde_json::to_value(StreamResponse::Task(task)).unwrap_or(Value::Null),
    );
    let events = futures_util::stream::unfold(
        (Some(first), rx, id, false),
        |(first, mut rx, id, done)| async move {
            if let Some(first) = first {
                return Some((sse(&first), (None, rx, id, false)));
            }
            if done {
                return None;
            }
            loop {
                match rx.recv().await {
                    Ok(update) => {
                        let finished = matches!(&update, StreamResponse::StatusUpdate(u) if u.status.state.is_terminal());
                        let body =
                            rpc::success(&id, serde_json::to_value(update).unwrap_or(Value::Null));
                        return Some((sse(&body), (None, rx, id, finished)));
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

/// Routes `task.progress` events of the gateway's tasks to their status.
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
        let task_id = state.tasks.by_request(&progress.task_id).or_else(|| {
            env.correlation_id
                .clone()
                .filter(|c| state.tasks.contains(c))
        });
        if let Some(task_id) = task_id {
            state.tasks.apply(
                &task_id,
                Outcome::Progress(progress.progress, progress.message),
            );
        }
    }
}
