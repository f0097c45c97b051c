//! The messages a durable subscription is handling, and those it settled for good lately, so
//! that a stale copy of one is not handled again. A message is known by its stream sequence and
//! the time the stream stored it ([`MessageKey`]): a stream deleted and created again numbers
//! its messages from 1 again.
//!
//! A consumer fetches ahead: messages wait in the client's buffer until a handler is free, and
//! nothing keeps them alive there. One that waits past `ack_wait` is queued for redelivery by
//! the server, and stays queued even once its handling began here and sends progress
//! acknowledgements. The copy the server then sends (a delivery count above 1, the same stream
//! sequence) is recognised:
//! - a copy of a message being handled here is not handled again (the handling's settlement
//!   settles the message: the server takes it from any of its deliveries), and its delivery
//!   counts toward `max_deliver` when the handling ends (once the subscription has received the
//!   copy: one still in the client's buffer is not counted yet);
//! - a copy of a message acknowledged or terminated here is acknowledged again (so is one whose
//!   acknowledgement was lost in a failover);
//! - a message retried (negatively acknowledged) is handled again when redelivered.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use crate::util::RecentSet;

/// A stored message: its stream sequence and when the stream stored it.
pub(super) type MessageKey = (u64, async_nats::datetime::DateTime);

/// A message of a subscription: the subscription's [`Held`] and the message's key.
pub(super) type HeldMessage = (Arc<Held>, MessageKey);

/// How many messages settled for good are remembered.
const SETTLED_KEPT: usize = 4096;

/// What a redelivered copy of a message is to this subscription ([`Held::copy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redelivered {
    /// Not handled here now, nor settled for good lately: handle it.
    New,
    /// A copy of a message being handled here: not handled again.
    Handling,
    /// A copy of a message acknowledged or terminated here: acknowledge it again.
    Settled,
}

/// One subscription's messages being handled and lately settled.
#[derive(Debug)]
pub(super) struct Held<K = MessageKey> {
    seqs: Mutex<Seqs<K>>,
}

#[derive(Debug)]
struct Seqs<K> {
    handling: HashMap<K, Handling>,
    /// Settled for good, the last [`SETTLED_KEPT`].
    settled: RecentSet<K>,
}

/// A message being handled here.
#[derive(Debug)]
struct Handling {
    /// Its deliveries not settled yet (a batch's envelopes each count).
    deliveries: usize,
    /// The delivery count of the newest copy the server sent meanwhile.
    newest: Option<u64>,
}

impl<K: Copy + Eq + Hash> Default for Held<K> {
    fn default() -> Self {
        Self {
            seqs: Mutex::new(Seqs {
                handling: HashMap::new(),
                settled: RecentSet::new(SETTLED_KEPT),
            }),
        }
    }
}

impl<K: Copy + Eq + Hash> Held<K> {
    fn seqs(&self) -> std::sync::MutexGuard<'_, Seqs<K>> {
        // The data stays consistent whatever panicked while holding the lock.
        self.seqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What a redelivery (`delivered` > 1) of message `key` is; the delivery count of a copy
    /// of one being handled is recorded ([`delivered`](Self::delivered)).
    pub(super) fn copy(&self, key: K, delivered: u64) -> Redelivered {
        let mut seqs = self.seqs();
        if let Some(handling) = seqs.handling.get_mut(&key) {
            handling.newest = Some(handling.newest.map_or(delivered, |d| d.max(delivered)));
            Redelivered::Handling
        } else if seqs.settled.contains(&key) {
            Redelivered::Settled
        } else {
            Redelivered::New
        }
    }

    /// One more delivery of message `key` is handed out (see [`Holding`]).
    fn handling(&self, key: K) {
        self.seqs()
            .handling
            .entry(key)
            .or_insert(Handling {
                deliveries: 0,
                newest: None,
            })
            .deliveries += 1;
    }

    /// The delivery count of the newest copy of message `key` the server sent while it was
    /// being handled here, if any, as an attempt number.
    pub(super) fn delivered(&self, key: K) -> Option<u32> {
        let newest = self.seqs().handling.get(&key).and_then(|h| h.newest)?;
        Some(u32::try_from(newest).unwrap_or(u32::MAX))
    }

    /// One delivery of message `key` is done with (settled, or dropped unsettled).
    fn release(&self, key: K) {
        let mut seqs = self.seqs();
        if let Some(handling) = seqs.handling.get_mut(&key) {
            handling.deliveries = handling.deliveries.saturating_sub(1);
            if handling.deliveries == 0 {
                seqs.handling.remove(&key);
            }
        }
    }

    /// Message `key` was acknowledged or terminated: the server will not deliver it again
    /// unless that was lost.
    pub(super) fn settled(&self, key: K) {
        self.seqs().settled.insert(key);
    }
}

/// One delivery of a message handed out: the message counts as being handled from this
/// guard's creation until it is dropped (the delivery settled, or dropped unsettled).
#[derive(Debug)]
pub(super) struct Holding(HeldMessage);

impl Holding {
    pub(super) fn new(message: &HeldMessage) -> Self {
        message.0.handling(message.1);
        Self(message.clone())
    }

    /// The message this delivery holds.
    pub(super) fn message(&self) -> &HeldMessage {
        &self.0
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.0.release(self.0.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_handling_until_every_delivery_is_released() {
        let held = Held::<u64>::default();
        assert_eq!(held.copy(7, 2), Redelivered::New);
        held.handling(7);
        held.handling(7);
        assert_eq!(held.copy(7, 2), Redelivered::Handling);
        held.release(7);
        assert_eq!(held.copy(7, 3), Redelivered::Handling);
        held.release(7);
        assert_eq!(held.copy(7, 4), Redelivered::New, "retried: handled again");
        held.release(7);
        assert_eq!(held.copy(7, 5), Redelivered::New);
    }

    #[test]
    fn the_newest_copy_of_a_message_being_handled_is_counted() {
        let held = Held::<u64>::default();
        held.handling(3);
        assert_eq!(held.delivered(3), None);
        assert_eq!(held.copy(3, 3), Redelivered::Handling);
        assert_eq!(
            held.copy(3, 2),
            Redelivered::Handling,
            "an older copy, late"
        );
        assert_eq!(held.delivered(3), Some(3));
        held.release(3);
        assert_eq!(held.delivered(3), None);
    }

    #[test]
    fn settled_messages_are_remembered_up_to_a_bound() {
        let held = Held::<u64>::default();
        held.handling(1);
        held.settled(1);
        held.release(1);
        assert_eq!(held.copy(1, 2), Redelivered::Settled);
        held.settled(1);
        for key in 2..=SETTLED_KEPT as u64 {
            held.settled(key);
        }
        assert_eq!(held.copy(1, 2), Redelivered::Settled);
        held.settled(SETTLED_KEPT as u64 + 1);
        assert_eq!(held.copy(1, 2), Redelivered::New, "the oldest is forgotten");
        assert_eq!(held.copy(2, 2), Redelivered::Settled);
        assert_eq!(held.seqs().settled.len(), SETTLED_KEPT);
    }

    #[test]
    fn a_holding_counts_from_its_creation_until_dropped() {
        let at = async_nats::datetime::from_nanos(1_000).unwrap();
        let message: HeldMessage = (Arc::default(), (9, at));
        let first = Holding::new(&message);
        let second = Holding::new(&message);
        assert_eq!(message.0.copy(message.1, 2), Redelivered::Handling);
        drop(first);
        assert_eq!(message.0.copy(message.1, 3), Redelivered::Handling);
        drop(second);
        assert_eq!(message.0.copy(message.1, 4), Redelivered::New);
    }

    #[test]
    fn a_stream_created_again_numbers_new_messages() {
        let at = |nanos| async_nats::datetime::from_nanos(nanos).unwrap();
        let held = Held::<MessageKey>::default();
        held.settled((1, at(1_000)));
        assert_eq!(held.copy((1, at(1_000)), 2), Redelivered::Settled);
        assert_eq!(
            held.copy((1, at(2_000)), 2),
            Redelivered::New,
            "the same number, another message"
        );
    }
}
