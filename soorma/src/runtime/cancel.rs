//! Cancellation: the requests this instance is handling (by tenant and request id), and the
//! listener that drops their handlers when a
//! [`CANCEL_REQUESTED`](soorma_common::events::CANCEL_REQUESTED) event arrives.
//!
//! Every instance of an agent has an ephemeral subscription of its own to cancel requests (a
//! broadcast: each instance sees each one), because any instance may be running the request.
//! A cancel request acts only on the work of its own tenant (the event's tenant; on NATS the
//! subject's, which the publisher cannot forge): another tenant's cancel of the same id
//! changes nothing. The handler sees cancellation as its future being dropped (as in tokio
//! and axum), then the delivery is acknowledged without a reply. A cancel request that comes
//! before its request is remembered (the last [`REMEMBERED`] per instance), so the request is
//! dropped on arrival instead of run. When that memory is full, the oldest cancel of the tenant
//! remembering the most is forgotten first, so that one tenant's flood of cancels does not push
//! out another's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use soorma_common::EventEnvelope;
use tokio::sync::{oneshot, watch};

use super::dispatch::next_until_stopped;
use super::extract::{AgentRuntime, HandlerInput};
use super::handler::CancelHook;
use crate::spi::bus::{Settlement, Subscription};

/// The longest request id a cancel request may name (longer ones are ignored).
pub(crate) const MAX_REQUEST_ID_BYTES: usize = 256;

/// How many cancel requests an instance remembers for requests it has not seen yet.
pub(crate) const REMEMBERED: usize = 4096;

/// A tenant and a request id.
type Key = (String, String);

/// The deliveries in flight on one agent instance, by tenant and request (event) id. Holds one
/// entry per delivery being handled, so it is bounded by the agent's concurrency, plus at most
/// [`REMEMBERED`] canceled ids.
#[derive(Default)]
pub(crate) struct InFlight {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    running: HashMap<Key, Vec<(u64, oneshot::Sender<()>)>>,
    next: u64,
    canceled: Canceled,
}

/// The remembered cancels: at most [`REMEMBERED`], each tenant's in the order they came.
#[derive(Default)]
struct Canceled {
    /// Per tenant: (arrival number, request id), oldest first.
    by_tenant: HashMap<String, VecDeque<(u64, String)>>,
    set: HashSet<Key>,
    arrivals: u64,
}

impl Canceled {
    fn contains(&self, key: &Key) -> bool {
        self.set.contains(key)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.set.len()
    }

    /// Remembers `key`; past [`REMEMBERED`], forgets the oldest cancel of the tenant
    /// remembering the most (of those remembering as many, the one whose oldest came first).
    fn insert(&mut self, key: Key) {
        if !self.set.insert(key.clone()) {
            return;
        }
        let (tenant, id) = key;
        self.arrivals += 1;
        self.by_tenant
            .entry(tenant)
            .or_default()
            .push_back((self.arrivals, id));
        if self.set.len() <= REMEMBERED {
            return;
        }
        let heaviest = crate::util::heaviest(self.by_tenant.iter().filter_map(|(tenant, ids)| {
            ids.front().map(|(oldest, _)| (tenant, ids.len(), *oldest))
        }));
        let Some(tenant) = heaviest.cloned() else {
            return;
        };
        if let Some(ids) = self.by_tenant.get_mut(&tenant)
            && let Some((_, id)) = ids.pop_front()
        {
            if ids.is_empty() {
                self.by_tenant.remove(&tenant);
            }
            self.set.remove(&(tenant, id));
        }
    }
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the request `request_id` of `tenant` is being handled here, until the
    /// registration is dropped; its [`canceled`](Registration::canceled) resolves when the
    /// request is canceled (at once when it already was).
    pub(crate) fn register(self: &Arc<Self>, tenant: &str, request_id: &str) -> Registration {
        let key = (tenant.to_owned(), request_id.to_owned());
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        let slot = inner.next;
        inner.next = inner.next.wrapping_add(1);
        if inner.canceled.contains(&key) {
            let _ = tx.send(());
        } else {
            inner
                .running
                .entry(key.clone())
                .or_default()
                .push((slot, tx));
        }
        Registration {
            inflight: self.clone(),
            key,
            slot,
            rx,
        }
    }

    /// Cancels the request `request_id` of `tenant`: its handlers running here are dropped, and
    /// a delivery of it that comes later is dropped on arrival. Returns how many were running.
    pub(crate) fn cancel(&self, tenant: &str, request_id: &str) -> usize {
        let key = (tenant.to_owned(), request_id.to_owned());
        let mut inner = self.lock();
        let running = inner.running.remove(&key).unwrap_or_default();
        inner.canceled.insert(key);
        drop(inner);
        let n = running.len();
        for (_, tx) in running {
            let _ = tx.send(());
        }
        n
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.running.len(), inner.canceled.len())
    }
}

/// One delivery being handled (see [`InFlight::register`]).
pub(crate) struct Registration {
    inflight: Arc<InFlight>,
    key: Key,
    slot: u64,
    rx: oneshot::Receiver<()>,
}

impl Registration {
    /// Resolves when the request is canceled; never otherwise.
    pub(crate) async fn canceled(&mut self) {
        if (&mut self.rx).await.is_err() {
            // The sender is only dropped after sending; stay pending if that ever changes.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Closed first: dropping the sender below must not wake the task dropping this (a
        // spurious wake-up per handled event, which makes the scheduler wake another thread).
        self.rx.close();
        let mut inner = self.inflight.lock();
        if let Some(slots) = inner.running.get_mut(&self.key) {
            slots.retain(|(slot, _)| *slot != self.slot);
            if slots.is_empty() {
                inner.running.remove(&self.key);
            }
        }
    }
}

/// The request id a cancel request names: its correlation id, else `data.request_id`; `None`
/// when missing, empty or longer than [`MAX_REQUEST_ID_BYTES`].
pub(crate) fn request_id(env: &EventEnvelope) -> Option<&str> {
    env.correlation_id
        .as_deref()
        .or_else(|| env.data.get("request_id").and_then(|v| v.as_str()))
        .filter(|id| !id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES)
}

/// Takes cancel requests from `sub` until stopped: drops the named request's handlers running
/// on this instance, then runs the layers' cancel hooks (a worker marks the task canceled).
pub(crate) async fn cancel_loop(
    mut sub: Box<dyn Subscription>,
    inflight: Arc<InFlight>,
    runtime: Arc<AgentRuntime>,
    hooks: Vec<CancelHook>,
    mut stop: watch::Receiver<bool>,
) {
    while let Some(delivery) = next_until_stopped(&mut sub, &mut stop).await {
        let envelope = delivery.envelope.clone();
        if let Err(e) = delivery.settle(Settlement::Ack).await {
            tracing::debug!(error = %e, "could not acknowledge a cancel request");
        }
        let Some(id) = request_id(&envelope) else {
            tracing::debug!(event_id = %envelope.id, "a cancel request without a usable request id, ignored");
            continue;
        };
        let tenant = envelope.tenant();
        let dropped = inflight.cancel(tenant, id);
        tracing::info!(agent = %runtime.name, request_id = %id, tenant = %tenant, dropped, "request canceled");
        let input = HandlerInput {
            envelope: envelope.clone(),
            runtime: runtime.clone(),
            attempt: 1,
        };
        for hook in &hooks {
            hook(&input).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancels_only_the_tenants_request_and_forgets_finished_ones() {
        let inflight = Arc::new(InFlight::default());
        let mut acme = inflight.register("acme", "r1");
        let mut other = inflight.register("acme", "r2");
        assert_eq!(inflight.cancel("globex", "r1"), 0);
        assert_eq!(inflight.cancel("acme", "r1"), 1);
        tokio::time::timeout(std::time::Duration::from_secs(1), acme.canceled())
            .await
            .expect("canceled");
        let pending =
            tokio::time::timeout(std::time::Duration::from_millis(20), other.canceled()).await;
        assert!(pending.is_err(), "another request is not canceled");
        drop((acme, other));
        assert_eq!(inflight.len().0, 0, "finished deliveries leave no entry");
        // A delivery arriving after its cancel is canceled at once.
        let mut late = inflight.register("acme", "r1");
        tokio::time::timeout(std::time::Duration::from_millis(100), late.canceled())
            .await
            .expect("canceled on arrival");
    }

    #[test]
    fn remembers_a_bounded_number_of_cancels() {
        let inflight = Arc::new(InFlight::default());
        for i in 0..REMEMBERED + 10 {
            inflight.cancel("acme", &i.to_string());
        }
        assert_eq!(inflight.len(), (0, REMEMBERED));
        let mut oldest = inflight.register("acme", "0");
        assert!(
            oldest.rx.try_recv().is_err(),
            "the oldest cancels are forgotten first"
        );
        let mut newest = inflight.register("acme", &(REMEMBERED + 9).to_string());
        assert!(newest.rx.try_recv().is_ok());
    }

    #[test]
    fn one_tenants_flood_of_cancels_does_not_push_out_anothers() {
        let inflight = Arc::new(InFlight::default());
        inflight.cancel("globex", "early");
        for i in 0..3 * REMEMBERED {
            inflight.cancel("acme", &i.to_string());
        }
        inflight.cancel("globex", "late");
        assert_eq!(inflight.len().1, REMEMBERED);
        for id in ["early", "late"] {
            let mut request = inflight.register("globex", id);
            assert!(
                request.rx.try_recv().is_ok(),
                "globex's cancel of {id} is still remembered"
            );
        }
        // A tenant remembering as much as the rest is not spared: the oldest of the heaviest
        // goes, whichever tenant it is.
        let fair = Arc::new(InFlight::default());
        for i in 0..REMEMBERED {
            fair.cancel(if i % 2 == 0 { "acme" } else { "globex" }, &i.to_string());
        }
        fair.cancel("initech", "x");
        let mut first = fair.register("acme", "0");
        assert!(
            first.rx.try_recv().is_err(),
            "the oldest of the heaviest goes"
        );
        let mut second = fair.register("globex", "1");
        assert!(second.rx.try_recv().is_ok());
    }

    #[test]
    fn request_ids_are_bounded() {
        let mut env = EventEnvelope::new("e", "s", soorma_common::Topic::SystemEvents, "x");
        assert_eq!(request_id(&env), None);
        env.correlation_id = Some("r1".into());
        assert_eq!(request_id(&env), Some("r1"));
        env.correlation_id = Some("r".repeat(MAX_REQUEST_ID_BYTES + 1));
        assert_eq!(request_id(&env), None);
    }
}
