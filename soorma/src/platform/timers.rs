//! Durable timers: an event to publish at a due time, kept in the `timers` bucket until it
//! fires (or is cancelled), so a restarted agent fires the timers of the one that stopped.
//! Timer events have stable ids: when two instances fire the same timer, the bus keeps one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use soorma_common::EventEnvelope;

use super::Platform;
use crate::error::Result;
use crate::spi::state::{self, StateKey};

/// The state bucket holding pending timers (`<tenant>.<timer id>`).
pub const TIMERS_BUCKET: &str = "timers";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TimerRecord {
    /// When to fire, in milliseconds since the Unix epoch.
    due_at_ms: u64,
    /// What to publish.
    envelope: EventEnvelope,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn key(tenant: &str, id: &str) -> StateKey {
    StateKey::new(TIMERS_BUCKET, tenant, id)
}

/// Stores a timer that publishes `envelope` after `after`, and starts waiting for it. The
/// envelope's id is the timer id.
pub(crate) async fn schedule(
    platform: &Platform,
    envelope: EventEnvelope,
    after: Duration,
) -> Result<()> {
    let tenant = envelope.tenant().to_owned();
    let record = TimerRecord {
        due_at_ms: now_ms().saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
        envelope,
    };
    let key = key(&tenant, &record.envelope.id);
    platform
        .state()
        .put(&key, state::encode("timer", &record)?)
        .await?;
    spawn(platform.clone(), key, record);
    Ok(())
}

/// Forgets a timer (it may still fire if it is due right now; timer events must be idempotent).
pub(crate) async fn cancel(platform: &Platform, tenant: &str, id: &str) -> Result<()> {
    platform.state().delete(&key(tenant, id)).await
}

/// Restarts waiting for every stored timer of `tenant` (on agent start).
/// Restores the pending timers of `tenant` (default: the default tenant), logging the outcome.
pub(crate) async fn restore(platform: &Platform, tenant: Option<&str>) {
    let tenant = tenant.unwrap_or(soorma_common::DEFAULT_TENANT);
    match recover(platform, tenant).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(tenant, timers = n, "pending timers restored"),
        Err(e) => tracing::warn!(tenant, error = %e, "could not restore pending timers"),
    }
}

async fn recover(platform: &Platform, tenant: &str) -> Result<usize> {
    let ids = platform.state().keys(TIMERS_BUCKET, tenant).await?;
    let mut started = 0;
    for id in ids {
        let key = key(tenant, &id);
        match state::load::<TimerRecord>(&**platform.state(), "timer", &key).await {
            Ok(Some(stored)) => {
                spawn(platform.clone(), key, stored.value);
                started += 1;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, timer = %id, "skipping an unreadable timer"),
        }
    }
    Ok(started)
}

fn spawn(platform: Platform, key: StateKey, record: TimerRecord) {
    tokio::spawn(async move {
        let wait = record.due_at_ms.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        // Cancelled meanwhile (answered): nothing to do.
        match platform.state().get(&key).await {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => tracing::warn!(error = %e, "cannot check a timer; firing it"),
        }
        let id = record.envelope.id.clone();
        match platform.bus().publish(record.envelope).await {
            Ok(()) => {
                if let Err(e) = platform.state().delete(&key).await {
                    tracing::debug!(error = %e, timer = %id, "could not delete a fired timer");
                }
            }
            // Kept in the store: the next start of an agent fires it.
            Err(e) => tracing::warn!(error = %e, timer = %id, "could not fire a timer"),
        }
    });
}
