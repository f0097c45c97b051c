//! The messages a durable subscription is handling, and those it settled for good lately, so
//! that a stale copy of one is not handled again. A message is known by its stream sequence and
//! the time the stream stored it ([`MessageKey`]): a stream deleted and created again numbers
//! its messages from 1 again.
//!
//! A consumer fetches ahead: messages wait in the client's buffer until a handler is free, and
//! nothing keeps them alive there. One that waits past `ack_wait` is queued for redelivery by
//! the server, and stays queued even once its handling began here and sends progress
//! acknowledgements. The copy the server then sends (a delivery count above 1, the same stream
//! sequence) is recognised: skipped while the first is handled (whose settlement settles the
//! message, acknowledgements go by stream sequence), acknowledged again when the message was
//! already acknowledged or terminated here (an acknowledgement lost in a failover comes back the
//! same way). A message retried (negatively acknowledged) is handled again when redelivered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;

/// A stored message: its stream sequence and when the stream stored it.
pub(super) type MessageKey = (u64, async_nats::datetime::DateTime);

/// How many stream sequences settled for good are remembered.
const SETTLED_KEPT: usize = 4096;

/// What a redelivered message is to this subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Not handled here now, nor settled for good lately: handle it.
    New,
    /// A copy of a message being handled here: skip it.
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
    /// A message → its deliveries not settled yet (a batch's envelopes each count).
    handling: HashMap<K, usize>,
    /// Settled for good, oldest first; `settled_set` holds the same messages.
    settled: VecDeque<K>,
    settled_set: HashSet<K>,
}

impl<K> Default for Held<K> {
    fn default() -> Self {
        Self {
            seqs: Mutex::new(Seqs {
                handling: HashMap::new(),
                settled: VecDeque::new(),
                settled_set: HashSet::new(),
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

    /// What the delivery of message `seq` is (only a redelivery can be a copy).
    pub(super) fn seen(&self, seq: K) -> Seen {
        let seqs = self.seqs();
        if seqs.handling.contains_key(&seq) {
            Seen::Handling
        } else if seqs.settled_set.contains(&seq) {
            Seen::Settled
        } else {
            Seen::New
        }
    }

    /// Message `seq` is handed out as `deliveries` deliveries.
    pub(super) fn handling(&self, seq: K, deliveries: usize) {
        *self.seqs().handling.entry(seq).or_default() += deliveries;
    }

    /// One delivery of message `seq` is done with (settled, or dropped unsettled).
    pub(super) fn release(&self, seq: K) {
        let mut seqs = self.seqs();
        if let Some(left) = seqs.handling.get_mut(&seq) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                seqs.handling.remove(&seq);
            }
        }
    }

    /// Message `seq` was acknowledged or terminated: the server will not deliver it again
    /// unless that was lost.
    pub(super) fn settled(&self, seq: K) {
        let mut seqs = self.seqs();
        if !seqs.settled_set.insert(seq) {
            return;
        }
        seqs.settled.push_back(seq);
        if seqs.settled.len() > SETTLED_KEPT
            && let Some(oldest) = seqs.settled.pop_front()
        {
            seqs.settled_set.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_handling_until_every_delivery_is_released() {
        let held = Held::<u64>::default();
        assert_eq!(held.seen(7), Seen::New);
        held.handling(7, 2);
        assert_eq!(held.seen(7), Seen::Handling);
        held.release(7);
        assert_eq!(held.seen(7), Seen::Handling);
        held.release(7);
        assert_eq!(held.seen(7), Seen::New, "retried: handled again");
        held.release(7);
        assert_eq!(held.seen(7), Seen::New);
    }

    #[test]
    fn settled_messages_are_remembered_up_to_a_bound() {
        let held = Held::<u64>::default();
        held.handling(1, 1);
        held.settled(1);
        held.release(1);
        assert_eq!(held.seen(1), Seen::Settled);
        held.settled(1);
        for seq in 2..=SETTLED_KEPT as u64 {
            held.settled(seq);
        }
        assert_eq!(held.seen(1), Seen::Settled);
        held.settled(SETTLED_KEPT as u64 + 1);
        assert_eq!(held.seen(1), Seen::New, "the oldest is forgotten");
        assert_eq!(held.seen(2), Seen::Settled);
        let seqs = held.seqs();
        assert_eq!(
            (seqs.settled.len(), seqs.settled_set.len()),
            (SETTLED_KEPT, SETTLED_KEPT)
        );
    }

    #[test]
    fn a_stream_created_again_numbers_new_messages() {
        let at = |nanos| async_nats::datetime::from_nanos(nanos).unwrap();
        let held = Held::<MessageKey>::default();
        held.settled((1, at(1_000)));
        assert_eq!(held.seen((1, at(1_000))), Seen::Settled);
        assert_eq!(
            held.seen((1, at(2_000))),
            Seen::New,
            "the same number, another message"
        );
    }
}
