//! What the scenario files share: waiting for a condition, reading a reply, counting calls.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use soorma::{ActionReply, EventEnvelope};

/// Waits until `cond` holds, polling every 5 ms; panics after `wait`.
pub async fn wait_until(wait: Duration, cond: impl Fn() -> bool) {
    tokio::time::timeout(wait, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition not reached in time");
}

/// The [`ActionReply`] an envelope carries.
pub fn reply_of(env: &EventEnvelope) -> ActionReply {
    serde_json::from_value(env.data.clone()).expect("reply shape")
}

#[derive(Clone, Default)]
/// A shared call counter (agent state).
pub struct Counter(pub Arc<AtomicUsize>);
