//! Catch-up after a reconnect: a core subscription misses what is published while its
//! connection is down (its server died; the client is reconnecting to another). When the
//! connection comes back, each live core subscription replays from the topic streams the
//! messages on its subjects published since shortly before the disconnect, with a short-lived
//! ephemeral consumer (as many replicas as the stream, in memory, deleted when done), then goes on with live messages.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

use crate::util::new_id;

/// How far before the disconnect a replay starts: the time the client took to notice it (a
/// closed socket is noticed at once) and clock skew between the client and the servers.
const MARGIN: Duration = Duration::from_secs(5);
/// How long after the reconnect a replay keeps reading once caught up: a message published
/// before the cluster has learnt of the renewed subscriptions is stored, not delivered live.
const SETTLE: Duration = Duration::from_secs(2);
/// The most messages one replay yields (the rest is logged and skipped).
pub(super) const MAX_REPLAYED: usize = 10_000;
/// Replays running at once per connection (each subscription of a connection has its own).
pub(super) const CONCURRENT_REPLAYS: usize = 8;
/// How long one replay may take in all, a stream without a leader during a failover included.
const REPLAY_LIMIT: Duration = Duration::from_secs(60);
/// How long one request to the JetStream API of a replay may take (a request lost in a
/// failover is repeated).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a replay that is not caught up waits for its next message before giving up.
const IDLE: Duration = Duration::from_secs(5);
/// When the server deletes a replay consumer nobody reads (its process died mid-replay).
const INACTIVE: Duration = Duration::from_secs(10);
/// Replayed messages buffered for their subscription.
const BUFFER: usize = 64;
/// Message ids an observer remembers to skip a replayed copy of what it saw live.
const REMEMBERED: usize = 4096;

/// The state of the connection, as its events report it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Link {
    /// Since when the connection is down, while it is.
    down_since: Option<SystemTime>,
    /// Reconnects so far.
    reconnects: u64,
    /// When the connection that the last reconnect restored was lost.
    last_outage: Option<SystemTime>,
}

/// Records a connection event in `link` (the connection's event callback).
pub(super) fn on_event(link: &watch::Sender<Link>, event: &async_nats::Event) {
    match event {
        async_nats::Event::Disconnected => {
            tracing::warn!("NATS connection lost; reconnecting");
            link.send_if_modified(|l| {
                let first = l.down_since.is_none();
                if first {
                    l.down_since = Some(SystemTime::now());
                }
                first
            });
        }
        async_nats::Event::Connected => {
            link.send_if_modified(|l| match l.down_since.take() {
                Some(since) => {
                    tracing::info!(
                        down_for = ?since.elapsed().unwrap_or_default(),
                        "NATS connection restored; subscriptions replay what they missed"
                    );
                    l.reconnects += 1;
                    l.last_outage = Some(since);
                    true
                }
                None => false,
            });
        }
        _ => {}
    }
}

/// What a core subscription replays from: each stream with the subscription's filters on it.
#[derive(Debug, Clone)]
pub(super) struct Source {
    pub stream: String,
    pub filters: Vec<String>,
}

/// The catch-up side of one core subscription: watches the connection and, after each
/// reconnect, replays what its subjects got meanwhile.
pub(super) struct CatchUp {
    js: jetstream::Context,
    sources: Arc<[Source]>,
    link: Option<watch::Receiver<Link>>,
    reconnects: u64,
    created: SystemTime,
    limiter: Arc<Semaphore>,
    replay: Option<Replay>,
    /// For observers: what was delivered, to skip replayed copies (`None` for clients, which
    /// take duplicates).
    seen: Option<Seen>,
}

/// A replay under way: its messages, and where its window starts.
struct Replay {
    messages: mpsc::Receiver<async_nats::Message>,
    since: SystemTime,
}

impl CatchUp {
    pub(super) fn new(
        js: jetstream::Context,
        sources: Vec<Source>,
        mut link: watch::Receiver<Link>,
        limiter: Arc<Semaphore>,
        dedup: bool,
    ) -> Self {
        let reconnects = link.borrow_and_update().reconnects;
        Self {
            js,
            sources: sources.into(),
            link: Some(link),
            reconnects,
            created: SystemTime::now(),
            limiter,
            replay: None,
            seen: dedup.then(Seen::default),
        }
    }

    /// The next replayed message; pending while there is none. Cancel-safe.
    pub(super) async fn next(&mut self) -> async_nats::Message {
        loop {
            tokio::select! {
                m = next_replayed(&mut self.replay) => match m {
                    Some(m) => return m,
                    None => self.replay = None,
                },
                changed = link_changed(&mut self.link) => {
                    if changed {
                        self.restart();
                    } else {
                        // The connection is gone for good: no more reconnects.
                        self.link = None;
                    }
                }
            }
        }
    }

    /// Whether `tenant`'s message with `id` is to be delivered: always for clients; for
    /// observers, a replayed message is skipped when it was delivered already, and a live one
    /// when it was replayed already (a copy the server published twice is still delivered
    /// twice). Another tenant's message with the same id is another message.
    pub(super) fn deliver(&mut self, tenant: &str, id: &str, replayed: bool) -> bool {
        self.seen
            .as_mut()
            .is_none_or(|seen| seen.first_sight(tenant, id, replayed))
    }

    /// Starts a replay after a reconnect (superseding one under way, from the earlier start).
    fn restart(&mut self) {
        let Some(link) = self.link.as_mut().map(|l| *l.borrow_and_update()) else {
            return;
        };
        if link.reconnects == self.reconnects {
            return;
        }
        self.reconnects = link.reconnects;
        let Some(lost) = link.last_outage else {
            return;
        };
        let since = lost
            .max(self.created)
            .checked_sub(MARGIN)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let since = self.replay.as_ref().map_or(since, |r| r.since.min(since));
        let (tx, rx) = mpsc::channel(BUFFER);
        // Dropping the previous receiver ends its replay (which deletes its consumer).
        self.replay = Some(Replay {
            messages: rx,
            since,
        });
        tokio::spawn(replay(
            self.js.clone(),
            self.sources.clone(),
            since,
            self.limiter.clone(),
            tx,
        ));
    }
}

async fn next_replayed(replay: &mut Option<Replay>) -> Option<async_nats::Message> {
    match replay {
        Some(r) => r.messages.recv().await,
        None => std::future::pending().await,
    }
}

/// Whether the link changed (`false`: its sender is gone); pending without a link.
async fn link_changed(link: &mut Option<watch::Receiver<Link>>) -> bool {
    match link {
        Some(l) => l.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Replays every source from `since` into `tx`, one at a time, until each is caught up (and
/// [`SETTLE`] has passed), at most [`MAX_REPLAYED`] messages in all, within [`REPLAY_LIMIT`];
/// stops early when `tx`'s subscription is dropped or superseded.
async fn replay(
    js: jetstream::Context,
    sources: Arc<[Source]>,
    since: SystemTime,
    limiter: Arc<Semaphore>,
    tx: mpsc::Sender<async_nats::Message>,
) {
    let reconnected = Instant::now();
    let mut js = js;
    js.set_timeout(REQUEST_TIMEOUT);
    let permit = tokio::select! {
        p = limiter.acquire_owned() => p,
        () = tx.closed() => return,
    };
    let Ok(_permit) = permit else {
        return;
    };
    let window = Window {
        since,
        settled: reconnected + SETTLE,
        // Its time runs from when it may start, not from before it waited for a slot (which
        // could leave it none).
        deadline: Instant::now() + REPLAY_LIMIT,
    };
    let mut budget = MAX_REPLAYED;
    for source in sources.iter() {
        if tx.is_closed() || budget == 0 {
            break;
        }
        if Instant::now() >= window.deadline {
            tracing::warn!(stream = %source.stream, filters = ?source.filters, "a catch-up replay ran out of time before this source; messages of the outage on it may be missed");
            continue;
        }
        match replay_source(&js, source, &window, &tx, &mut budget).await {
            Ok(n) if n > 0 => {
                tracing::debug!(stream = %source.stream, filters = ?source.filters, replayed = n, "caught up after a reconnect");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(stream = %source.stream, filters = ?source.filters, error = %e, "cannot replay what was published while reconnecting; messages of that time may be missed");
            }
        }
    }
    if budget == 0 {
        tracing::warn!(
            cap = MAX_REPLAYED,
            "a catch-up replay reached its cap; later messages of the outage are not replayed"
        );
    }
}

/// The bounds of one replay.
struct Window {
    since: SystemTime,
    /// Before this, a caught-up replay goes on reading.
    settled: Instant,
    deadline: Instant,
}

/// Replays one stream; returns how many messages it yielded.
async fn replay_source(
    js: &jetstream::Context,
    source: &Source,
    window: &Window,
    tx: &mpsc::Sender<async_nats::Message>,
    budget: &mut usize,
) -> std::result::Result<usize, String> {
    let start = unix_nanos(window.since);
    let start_time = async_nats::datetime::from_nanos(start).map_err(|e| e.to_string())?;
    let mut filters = source.filters.clone();
    let (filter_subject, filter_subjects) = if filters.len() == 1 {
        (filters.pop().unwrap_or_default(), Vec::new())
    } else {
        (String::new(), filters)
    };
    let config = consumer::pull::Config {
        description: Some("soorma catch-up after a reconnect".into()),
        deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time },
        ack_policy: consumer::AckPolicy::None,
        filter_subject,
        filter_subjects,
        inactive_threshold: INACTIVE,
        // As many replicas as the stream: an R1 consumer may be placed on the server just
        // lost, and its creation is then never answered.
        num_replicas: 0,
        memory_storage: true,
        ..Default::default()
    };
    // Each attempt creates a consumer of a new name (a creation stuck on a server being lost
    // is not waited for again); every name tried is deleted at the end, so the server's
    // consumer count stays as it was (one whose deletion fails goes when inactive).
    let mut tried = Vec::new();
    let outcome =
        match create_consumer(js, &source.stream, config, window.deadline, tx, &mut tried).await {
            Ok(Some(consumer)) => read(consumer, window, tx, budget).await,
            // No stream, or nobody to replay to (a creation tried before may have been made
            // all the same: its name is deleted below).
            Ok(None) => Ok(0),
            Err(e) => Err(e),
        };
    for name in tried {
        if let Err(e) = js.delete_consumer_from_stream(&name, &source.stream).await {
            tracing::debug!(consumer = %name, error = %e, "cannot delete a catch-up consumer; the server drops it when inactive");
        }
    }
    outcome
}

/// Creates the replay consumer, repeating while the stream has no leader (right after a
/// server was lost) with a new name each time (recorded in `tried`); `None` when the stream
/// does not exist (nothing was ever published) or the replay's subscriber is gone (`tx`
/// closed: superseded or dropped).
async fn create_consumer(
    js: &jetstream::Context,
    stream: &str,
    mut config: consumer::pull::Config,
    deadline: Instant,
    tx: &mpsc::Sender<async_nats::Message>,
    tried: &mut Vec<String>,
) -> std::result::Result<Option<consumer::PullConsumer>, String> {
    let mut delay = Duration::from_millis(100);
    loop {
        if tx.is_closed() {
            return Ok(None);
        }
        let name = format!("soorma_catchup_{}", new_id());
        config.name = Some(name.clone());
        tried.push(name);
        match js.create_consumer_on_stream(config.clone(), stream).await {
            Ok(c) => return Ok(Some(c)),
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) if Instant::now() + delay < deadline => {
                tracing::debug!(%stream, error = %e, "cannot create a catch-up consumer yet; repeating");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn not_found(e: &jetstream::stream::ConsumerError) -> bool {
    matches!(
        e.kind(),
        jetstream::stream::ConsumerErrorKind::JetStream(js)
            if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// Reads the replay consumer into `tx` (see [`replay`]).
async fn read(
    consumer: consumer::PullConsumer,
    window: &Window,
    tx: &mpsc::Sender<async_nats::Message>,
    budget: &mut usize,
) -> std::result::Result<usize, String> {
    let mut caught_up = consumer.cached_info().num_pending == 0;
    let since =
        async_nats::datetime::from_nanos(unix_nanos(window.since)).map_err(|e| e.to_string())?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(256)
        .messages()
        .await
        .map_err(|e| e.to_string())?;
    let mut yielded = 0;
    loop {
        let now = Instant::now();
        if now >= window.deadline {
            return Err(format!(
                "not caught up within {REPLAY_LIMIT:?} ({yielded} messages replayed)"
            ));
        }
        let wait = if caught_up {
            if now >= window.settled {
                return Ok(yielded);
            }
            window.settled - now
        } else {
            IDLE.min(window.deadline - now)
        };
        let next = tokio::select! {
            () = tx.closed() => return Ok(yielded),
            next = tokio::time::timeout(wait, messages.next()) => next,
        };
        let message = match next {
            Err(_) if caught_up => return Ok(yielded),
            Err(_) => return Err(format!("no message for {IDLE:?} before catching up")),
            Ok(None) => return Ok(yielded),
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(Some(Ok(m))) => m,
        };
        let Ok(info) = message.info() else {
            continue;
        };
        caught_up = info.pending == 0;
        if info.published < since {
            continue;
        }
        if *budget == 0 {
            return Ok(yielded);
        }
        *budget -= 1;
        // A subscriber that stops reading does not hold the replay's slot past its deadline.
        match tokio::time::timeout_at(window.deadline, tx.send(message.split().0)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Ok(yielded),
            Err(_) => {
                return Err(format!(
                    "the subscriber did not take the replay before its deadline ({REPLAY_LIMIT:?} from its start)"
                ));
            }
        }
        yielded += 1;
    }
}

fn unix_nanos(t: SystemTime) -> i128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// The ids of the last [`REMEMBERED`] messages an observer delivered (hashed), and whether
/// each came from a replay.
#[derive(Default)]
struct Seen {
    hasher: RandomState,
    replayed: HashMap<u64, bool>,
    order: VecDeque<u64>,
}

impl Seen {
    fn first_sight(&mut self, tenant: &str, id: &str, replayed: bool) -> bool {
        let key = self.hasher.hash_one((tenant, id));
        match self.replayed.get(&key) {
            // Seen before: a replayed copy is skipped, and so is a live copy of a replayed one.
            Some(&was_replayed) if replayed || was_replayed => return false,
            // A live message the server delivered twice stays twice.
            Some(_) => return true,
            None => {}
        }
        if self.order.len() == REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.replayed.remove(&old);
        }
        self.order.push_back(key);
        self.replayed.insert(key, replayed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observers_skip_replayed_copies_and_keep_live_duplicates() {
        let mut seen = Seen::default();
        assert!(seen.first_sight("acme", "a", false));
        assert!(
            seen.first_sight("globex", "a", true),
            "another tenant's event with the same id is another event"
        );
        assert!(
            !seen.first_sight("acme", "a", true),
            "a replayed copy of a live one"
        );
        assert!(
            seen.first_sight("acme", "a", false),
            "the server's own duplicate"
        );
        assert!(seen.first_sight("acme", "b", true));
        assert!(
            !seen.first_sight("acme", "b", false),
            "a live copy of a replayed one"
        );
        assert!(!seen.first_sight("acme", "b", true));
        // Bounded: the oldest ids are forgotten first.
        for i in 0..REMEMBERED {
            assert!(seen.first_sight("acme", &i.to_string(), true));
        }
        assert_eq!(seen.order.len(), REMEMBERED);
        assert_eq!(seen.replayed.len(), REMEMBERED);
        assert!(seen.first_sight("acme", "b", true), "forgotten");
    }

    #[test]
    fn a_reconnect_is_counted_once_with_the_time_the_connection_was_lost() {
        let (tx, mut rx) = watch::channel(Link::default());
        on_event(&tx, &async_nats::Event::Connected);
        assert!(
            !rx.has_changed().unwrap(),
            "the first connect is no reconnect"
        );
        let before = SystemTime::now();
        on_event(&tx, &async_nats::Event::Disconnected);
        on_event(&tx, &async_nats::Event::Disconnected);
        let down = rx.borrow_and_update().down_since.unwrap();
        assert!(down >= before);
        on_event(&tx, &async_nats::Event::Connected);
        let link = *rx.borrow_and_update();
        assert_eq!(link.reconnects, 1);
        assert_eq!(link.last_outage, Some(down));
        assert!(link.down_since.is_none());
        on_event(&tx, &async_nats::Event::Connected);
        assert!(!rx.has_changed().unwrap());
    }
}
