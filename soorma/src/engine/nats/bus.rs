use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures_util::{Stream, StreamExt};
use serde_json::json;
use soorma_common::events::DEAD_LETTERED;
use soorma_common::{DEFAULT_TENANT, EventEnvelope, Topic};
use tokio::sync::{Mutex, Semaphore, watch};

use super::batch;
use super::catchup::{self, CatchUp, Link, Source};
use super::held::{Held, HeldMessage, Holding, MessageKey, Redelivered};
use super::{NatsConfig, assets, engine_error, names};
use super::{coalesce, failover};
use crate::error::{EngineErrorKind, Error, Result};
use crate::spi::bus::{
    Acker, Delivery, EventBus, EventFilter, Settlement, Subscription, SubscriptionSpec,
    still_failing,
};
use crate::spi::envelope::{MAX_ID_LEN, check_envelope};
use crate::spi::tenant::{MAX_TENANT_LEN, validate_tenant};
use crate::util::{BoxFuture, MAX_REASON_BYTES, bounded, new_id, now_rfc3339};

/// Header carrying the dead-letter reason on DLQ messages.
pub const DEAD_LETTER_REASON_HEADER: &str = "Soorma-Dead-Letter-Reason";
/// Header on a DLQ message whose original was too large to store with its headers: the
/// original's size in bytes (the stored payload is its beginning).
pub const DEAD_LETTER_TRUNCATED_HEADER: &str = "Soorma-Dead-Letter-Truncated";
/// Room kept for the headers of a dead letter within the server's `max_payload`.
const DEAD_LETTER_HEADROOM: usize = 8 * 1024;
/// The most messages one pull of a durable consumer asks for.
const MAX_BATCH: usize = 256;
/// How long a pull request of a durable consumer lasts. A pull lost in a failover (the
/// consumer's leader died holding it, or no server answered it while a new one was elected) is
/// sent again only when it would have expired (plus 5 s): the async-nats default of 30 s
/// stalled an agent for 35 s after losing the server leading its consumer.
const PULL_EXPIRES: Duration = Duration::from_secs(5);
/// How many batches of one [`EventBus::publish_batch`] are stored at once.
const BATCHES_IN_FLIGHT: usize = 16;
/// How long a dead letter that could not be stored waits before its original is redelivered.
const DEAD_LETTER_RETRY: Duration = Duration::from_secs(1);
/// How long a message of a subject an instance has no handler for waits before it is
/// delivered again (to any instance of the agent; see `DurableSubscription::hand_back_foreign`).
const FOREIGN_RETRY: Duration = Duration::from_secs(1);

struct Inner {
    client: async_nats::Client,
    js: jetstream::Context,
    config: Arc<NatsConfig>,
    /// Topics whose stream is known to exist (the fast path of every publish takes no lock
    /// that waits).
    streams: std::sync::RwLock<HashMap<Topic, Arc<stream::Stream>>>,
    creating: Mutex<()>,
    dlq: Mutex<bool>,
    /// The connection's state: core subscriptions catch up after a reconnect.
    link: watch::Receiver<Link>,
    /// Bounds the catch-up replays running at once.
    replays: Arc<Semaphore>,
    /// Requests waiting for the publish on their subject's way (see [`coalesce`]).
    lanes: coalesce::Lanes,
}

/// The event bus on NATS JetStream: one stream per topic, one durable pull consumer per
/// consumer group (agent name), `Nats-Msg-Id` = envelope id, `traceparent` in headers.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus")
            .field("url", &super::redacted_url(&self.inner.config.url))
            .finish_non_exhaustive()
    }
}

impl NatsBus {
    pub(crate) fn new(
        client: async_nats::Client,
        js: jetstream::Context,
        config: Arc<NatsConfig>,
        link: watch::Receiver<Link>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                js,
                config,
                streams: std::sync::RwLock::default(),
                creating: Mutex::new(()),
                dlq: Mutex::new(false),
                link,
                replays: Arc::new(Semaphore::new(catchup::CONCURRENT_REPLAYS)),
                lanes: coalesce::Lanes::default(),
            }),
        }
    }

    /// The stream keeping `topic`'s events, created on first use (failing as a `kind` error).
    async fn stream(&self, topic: Topic, kind: EngineErrorKind) -> Result<Arc<stream::Stream>> {
        if let Some(s) = self.inner.streams.read().expect("streams lock").get(&topic) {
            return Ok(s.clone());
        }
        let _creating = self.inner.creating.lock().await;
        if let Some(s) = self.inner.streams.read().expect("streams lock").get(&topic) {
            return Ok(s.clone());
        }
        let cfg = &self.inner.config;
        let subject = format!("{}.*.{topic}.>", cfg.subject_prefix);
        let wanted = stream::Config {
            name: names::stream_name(&cfg.stream_prefix, topic),
            subjects: vec![subject.clone()],
            max_age: cfg.event_max_age,
            storage: cfg.storage,
            num_replicas: cfg.replicas,
            duplicate_window: super::DUPLICATE_WINDOW,
            description: Some(format!("soorma `{topic}` events")),
            ..Default::default()
        };
        let batch_bytes = self.max_batch_bytes();
        let check = |c: &stream::Config| {
            assets::usable_event_stream(c, &subject, cfg.failover_retry, batch_bytes)
        };
        let s = Arc::new(assets::open_stream(&self.inner.js, wanted, &check, kind).await?);
        self.inner
            .streams
            .write()
            .expect("streams lock")
            .insert(topic, s.clone());
        Ok(s)
    }

    async fn ensure_dlq(&self) -> Result<()> {
        let mut ready = self.inner.dlq.lock().await;
        if *ready {
            return Ok(());
        }
        let cfg = &self.inner.config;
        let subject = format!("{}-dlq.>", cfg.subject_prefix);
        let wanted = stream::Config {
            name: format!("{}_DLQ", cfg.stream_prefix),
            subjects: vec![subject.clone()],
            // Bounded: dead letters of a flood of bad input age out, the oldest dropped first.
            max_age: cfg.dead_letter_max_age,
            max_bytes: cfg.dead_letter_max_bytes,
            discard: stream::DiscardPolicy::Old,
            storage: cfg.storage,
            num_replicas: cfg.replicas,
            description: Some("soorma dead letters".into()),
            ..Default::default()
        };
        let check = |c: &stream::Config| {
            assets::usable_stream(c, &subject)?;
            if let Some(why) = assets::unbounded_dead_letters(c) {
                tracing::warn!(stream = %c.name, "the adopted NATS dead-letter stream {why}");
            }
            Ok(())
        };
        assets::open_stream(&self.inner.js, wanted, &check, EngineErrorKind::Ack).await?;
        *ready = true;
        Ok(())
    }

    /// Stores a message that cannot be handled in the DLQ stream, with the reason (cut to
    /// [`MAX_REASON_BYTES`]). An original too large to store with the headers within the
    /// server's `max_payload` is stored truncated, marked with [`DEAD_LETTER_TRUNCATED_HEADER`].
    async fn dead_letter(&self, original: &Original, reason: &str) -> Result<()> {
        let Original {
            subject,
            payload,
            consumer,
            ..
        } = original;
        self.ensure_dlq().await?;
        let cfg = &self.inner.config;
        let mut headers = HeaderMap::new();
        // Sent again through a failover under one id: stored once however many attempts.
        let id = original.dedup_id.clone().unwrap_or_else(new_id);
        headers.insert("Nats-Msg-Id", id.as_str());
        headers.insert(
            DEAD_LETTER_REASON_HEADER,
            header_value(&bounded(reason, MAX_REASON_BYTES)).as_str(),
        );
        headers.insert("Soorma-Consumer", header_value(consumer).as_str());
        headers.insert(
            "Soorma-Original-Subject",
            header_value(&bounded(
                subject,
                cfg.subject_prefix.len() + 1 + MAX_SUBJECT_TAIL,
            ))
            .as_str(),
        );
        let room = self
            .inner
            .client
            .max_payload()
            .saturating_sub(DEAD_LETTER_HEADROOM + subject.len() + consumer.len());
        let payload = if payload.len() > room {
            tracing::warn!(%subject, size = payload.len(), kept = room, "dead letter too large to store whole; storing its beginning");
            headers.insert(
                DEAD_LETTER_TRUNCATED_HEADER,
                payload.len().to_string().as_str(),
            );
            payload.slice(..room)
        } else {
            payload.clone()
        };
        let dlq_subject = dead_letter_subject(&cfg.subject_prefix, subject);
        failover::retried(cfg.failover_retry, "dead-letter publish", || async {
            self.inner
                .js
                .publish_with_headers(dlq_subject.clone(), headers.clone(), payload.clone())
                .await?
                .await
        })
        .await
        .map_err(|e| {
            engine_error(
                EngineErrorKind::Ack,
                "dead-letter publish not acknowledged",
                e,
            )
        })?;
        Ok(())
    }

    /// Dead-letters `original` and says how to settle it: terminated once stored; when the
    /// store fails, redelivered (to try again) while deliveries remain, else terminated with
    /// an error logged, so that nothing is redelivered for ever.
    async fn store_or_retry(&self, original: &Original, reason: &str) -> AckKind {
        match self.dead_letter(original, reason).await {
            Ok(()) => AckKind::Term,
            Err(e) if e.is_retryable() && original.attempt < original.max_deliver => {
                tracing::warn!(consumer = %original.consumer, subject = %original.subject, error = %e, attempt = original.attempt, "could not store a dead letter; redelivering to try again");
                AckKind::Nak(Some(DEAD_LETTER_RETRY))
            }
            Err(e) => {
                tracing::error!(consumer = %original.consumer, subject = %original.subject, error = %e, %reason, "could not store a dead letter; the message is terminated and lost");
                AckKind::Term
            }
        }
    }

    async fn publish_envelope(&self, envelope: &EventEnvelope) -> Result<()> {
        let (subject, stream) = self.route(envelope).await?;
        let part = part_of(envelope)?;
        self.store(
            &stream,
            &subject,
            &part.id,
            part.traceparent.as_deref(),
            None,
            part.json,
        )
        .await
    }

    /// Publishes `envelopes`, those of one subject in batches (see [`batch`]), a few batches
    /// at a time.
    async fn publish_all(&self, envelopes: Vec<EventEnvelope>) -> Result<()> {
        // Subjects in the order they first appear; each subject's envelopes in order.
        let mut lanes: Vec<(String, Arc<stream::Stream>, Vec<batch::Part>)> = Vec::new();
        let mut lane_of: HashMap<String, usize> = HashMap::new();
        for envelope in &envelopes {
            let (subject, stream) = self.route(envelope).await?;
            let part = part_of(envelope)?;
            match lane_of.get(&subject) {
                Some(&i) => lanes[i].2.push(part),
                None => {
                    lane_of.insert(subject.clone(), lanes.len());
                    lanes.push((subject, stream, vec![part]));
                }
            }
        }
        let max_bytes = self.max_batch_bytes();
        let sends: Vec<_> = lanes
            .into_iter()
            .flat_map(|(subject, stream, parts)| {
                batch::cut(parts, max_bytes)
                    .into_iter()
                    .map(move |parts| (subject.clone(), stream.clone(), parts))
            })
            .collect();
        futures_util::stream::iter(sends)
            .map(|(subject, stream, parts)| async move {
                self.store_parts(&stream, &subject, parts, true).await
            })
            .buffer_unordered(BATCHES_IN_FLIGHT)
            .fold(Ok(()), |first, r| async move { first.and(r) })
            .await
    }

    /// Publishes a new request, stored with others of its subject published at the same
    /// moment (see [`coalesce`]).
    async fn publish_coalesced_envelope(&self, envelope: &EventEnvelope) -> Result<()> {
        let (subject, stream) = self.route(envelope).await?;
        let part = part_of(envelope)?;
        coalesce::publish(self, stream, subject, part).await
    }

    pub(super) fn lanes(&self) -> &coalesce::Lanes {
        &self.inner.lanes
    }

    /// The most bytes of envelopes in one batch: [`batch::MAX_BATCH_BYTES`], at most half the
    /// server's `max_payload`.
    pub(super) fn max_batch_bytes(&self) -> usize {
        batch::MAX_BATCH_BYTES.min(self.inner.client.max_payload() / 2)
    }

    /// Stores one envelope alone (with its `traceparent`).
    pub(super) async fn store_part(
        &self,
        stream: &stream::Stream,
        subject: &str,
        part: batch::Part,
    ) -> Result<()> {
        let tp = part.traceparent.as_deref();
        self.store(stream, subject, &part.id, tp, None, part.json)
            .await
    }

    /// Stores envelopes of one subject: alone when one, else as one batch (whose replies are
    /// stored together when `replies_together`).
    pub(super) async fn store_parts(
        &self,
        stream: &stream::Stream,
        subject: &str,
        mut parts: Vec<batch::Part>,
        replies_together: bool,
    ) -> Result<()> {
        if parts.len() == 1 {
            let part = parts.pop().expect("one part");
            return self.store_part(stream, subject, part).await;
        }
        let id = batch::batch_id(&parts);
        let payload = batch::payload(&parts);
        let batch = Some((parts.len(), replies_together));
        self.store(stream, subject, &id, None, batch, payload).await
    }

    /// The subject `envelope` goes to and the stream that keeps it.
    async fn route(&self, envelope: &EventEnvelope) -> Result<(String, Arc<stream::Stream>)> {
        check_envelope(envelope)?;
        let subject = names::subject(
            &self.inner.config.subject_prefix,
            envelope.tenant(),
            envelope.topic,
            &envelope.event_type,
        )?;
        let stream = self
            .stream(envelope.topic, EngineErrorKind::Publish)
            .await?;
        Ok((subject, stream))
    }

    /// Stores one message on `subject`: de-duplicated by `dedup_id`, marked as a batch of
    /// `batch.0` envelopes when it is one (whose replies go together when `batch.1`).
    async fn store(
        &self,
        stream: &stream::Stream,
        subject: &str,
        dedup_id: &str,
        traceparent: Option<&str>,
        batch: Option<(usize, bool)>,
        payload: bytes::Bytes,
    ) -> Result<()> {
        let headers = |id: &str| {
            let mut headers = HeaderMap::new();
            if let Some(tp) = traceparent {
                headers.insert("traceparent", tp);
            }
            headers.insert("Nats-Msg-Id", id);
            if let Some((n, replies_together)) = batch {
                headers.insert(batch::BATCH_HEADER, n.to_string().as_str());
                if replies_together {
                    headers.insert(batch::REPLIES_HEADER, batch::REPLIES_TOGETHER);
                }
            }
            headers
        };
        let ack = self
            .send(subject, || headers(dedup_id), payload.clone())
            .await?;
        if ack.duplicate && !self.same_subject(stream, ack.sequence, subject).await {
            // Anyone may set any `Nats-Msg-Id`: a message of another subject (another tenant)
            // that took this id first must not suppress this one. Publish it under an id of
            // its own, derived from the one taken, where it was taken and this message's
            // content (the same when this is published again, redelivered: stored once; not
            // to be foreseen by whoever took the id without knowing the content).
            tracing::warn!(%dedup_id, %subject, "a message of another subject holds this de-duplication id; publishing under one derived from it");
            let own = displaced_id(subject, dedup_id, ack.sequence, &payload);
            let again = self
                .send(subject, || headers(&own), payload.clone())
                .await?;
            if again.duplicate && !self.same_subject(stream, again.sequence, subject).await {
                // Taken too (by someone who knows this content): a random id.
                tracing::warn!(%dedup_id, %subject, "a message of another subject holds the derived de-duplication id too; publishing under a random one");
                let fresh = new_id();
                self.send(subject, || headers(&fresh), payload).await?;
            }
        }
        Ok(())
    }

    /// Publishes and waits for JetStream's acknowledgement, through a failover (see
    /// [`failover`]); each attempt's headers are `headers()`.
    async fn send(
        &self,
        subject: &str,
        headers: impl Fn() -> HeaderMap,
        payload: bytes::Bytes,
    ) -> Result<jetstream::publish::PublishAck> {
        // Sent again through a failover: the same headers carry the same de-duplication id.
        failover::retried(self.inner.config.failover_retry, "publish", || async {
            self.inner
                .js
                .publish_with_headers(subject.to_owned(), headers(), payload.clone())
                .await?
                .await
        })
        .await
        .map_err(|e| engine_error(EngineErrorKind::Publish, "publish not acknowledged", e))
    }

    /// Whether the stored message at `sequence` (the one a publish was taken as a duplicate
    /// of) was published on `subject`. The read is tried a few times (after a failover the
    /// duplicate is usually this publish's own earlier attempt, and the stream may just have a
    /// new leader); `false` when it cannot be read: publishing again risks a copy, trusting an
    /// unread id risks suppressing this message.
    async fn same_subject(&self, stream: &stream::Stream, sequence: u64, subject: &str) -> bool {
        const READS: u32 = 5;
        for read in 1..=READS {
            match stream.get_raw_message(sequence).await {
                Ok(stored) => return stored.subject.as_str() == subject,
                Err(e) if read == READS => {
                    tracing::warn!(error = %e, sequence, "cannot read the message a publish duplicates");
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200) * read).await,
            }
        }
        false
    }

    async fn subscribe_durable(&self, spec: SubscriptionSpec) -> Result<Box<dyn Subscription>> {
        let cfg = &self.inner.config;
        let stream = self.stream(spec.topic, EngineErrorKind::Subscribe).await?;
        let mut filter_subjects = filters(cfg, &spec)?;
        let takes = filter_subjects.clone();
        // A single filter goes in `filter_subject` (the server's simplest, fastest path).
        let filter_subject = if filter_subjects.len() == 1 {
            filter_subjects.pop().unwrap_or_default()
        } else {
            String::new()
        };
        let name = names::consumer_name(&spec.group, spec.topic, spec.tenant.as_deref());
        let legacy = names::legacy_consumer_name(&spec.group, spec.topic, spec.tenant.as_deref());
        let deliver_policy = match &legacy {
            Some(legacy) => {
                takeover_start(&stream, &name, legacy, &spec.group, cfg.failover_retry).await?
            }
            None => consumer::DeliverPolicy::New,
        };
        let mut config = consumer::pull::Config {
            durable_name: Some(name.clone()),
            description: Some(consumer_description(&spec.group)),
            filter_subject,
            filter_subjects,
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: cfg.ack_wait,
            deliver_policy,
            max_deliver: i64::from(spec.max_deliver.max(1)),
            max_ack_pending: cfg.max_ack_pending,
            // As many replicas as the stream (adopted streams keep theirs).
            num_replicas: 0,
            ..Default::default()
        };
        warn_if_narrowing(&stream, &name, &takes).await;
        // Creating a durable consumer with the same settings again is harmless: through a
        // failover (no answer in time, no meta leader) it is asked again.
        let stream_ref = &stream;
        let create = |config: consumer::pull::Config| {
            failover::retried(cfg.failover_retry, "create consumer", move || {
                stream_ref.create_consumer(config.clone())
            })
        };
        let created = match create(config.clone()).await {
            // Another instance took over from the legacy consumer first, from a later start
            // (a start cannot be changed): this one takes that start.
            Err(e) if legacy.is_some() => match stream.consumer_info(&name).await {
                Ok(info) if info.config.deliver_policy != config.deliver_policy => {
                    config.deliver_policy = info.config.deliver_policy;
                    create(config.clone()).await
                }
                _ => Err(e),
            },
            created => created,
        };
        let consumer: consumer::PullConsumer = created.map_err(|e| {
            engine_error(
                EngineErrorKind::Subscribe,
                format!("cannot create consumer `{name}`"),
                e,
            )
        })?;
        // No more fetched ahead than the subscriber can handle at once: a message waiting in
        // the client's buffer is not kept alive, and would be redelivered after `ack_wait`.
        let batch = spec.prefetch.map_or(MAX_BATCH, |p| p.clamp(1, MAX_BATCH));
        // Pulls are bounded by message count, not bytes: a pull smaller than a stored message
        // is refused by the server and async-nats pulls again, for ever.
        let messages = consumer
            .stream()
            .max_messages_per_batch(batch)
            .expires(PULL_EXPIRES)
            .messages()
            .await
            .map_err(|e| {
                engine_error(
                    EngineErrorKind::Subscribe,
                    format!("cannot consume from `{name}`"),
                    e,
                )
            })?;
        // The server announces a message it stops delivering: dead-letter it, not lose it.
        let advisory = format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{name}",
            names::stream_name(&cfg.stream_prefix, spec.topic)
        );
        let advisories = match self.inner.client.subscribe(advisory).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(consumer = %name, error = %e, "cannot subscribe to max-deliveries advisories; a message whose last delivery is never settled is not dead-lettered");
                None
            }
        };
        Ok(Box::new(DurableSubscription {
            bus: self.clone(),
            consumer: name,
            pending: VecDeque::new(),
            again: Arc::new(Again::new(again_capacity(cfg.max_ack_pending))),
            closed: false,
            max_deliver: spec.max_deliver.max(1),
            filters: takes,
            told_foreign: false,
            messages: Some(messages),
            advisories,
            stream,
            // Well inside `ack_wait`, so a slow handler's event is not redelivered meanwhile.
            keep_alive: cfg.ack_wait / 3,
            held: Arc::default(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                budget_of(cfg.max_in_flight_bytes) as usize,
            )),
            admitting: None,
        }))
    }

    /// A core subscription to `filters` that, after a reconnect, replays from `sources` what
    /// it missed (skipping copies of what it delivered when `dedup`; see [`catchup`]).
    async fn subscribe_core(
        &self,
        filters: Vec<String>,
        sources: Vec<Source>,
        dedup: bool,
    ) -> Result<Box<dyn Subscription>> {
        let mut subs = Vec::new();
        for f in filters {
            let sub = self.inner.client.subscribe(f.clone()).await.map_err(|e| {
                engine_error(
                    EngineErrorKind::Subscribe,
                    format!("cannot subscribe to `{f}`"),
                    e,
                )
            })?;
            subs.push(sub);
        }
        // Make sure the server has registered the interest before the caller publishes.
        self.inner
            .client
            .flush()
            .await
            .map_err(|e| engine_error(EngineErrorKind::Subscribe, "flush", e))?;
        let merged: Pin<Box<dyn Stream<Item = async_nats::Message> + Send>> =
            Box::pin(futures_util::stream::select_all(subs));
        Ok(Box::new(CoreSubscription {
            prefix: self.inner.config.subject_prefix.clone(),
            pending: VecDeque::new(),
            messages: merged,
            catch_up: CatchUp::new(
                self.inner.js.clone(),
                sources,
                self.inner.link.clone(),
                self.inner.replays.clone(),
                dedup,
            ),
        }))
    }
}

impl NatsBus {
    /// Where a core subscription to `filters` on `topic` replays from after a reconnect.
    fn source(&self, topic: Topic, filters: Vec<String>) -> Source {
        Source {
            stream: names::stream_name(&self.inner.config.stream_prefix, topic),
            filters,
        }
    }
}

/// Where the consumer `name` of `group`, which an older release named `legacy`, starts. An
/// existing one keeps its start (a deliver policy cannot be changed). A new one takes over from
/// the legacy consumer when that one was `group`'s (its description says so): it starts after
/// the messages that consumer had acknowledged, so nothing published while the agent was
/// upgraded is skipped (messages it had delivered but not acknowledged, or acknowledged out of
/// order, are delivered again). Else (no legacy consumer, or the one of an agent named like
/// it) it starts at new events.
async fn takeover_start(
    stream: &stream::Stream,
    name: &str,
    legacy: &str,
    group: &str,
    window: Duration,
) -> Result<consumer::DeliverPolicy> {
    let info = |consumer: &str| {
        let consumer = consumer.to_owned();
        failover::retried(window, "read consumer", move || {
            let consumer = consumer.clone();
            async move { stream.consumer_info(consumer).await }
        })
    };
    let absent = |e: &async_nats::jetstream::context::ConsumerInfoError| {
        matches!(
            e.kind(),
            async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound
        )
    };
    let unreadable = |consumer: &str, e| {
        engine_error(
            EngineErrorKind::Subscribe,
            format!("cannot read consumer `{consumer}`"),
            e,
        )
    };
    match info(name).await {
        Ok(existing) => return Ok(existing.config.deliver_policy),
        Err(e) if absent(&e) => {}
        Err(e) => return Err(unreadable(name, e)),
    }
    let old = match info(legacy).await {
        Ok(old) => old,
        Err(e) if absent(&e) => return Ok(consumer::DeliverPolicy::New),
        Err(e) => return Err(unreadable(legacy, e)),
    };
    if old.config.description.as_deref() != Some(consumer_description(group).as_str()) {
        // The consumer of an agent named `sanitized(group)`: its own, not this one's.
        return Ok(consumer::DeliverPolicy::New);
    }
    let start_sequence = old.ack_floor.stream_sequence + 1;
    let namesake = names::sanitized(group);
    tracing::warn!(
        consumer = %name,
        legacy = %legacy,
        start_sequence,
        "a new consumer takes over from the one an older soorma named `{legacy}`, after the messages it acknowledged; delete `{legacy}` once no instance of the older release runs, unless an agent named `{namesake}` runs"
    );
    Ok(consumer::DeliverPolicy::ByStartSequence { start_sequence })
}

/// Tells when this start narrows the filters of the consumer `name` while other instances
/// pull from it: they run another version of the agent, and until an instance of theirs starts
/// again the consumer skips the events only they have handlers for.
async fn warn_if_narrowing(stream: &stream::Stream, name: &str, own: &[String]) {
    // Only a warning: not waited for long (a cluster without a meta leader answers late).
    let info = tokio::time::timeout(Duration::from_secs(2), stream.consumer_info(name)).await;
    let Ok(Ok(info)) = info else {
        return;
    };
    let dropped = dropped_filters(&info.config, own);
    if !dropped.is_empty() && info.num_waiting > 0 {
        tracing::warn!(
            consumer = %name,
            dropped = ?dropped,
            pulling = info.num_waiting,
            "narrowing the filters of a consumer other instances pull from: while these filters stand, the events only those instances (another version of the agent) handle are skipped"
        );
    }
}

/// Whether a consumer filtered by `filters` (every subject of its stream when empty) takes
/// the messages of `subject` (a subject, or a filter: all the subjects it matches).
fn takes(filters: &[String], subject: &str) -> bool {
    filters.is_empty() || filters.iter().any(|f| assets::covers(f, subject))
}

/// The filters of `existing` that `own` (a new start's filters; every subject when empty)
/// does not cover.
fn dropped_filters(existing: &consumer::Config, own: &[String]) -> Vec<String> {
    let single = Some(&existing.filter_subject).filter(|f| !f.is_empty());
    let existing: Vec<&String> = if existing.filter_subjects.is_empty() {
        single.into_iter().collect()
    } else {
        existing.filter_subjects.iter().collect()
    };
    if existing.is_empty() && !own.is_empty() {
        // It took every subject of the stream.
        return vec![">".to_owned()];
    }
    existing
        .into_iter()
        .filter(|f| !takes(own, f))
        .cloned()
        .collect()
}

/// The description of `group`'s durable consumers.
fn consumer_description(group: &str) -> String {
    format!("soorma consumer group `{group}`")
}

fn filters(cfg: &NatsConfig, spec: &SubscriptionSpec) -> Result<Vec<String>> {
    let tenant = spec.tenant.as_deref();
    match &spec.events {
        EventFilter::All => Ok(vec![names::filter(
            &cfg.subject_prefix,
            tenant,
            spec.topic,
            None,
        )?]),
        EventFilter::Only(set) => {
            let mut v: Vec<String> = set
                .iter()
                .map(|e| names::filter(&cfg.subject_prefix, tenant, spec.topic, Some(e)))
                .collect::<Result<_>>()?;
            v.sort();
            Ok(v)
        }
    }
}

impl EventBus for NatsBus {
    fn publish(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.publish_envelope(&envelope).await })
    }

    fn publish_batch(&self, envelopes: Vec<EventEnvelope>) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.publish_all(envelopes))
    }

    fn publish_coalesced(&self, envelope: EventEnvelope) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.publish_coalesced_envelope(&envelope).await })
    }

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        Box::pin(async move {
            if spec.durable {
                self.subscribe_durable(spec).await
            } else {
                let f = filters(&self.inner.config, &spec)?;
                let source = self.source(spec.topic, f.clone());
                // Clients (the one user) take a reply twice: no de-duplication.
                self.subscribe_core(f, vec![source], false).await
            }
        })
    }

    fn observe(&self, topic: Option<Topic>) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        Box::pin(async move {
            let prefix = &self.inner.config.subject_prefix;
            let f = match topic {
                Some(t) => format!("{prefix}.*.{t}.>"),
                None => format!("{prefix}.>"),
            };
            let topics = topic.map_or(Topic::ALL.to_vec(), |t| vec![t]);
            let sources = topics
                .into_iter()
                .map(|t| self.source(t, vec![format!("{prefix}.*.{t}.>")]))
                .collect();
            self.subscribe_core(vec![f], sources, true).await
        })
    }

    fn redelivery_delay(&self) -> Option<Duration> {
        Some(self.inner.config.ack_wait)
    }
}

type MessageStream = consumer::pull::Stream;

/// The tenant token of `subject` (`<prefix>.<tenant>.<topic>.<event>`).
fn subject_tenant<'a>(prefix: &str, subject: &'a str) -> Option<&'a str> {
    subject
        .strip_prefix(prefix)?
        .strip_prefix('.')?
        .split('.')
        .next()
}

/// Past this many envelopes of one batch that cannot be handled, they are dead-lettered
/// together: one dead letter (the whole message) and one notice.
const MAX_REJECTED_ALONE: usize = 8;

/// The longest subject tail (after `<prefix>.`) an envelope is published on: a tenant, a topic
/// and an event type of [`MAX_ID_LEN`] bytes.
const MAX_SUBJECT_TAIL: usize = MAX_TENANT_LEN + 1 + 32 + 1 + MAX_ID_LEN;

/// The DLQ subject of a message on `subject`: `<prefix>-dlq.` and the subject after the
/// prefix; a subject longer than any an envelope is published on (anyone may publish one, up
/// to the server's control-line limit, which the DLQ publish would then exceed and lose the
/// connection) is stored as `<prefix>-dlq.<tenant>.subject-too-long`.
fn dead_letter_subject(prefix: &str, subject: &str) -> String {
    let tail = subject
        .strip_prefix(prefix)
        .and_then(|s| s.strip_prefix('.'))
        .unwrap_or(subject);
    if tail.len() <= MAX_SUBJECT_TAIL {
        format!("{prefix}-dlq.{tail}")
    } else {
        format!(
            "{prefix}-dlq.{}.subject-too-long",
            notice_tenant(prefix, subject)
        )
    }
}

/// The tenant a notice about a message on `subject` goes out under: the subject's tenant when
/// valid, else the default tenant.
fn notice_tenant<'a>(prefix: &str, subject: &'a str) -> &'a str {
    subject_tenant(prefix, subject)
        .filter(|t| validate_tenant(t).is_ok())
        .unwrap_or(DEFAULT_TENANT)
}

/// The envelope a message on `subject` carries, or why it cannot be handled (of bounded size).
/// The subject's tenant is authoritative: it must be a valid tenant id, and the envelope's
/// tenant must be the same.
fn decode(
    prefix: &str,
    subject: &str,
    payload: &[u8],
) -> std::result::Result<EventEnvelope, String> {
    // serde_json's recursion limit (128) holds: deep nesting is an error, not a stack overflow.
    let envelope: EventEnvelope = serde_json::from_slice(payload).map_err(|e| {
        bounded(
            &format!("undecodable event envelope: {e}"),
            MAX_REASON_BYTES,
        )
    })?;
    let tenant = subject_tenant(prefix, subject).unwrap_or_default();
    if let Err(e) = validate_tenant(tenant) {
        return Err(format!("invalid tenant in the subject: {e}"));
    }
    if envelope.tenant() != tenant {
        return Err(format!(
            "the envelope's tenant_id {:?} is not its subject's tenant `{tenant}` (the subject's tenant is authoritative)",
            bounded(envelope.tenant(), 2 * MAX_TENANT_LEN)
        ));
    }
    check_envelope(&envelope).map_err(|e| bounded(&e.to_string(), MAX_REASON_BYTES))?;
    if !names::is_subject(
        prefix,
        subject,
        tenant,
        envelope.topic,
        &envelope.event_type,
    ) {
        return Err(bounded(
            &format!(
                "the envelope's topic `{}` and type {:?} are not its subject's (the subject is authoritative)",
                envelope.topic, envelope.event_type
            ),
            MAX_REASON_BYTES,
        ));
    }
    Ok(envelope)
}

/// `envelope` as one part of a publish: its id, JSON and `traceparent`.
fn part_of(envelope: &EventEnvelope) -> Result<batch::Part> {
    Ok(batch::Part {
        json: serde_json::to_vec(envelope)
            .map_err(|e| Error::serialize("event", e))?
            .into(),
        traceparent: envelope
            .trace_id
            .as_deref()
            .and_then(|t| names::traceparent(t, &envelope.id)),
        id: envelope.id.clone(),
    })
}

/// A value NATS can carry in a header: one line.
fn header_value(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A durable delivery as received, kept to dead-letter it.
#[derive(Clone)]
struct Original {
    consumer: String,
    subject: String,
    payload: bytes::Bytes,
    /// Which delivery this is (1 on the first).
    attempt: u32,
    max_deliver: u32,
    /// The de-duplication id of its dead letter and notice, when every instance of the agent
    /// may dead-letter it (a message the server gave up on).
    dedup_id: Option<String>,
}

/// The server's advisory that a consumer stopped delivering a message after `max_deliver`
/// deliveries that were not settled (the process died or hung on the last one).
#[derive(serde::Deserialize)]
struct MaxDeliveries {
    stream: String,
    consumer: String,
    stream_seq: u64,
    deliveries: u64,
}

impl MaxDeliveries {
    /// Whether it tells of the last delivery of a message of `stream` by `consumer`.
    fn is_last_of(&self, stream: &str, consumer: &str, max_deliver: u32) -> bool {
        self.stream == stream
            && self.consumer == consumer
            && self.deliveries >= u64::from(max_deliver)
    }
}

/// The next message of `messages`, or `None` when they ended.
async fn next_message(
    messages: &mut Option<MessageStream>,
) -> Option<<MessageStream as Stream>::Item> {
    match messages {
        Some(m) => m.next().await,
        None => None,
    }
}

/// The next advisory, or never when there is no advisory subscription.
async fn next_advisory(
    advisories: &mut Option<async_nats::Subscriber>,
) -> Option<async_nats::Message> {
    match advisories {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

struct DurableSubscription {
    bus: NatsBus,
    consumer: String,
    /// The envelopes of a received batch not handed out yet.
    pending: VecDeque<Delivery>,
    /// Envelopes of batches out of deliveries, handed out again as their last delivery (see
    /// [`BatchSettlement::deliver_again`]); shared with each batch.
    again: Arc<Again>,
    /// Whether [`Subscription::close`] was called: it hands out nothing more.
    closed: bool,
    max_deliver: u32,
    /// The subjects this instance takes events of (every subject of the stream when empty).
    /// The consumer, shared by every instance of the agent, may take more: its filters are
    /// those of the instance that started last, maybe another version of the agent.
    filters: Vec<String>,
    /// Whether it has told that the consumer takes subjects this instance does not.
    told_foreign: bool,
    /// Its pulls; ended when it is closed, so that what it hands back goes to another
    /// instance, not to a pull of its own still waiting on the server.
    messages: Option<MessageStream>,
    /// The consumer's `MAX_DELIVERIES` advisories (`None` when they cannot be subscribed to).
    advisories: Option<async_nats::Subscriber>,
    stream: Arc<stream::Stream>,
    keep_alive: Duration,
    /// The messages handed out and not settled, and those settled for good lately (see
    /// [`held`](super::held)).
    held: Arc<Held>,
    /// The bytes of messages received and not settled it may hold
    /// ([`NatsConfig::max_in_flight_bytes`](super::NatsConfig::max_in_flight_bytes)): one
    /// permit per byte, taken for each message as it is received.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// A message received that waits for its bytes to be admitted (kept here, so that `next`
    /// dropped meanwhile loses nothing).
    admitting: Option<Received>,
}

/// A message received, where it stands (read once from its reply subject), and when it was
/// last kept alive while it waited for bytes.
struct Received {
    msg: jetstream::Message,
    /// Its stream sequence and store time, when known.
    seq: Option<MessageKey>,
    /// How many times the server delivered it.
    delivered: u64,
    kept_alive: tokio::time::Instant,
}

/// A received message's place in its subscription's byte budget, held until it is settled
/// (a batch's until all its envelopes are).
type Admitted = tokio::sync::OwnedSemaphorePermit;

/// The permits a message of `bytes` takes from a budget of `budget` bytes: one per byte, and
/// at most the whole budget, so that a message larger than it is taken alone.
fn admission(bytes: usize, budget: u32) -> u32 {
    u32::try_from(bytes)
        .unwrap_or(u32::MAX)
        .clamp(1, budget.max(1))
}

/// A configured budget as a semaphore holds it (tokio's limit is lower on 32-bit targets).
fn budget_of(configured: u32) -> u32 {
    let most = u32::try_from(tokio::sync::Semaphore::MAX_PERMITS).unwrap_or(u32::MAX);
    configured.clamp(1, most)
}

/// How many envelopes a subscription's [`Again`] holds at most: as many as the messages its
/// consumer may have delivered and not settled (`max_ack_pending`; 4,096 when unlimited) carry
/// at most. Those envelopes are in memory already; it is never full while the server enforces
/// that limit.
fn again_capacity(max_ack_pending: i64) -> usize {
    usize::try_from(max_ack_pending)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(4096)
        .saturating_mul(batch::MAX_PARTS_ACCEPTED)
}

impl DurableSubscription {
    /// Closes the subscription; returns what it holds that no handler will take now (settled
    /// by [`Unhandled::settle`]): the envelopes to hand out again and those of a received batch
    /// not handed out yet, and the message that waited for its bytes.
    fn unhandled(&mut self) -> Unhandled {
        self.closed = true;
        // Its pull requests end with their subscription (the server delivers to none whose
        // inbox has no interest), before anything is handed back: the unsubscribe is queued on
        // the connection ahead of the negative acknowledgements (best effort: when the
        // client's command queue is full, async-nats sends it from a task of its own).
        self.messages = None;
        let mut left = self.again.close();
        left.extend(self.pending.drain(..));
        Unhandled {
            deliveries: left,
            waiting: self.admitting.take().map(|received| {
                HandBack::new(self, received.msg, received.seq, received.delivered)
            }),
        }
    }
}

/// What a closed subscription holds that no handler will take now.
struct Unhandled {
    /// Envelopes to hand out again, and those of a received batch not handed out yet.
    deliveries: Vec<Delivery>,
    /// The message that waited for its bytes: redelivered at once (to another instance), or
    /// dead-lettered when that was its last delivery.
    waiting: Option<HandBack>,
}

/// A message a subscription gives back without handling it: redelivered, to be taken again
/// by any instance of the agent, or dead-lettered when that was its last delivery.
struct HandBack {
    msg: jetstream::Message,
    /// Its stream sequence, when known.
    sequence: Option<u64>,
    /// How many times the server delivered it.
    delivered: u64,
    bus: NatsBus,
    consumer: String,
    max_deliver: u32,
}

impl HandBack {
    fn new(
        sub: &DurableSubscription,
        msg: jetstream::Message,
        seq: Option<MessageKey>,
        delivered: u64,
    ) -> Self {
        HandBack {
            msg,
            sequence: seq.map(|(sequence, _)| sequence),
            delivered,
            bus: sub.bus.clone(),
            consumer: sub.consumer.clone(),
            max_deliver: sub.max_deliver,
        }
    }

    /// Whether this is its last delivery.
    fn is_last(&self) -> bool {
        self.delivered >= u64::from(self.max_deliver)
    }

    /// Redelivers it after `delay` (at once when `None`), or on its last delivery dead-letters
    /// it for `reason()` (named as any instance would name it) and terminates it.
    async fn settle(self, delay: Option<Duration>, reason: impl FnOnce() -> String) {
        let kind = if self.is_last() {
            // Kept alive while its dead letter is stored.
            if let Err(e) = self.msg.ack_with(AckKind::Progress).await {
                tracing::debug!(error = %e, "could not keep a message being dead-lettered alive");
            }
            let original = Original {
                dedup_id: self
                    .sequence
                    .map(|seq| last_delivery_id(&self.consumer, seq, u64::from(self.max_deliver))),
                consumer: self.consumer,
                subject: self.msg.subject.to_string(),
                payload: self.msg.payload.clone(),
                attempt: u32::try_from(self.delivered).unwrap_or(u32::MAX),
                max_deliver: self.max_deliver,
            };
            self.bus
                .reject_last(&original, self.msg.headers.as_ref(), &reason())
                .await;
            AckKind::Term
        } else {
            AckKind::Nak(delay)
        };
        if let Err(e) = self.msg.ack_with(kind).await {
            tracing::debug!(error = %e, "could not settle a message handed back; it is redelivered after ack_wait");
        }
    }
}

impl Unhandled {
    fn is_empty(&self) -> bool {
        self.deliveries.is_empty() && self.waiting.is_none()
    }

    async fn settle(self) {
        settle_unhandled(self.deliveries).await;
        if let Some(waiting) = self.waiting {
            let reason = || "not handled: its subscription closed on its last delivery".to_owned();
            waiting.settle(None, reason).await;
        }
    }
}

impl Drop for DurableSubscription {
    /// What [`Subscription::close`] settles, when it was not called.
    fn drop(&mut self) {
        let left = self.unhandled();
        if left.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(left.settle());
            }
            Err(_) => {
                tracing::warn!(consumer = %self.consumer, envelopes = left.deliveries.len(), "a subscription dropped outside a runtime leaves envelopes on their last delivery unsettled; the server's advisory dead-letters their batches");
            }
        }
    }
}

impl Subscription for DurableSubscription {
    /// Hands out nothing more, and settles what it holds that no handler will take now (see
    /// [`settle_unhandled`]).
    fn close(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.unhandled().settle().await })
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            if self.closed {
                return None;
            }
            loop {
                // Envelopes handed out again first: their message is on its last delivery.
                if let Some(delivery) = self.again.pop().or_else(|| self.pending.pop_front()) {
                    return Some(delivery);
                }
                if self.admitting.is_some() {
                    match self.admit().await {
                        Some(Some(delivery)) => return Some(delivery),
                        Some(None) => continue,
                        None => return None,
                    }
                }
                // All branches are cancel-safe: nothing is lost when `next` is dropped (and
                // the queue is looked at again on the next call).
                let next = tokio::select! {
                    () = self.again.queued.notified() => continue,
                    m = next_message(&mut self.messages) => Ok(m),
                    a = next_advisory(&mut self.advisories) => Err(a),
                };
                let next = match next {
                    Ok(next) => next?,
                    Err(advisory) => {
                        self.on_advisory(advisory).await;
                        continue;
                    }
                };
                let msg = match next {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(consumer = %self.consumer, error = %e, "consumer stream error; continuing");
                        continue;
                    }
                };
                let (seq, delivered) = msg.info().map_or((None, 1), |i| {
                    let delivered = u64::try_from(i.delivered).unwrap_or(1);
                    (Some((i.stream_sequence, i.published)), delivered)
                });
                // A stale copy of a message handled or settled here takes no bytes.
                if let Some(key) = seq.filter(|_| delivered > 1)
                    && self.stale_copy(key, delivered, &msg).await
                {
                    continue;
                }
                if !self.takes(&msg.subject) {
                    self.hand_back_foreign(HandBack::new(self, msg, seq, delivered))
                        .await;
                    continue;
                }
                // Its `ack_wait` began when the server sent it, not now: one that must wait for
                // bytes is kept alive at once.
                let now = tokio::time::Instant::now();
                self.admitting = Some(Received {
                    msg,
                    seq,
                    delivered,
                    kept_alive: now.checked_sub(self.keep_alive).unwrap_or(now),
                });
            }
        })
    }
}

impl DurableSubscription {
    /// Admits the bytes of the message received last and takes it in: `Some(Some(_))` a
    /// delivery to hand out, `Some(None)` nothing to hand out yet (look again), `None` the
    /// subscription is done. While the budget is spent it waits for bytes, handing out what is
    /// queued again meanwhile (whose settling may free them), acting on advisories and keeping
    /// the waiting message alive; every branch is cancel-safe (the message stays here).
    async fn admit(&mut self) -> Option<Option<Delivery>> {
        let waiting = self.admitting.as_ref()?;
        let permits = admission(waiting.msg.payload.len(), self.budget());
        let admitted = match self.in_flight.clone().try_acquire_many_owned(permits) {
            Ok(admitted) => admitted,
            Err(_) => {
                let kept_alive = waiting.kept_alive;
                tokio::select! {
                    admitted = self.in_flight.clone().acquire_many_owned(permits) => {
                        // The semaphore is never closed.
                        admitted.ok()?
                    }
                    () = self.again.queued.notified() => return Some(None),
                    a = next_advisory(&mut self.advisories) => {
                        self.on_advisory(a).await;
                        return Some(None);
                    }
                    () = tokio::time::sleep_until(kept_alive + self.keep_alive) => {
                        if let Some(waiting) = self.admitting.as_mut() {
                            waiting.kept_alive = tokio::time::Instant::now();
                            if let Err(e) = waiting.msg.ack_with(AckKind::Progress).await {
                                tracing::debug!(consumer = %self.consumer, error = %e, "could not keep a message waiting for bytes alive");
                            }
                        }
                        return Some(None);
                    }
                }
            }
        };
        let received = self.admitting.take()?;
        Some(self.take_in(received, admitted).await)
    }

    /// The budget in bytes (at most what a semaphore holds on this platform).
    fn budget(&self) -> u32 {
        budget_of(self.bus.inner.config.max_in_flight_bytes)
    }

    /// Acts on the next advisory (`None`: the advisories ended, not looked at again).
    async fn on_advisory(&mut self, advisory: Option<async_nats::Message>) {
        match advisory {
            Some(advisory) => self.abandoned(&advisory.payload).await,
            None => self.advisories = None,
        }
    }

    /// Takes in a received message whose bytes are `admitted`: its delivery, or `None` when
    /// it is a batch (queued in `pending`) or was rejected. Not cancel-safe while it rejects
    /// or unpacks: a `next` dropped then (the dispatch stopping) leaves the message to be
    /// redelivered after `ack_wait`.
    async fn take_in(&mut self, received: Received, admitted: Admitted) -> Option<Delivery> {
        let Received {
            msg,
            seq,
            delivered,
            ..
        } = received;
        let attempt = u32::try_from(delivered).unwrap_or(u32::MAX);
        let (msg, acker) = msg.split();
        let held = seq.map(|seq| (self.held.clone(), seq));
        if batch::is_batch(msg.headers.as_ref()) {
            self.unpack(msg, acker, attempt, held, admitted).await;
            return None;
        }
        let original = Original {
            consumer: self.consumer.clone(),
            subject: msg.subject.to_string(),
            payload: msg.payload,
            attempt,
            max_deliver: self.max_deliver,
            dedup_id: None,
        };
        let prefix = &self.bus.inner.config.subject_prefix;
        match decode(prefix, &original.subject, &original.payload) {
            Ok(envelope) => {
                let acker = NatsAcker {
                    bus: self.bus.clone(),
                    original,
                    settles: Settles::Message(acker),
                    keep_alive: self.keep_alive,
                    holding: held.as_ref().map(Holding::new),
                    _admitted: Some(admitted),
                };
                Some(Delivery::new(
                    Arc::new(envelope),
                    attempt,
                    Some(Box::new(acker)),
                ))
            }
            Err(reason) => {
                let kind = self.bus.reject(&original, &reason).await;
                if let Err(e) = settle_message(&acker, kind, held.as_ref()).await {
                    tracing::warn!(consumer = %self.consumer, error = %e, "could not settle a rejected message");
                }
                None
            }
        }
    }
}

impl DurableSubscription {
    /// Whether this instance takes events of `subject` (has a handler for them).
    fn takes(&self, subject: &str) -> bool {
        takes(&self.filters, subject)
    }

    /// Hands back a message of a subject this instance takes no events of, which the
    /// consumer delivers because another version of the agent set its filters (a rolling
    /// upgrade that added a handler, or an older instance started after a newer one). It is
    /// redelivered after [`FOREIGN_RETRY`], to an instance that handles it, never acknowledged
    /// unhandled; on its last delivery it is dead-lettered, saying so. Not cancel-safe: a
    /// `next` dropped meanwhile leaves the message to be redelivered after `ack_wait` (and one
    /// dead-lettered but not terminated is dead-lettered again by the server's advisory, under
    /// the same id).
    async fn hand_back_foreign(&mut self, back: HandBack) {
        if !self.told_foreign {
            self.told_foreign = true;
            tracing::warn!(consumer = %self.consumer, subject = %back.msg.subject, "the agent's consumer takes events this instance has no handler for (another version of the agent set its filters); handing them back to the instances that handle them");
        }
        tracing::debug!(consumer = %self.consumer, subject = %back.msg.subject, delivered = back.delivered, "handing back a message this instance has no handler for");
        let delivered = back.delivered;
        let reason = move || {
            format!(
                "delivered {delivered} times (max_deliver) to instances of the agent without a handler for its subject: the agent's consumer takes it because another version of the agent set its filters (a rolling upgrade, or an instance since gone: starting an instance of the running release resets them)"
            )
        };
        back.settle(Some(FOREIGN_RETRY), reason).await;
    }

    /// Whether the redelivered message (`delivered` > 1) is a stale copy of one handled or
    /// settled here (see [`held`](super::held)); one settled for good is acknowledged again.
    async fn stale_copy(&self, key: MessageKey, delivered: u64, msg: &jetstream::Message) -> bool {
        match self.held.copy(key, delivered) {
            Redelivered::New => false,
            Redelivered::Handling => {
                tracing::debug!(consumer = %self.consumer, sequence = key.0, delivered, "a redelivered copy of a message being handled here; not handled again");
                true
            }
            Redelivered::Settled => {
                tracing::debug!(consumer = %self.consumer, sequence = key.0, delivered, "acknowledging again a redelivered copy of a message settled here");
                if let Err(e) = msg.ack_with(AckKind::Ack).await {
                    tracing::warn!(consumer = %self.consumer, error = %e, "could not acknowledge a redelivered copy");
                }
                true
            }
        }
    }

    /// Queues the envelopes of a batch as deliveries that settle it together; dead-letters
    /// those that cannot be handled (or the whole message, when it is no batch).
    async fn unpack(
        &mut self,
        msg: async_nats::Message,
        acker: jetstream::message::Acker,
        attempt: u32,
        held: Option<HeldMessage>,
        admitted: Admitted,
    ) {
        let whole = Original {
            consumer: self.consumer.clone(),
            subject: msg.subject.to_string(),
            payload: msg.payload.clone(),
            attempt,
            max_deliver: self.max_deliver,
            dedup_id: None,
        };
        let parts = match batch::split(&msg.payload) {
            Ok(parts) => parts,
            Err(reason) => {
                let kind = self.bus.reject(&whole, &reason).await;
                if let Err(e) = settle_message(&acker, kind, held.as_ref()).await {
                    tracing::warn!(consumer = %self.consumer, error = %e, "could not settle a rejected batch");
                }
                return;
            }
        };
        let total = parts.len();
        let settlement = Arc::new(BatchSettlement {
            acker,
            replies_together: batch::replies_together(msg.headers.as_ref()),
            open: std::sync::Mutex::new(BatchProgress {
                unsettled: parts.len(),
                retry: None,
                retried: Vec::new(),
                replies: Vec::new(),
                last_round: false,
            }),
            held: held.clone(),
            again: self.again.clone(),
            keep_alive: self.keep_alive,
            _admitted: admitted,
        });
        let prefix = &self.bus.inner.config.subject_prefix;
        let mut rejected = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            let original = Original {
                payload: msg.payload.slice_ref(part.get().as_bytes()),
                ..whole.clone()
            };
            match decode(prefix, &whole.subject, part.get().as_bytes()) {
                Ok(envelope) => {
                    let delivery = settlement.delivery(&self.bus, envelope, i, original);
                    self.pending.push_back(delivery);
                }
                Err(reason) => rejected.push((i, original, reason)),
            }
        }
        // Many bad envelopes (from a hostile publisher: the SDK publishes none) are one dead
        // letter, the whole message, not a store and a notice each inside `next`.
        let together = (rejected.len() > MAX_REJECTED_ALONE).then(|| {
            let (first, _, reason) = &rejected[0];
            format!(
                "{} of the batch's {} envelopes cannot be handled (the others are); envelope {first}: {reason}",
                rejected.len(),
                total
            )
        });
        let mut together = match together {
            Some(reason) => {
                let kind = self.bus.reject(&whole, &reason).await;
                // Not stored: the whole message is still to be dead-lettered, once, by the
                // first of them (see `out_of_deliveries`).
                let first = rejected.first().map(|(i, ..)| *i).unwrap_or_default();
                let retried = Retried::of(&kind, first, &whole, || Unfinished::DeadLetter {
                    reason,
                    notice: true,
                });
                Some((kind, retried))
            }
            None => None,
        };
        for (i, original, reason) in rejected {
            let (kind, unfinished) = match together.as_mut() {
                Some((kind, retried)) => (*kind, retried.take()),
                None => {
                    let kind = self.bus.reject(&original, &reason).await;
                    // A dead letter not stored is tried again with the batch; its notice is to
                    // come.
                    let unfinished = Retried::of(&kind, i, &original, || Unfinished::DeadLetter {
                        reason,
                        notice: true,
                    });
                    (kind, unfinished)
                }
            };
            if let Err(e) = settlement.settled(&self.bus, kind, unfinished, None).await {
                tracing::warn!(consumer = %self.consumer, error = %e, "could not settle a batch");
            }
        }
    }

    /// Dead-letters the message a `MAX_DELIVERIES` advisory names: its last delivery was never
    /// settled, so the server will not deliver it again. Every instance of the agent gets the
    /// advisory; the dead letter and its notice have ids derived from the message, so the
    /// streams keep one copy.
    async fn abandoned(&self, advisory: &[u8]) {
        let Ok(advisory) = serde_json::from_slice::<MaxDeliveries>(advisory) else {
            tracing::warn!(consumer = %self.consumer, "ignoring an undecodable max-deliveries advisory");
            return;
        };
        if !advisory.is_last_of(
            &self.stream.cached_info().config.name,
            &self.consumer,
            self.max_deliver,
        ) {
            tracing::warn!(
                consumer = %self.consumer,
                advisory_stream = %bounded(&advisory.stream, 64),
                advisory_consumer = %bounded(&advisory.consumer, 64),
                deliveries = advisory.deliveries,
                max_deliver = self.max_deliver,
                "ignoring a max-deliveries advisory that is not this consumer's, or not of a last delivery"
            );
            return;
        }
        let stored = match self.stream.get_raw_message(advisory.stream_seq).await {
            Ok(stored) => stored,
            Err(e) => {
                tracing::error!(consumer = %self.consumer, sequence = advisory.stream_seq, error = %e, "a message the server gave up on cannot be read; it is not dead-lettered");
                return;
            }
        };
        if !self.takes(&stored.subject) {
            tracing::warn!(consumer = %self.consumer, sequence = advisory.stream_seq, "ignoring a max-deliveries advisory for a message this consumer does not take");
            return;
        }
        // One this subscription is handling is settled by its handling (which now counts it as
        // on its last delivery); one it settled for good is not dead-lettered.
        match self
            .held
            .copy((advisory.stream_seq, stored.time), advisory.deliveries)
        {
            Redelivered::New => {}
            seen => {
                tracing::debug!(consumer = %self.consumer, sequence = advisory.stream_seq, ?seen, "the message the server gave up on is handled here");
                return;
            }
        }
        let attempt = self.max_deliver;
        let original = Original {
            consumer: self.consumer.clone(),
            subject: stored.subject.to_string(),
            payload: stored.payload,
            // Its last delivery: storing the dead letter is not retried by redelivery.
            attempt,
            max_deliver: self.max_deliver,
            // Its last delivery's number, as the instance that failed on it would name it.
            dedup_id: Some(last_delivery_id(
                &self.consumer,
                advisory.stream_seq,
                u64::from(self.max_deliver),
            )),
        };
        let reason = format!(
            "not settled on its last delivery ({attempt} of {}, max_deliver): the handling instance died or stalled",
            self.max_deliver
        );
        self.bus
            .reject_last(&original, Some(&stored.headers), &reason)
            .await;
    }
}

impl NatsBus {
    /// Dead-letters a message on its last delivery, a batch's envelopes one by one (as they
    /// would have been handled; the `i`th's id is `<id>-<i>`).
    async fn reject_last(&self, original: &Original, headers: Option<&HeaderMap>, reason: &str) {
        let parts = batch::is_batch(headers)
            .then(|| batch::split(&original.payload).ok())
            .flatten();
        match parts {
            Some(parts) => {
                for (i, part) in parts.into_iter().enumerate() {
                    let part = Original {
                        payload: original.payload.slice_ref(part.get().as_bytes()),
                        dedup_id: original.dedup_id.as_ref().map(|id| format!("{id}-{i}")),
                        ..original.clone()
                    };
                    self.reject(&part, reason).await;
                }
            }
            None => {
                self.reject(original, reason).await;
            }
        }
    }

    /// Dead-letters a message no handler can take (undecodable, a bad tenant, out of
    /// deliveries) and announces it as `event.dead_lettered` on `system-events`, under the
    /// subject's tenant (the default tenant when that is invalid). Returns how to settle it.
    async fn reject(&self, original: &Original, reason: &str) -> AckKind {
        let prefix = &self.inner.config.subject_prefix;
        tracing::warn!(consumer = %original.consumer, subject = %original.subject, %reason, "dead-lettering message");
        let settle = self.store_or_retry(original, reason).await;
        if !matches!(settle, AckKind::Term) {
            // Redelivered to try storing it again: announced when that is settled.
            return settle;
        }
        let notice = EventEnvelope::new(
            original
                .dedup_id
                .as_ref()
                .map_or_else(new_id, |id| format!("{id}-notice")),
            original.consumer.as_str(),
            Topic::SystemEvents,
            DEAD_LETTERED,
        )
        .with_tenant_id(notice_tenant(prefix, &original.subject))
        .with_time(now_rfc3339())
        .with_data(json!({
            "subject": bounded(&original.subject, MAX_REASON_BYTES),
            "consumer": original.consumer,
            "reason": bounded(reason, MAX_REASON_BYTES),
            "attempt": original.attempt,
        }));
        if let Err(e) = self.publish_envelope(&notice).await {
            tracing::error!(error = %e, "could not publish the dead-letter notice");
        }
        settle
    }
}

struct NatsAcker {
    bus: NatsBus,
    original: Original,
    settles: Settles,
    keep_alive: Duration,
    /// Its message as being handled by the subscription, until this is dropped (when the
    /// message's stream sequence is known).
    holding: Option<Holding>,
    /// Its message's bytes in its subscription's budget, until this is dropped (a batch's
    /// envelopes: the batch holds them).
    _admitted: Option<Admitted>,
}

/// The de-duplication id a message on `subject` with `payload` takes when `dedup_id` is held
/// by a message of another subject, at stream sequence `taken_at`: a digest of the four, the
/// envelopes' `time` left out, so the same message published again (stamped anew) takes the
/// same id.
fn displaced_id(subject: &str, dedup_id: &str, taken_at: u64, payload: &[u8]) -> String {
    let digest = crate::util::digest(&[
        subject.as_bytes(),
        dedup_id.as_bytes(),
        &taken_at.to_be_bytes(),
        &untimed(payload),
    ]);
    format!("displaced-{}", &digest[..32])
}

/// `payload` (an envelope, or a batch's array of them) without the envelopes' `time`, which
/// each publish stamps anew; itself when it is no JSON.
fn untimed(payload: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return std::borrow::Cow::Borrowed(payload);
    };
    let envelopes = match &mut value {
        serde_json::Value::Array(items) => items.iter_mut().collect(),
        one => vec![one],
    };
    for envelope in envelopes {
        if let serde_json::Value::Object(fields) = envelope {
            fields.remove("time");
        }
    }
    serde_json::to_vec(&value).map_or(std::borrow::Cow::Borrowed(payload), std::borrow::Cow::Owned)
}

/// The de-duplication id of the dead letter of the message at stream `sequence` that
/// `consumer` gave up on after `deliveries` (a batch's envelope `i` takes `<id>-<i>`, its
/// notice `<id>-notice`): the same whichever instance, or path, dead-letters it.
fn last_delivery_id(consumer: &str, sequence: u64, deliveries: u64) -> String {
    format!("{consumer}-{sequence}-{deliveries}")
}

/// Settles a whole message (alone or a batch) as `kind`; one acknowledged or terminated (the
/// server delivers it no more) is recorded in `held` (the subscription's, and its sequence).
async fn settle_message(
    acker: &jetstream::message::Acker,
    kind: AckKind,
    held: Option<&HeldMessage>,
) -> Result<()> {
    let for_good = matches!(kind, AckKind::Ack | AckKind::Term);
    acker
        .ack_with(kind)
        .await
        .map_err(|e| engine_error(EngineErrorKind::Ack, "ack", e))?;
    if let Some((held, seq)) = held.filter(|_| for_good) {
        held.settled(*seq);
    }
    Ok(())
}

/// What settling a delivery settles: its message, or its share of a batch.
// Lives in a boxed `NatsAcker`: the size difference costs no copies, boxing would cost an
// allocation per delivery.
#[allow(clippy::large_enum_variant)]
enum Settles {
    Message(jetstream::message::Acker),
    /// The batch, and this envelope's place in it.
    Part(Arc<BatchSettlement>, usize),
}

/// A received batch being handled: acked once every envelope is settled (a dead-lettered one
/// counts as settled), redelivered whole when any asked to be retried. The replies handed to
/// it are stored together, in the batch's order, before it is acked: the same batch handled
/// again makes the same reply batches, which JetStream then keeps once.
///
/// When the message has no delivery left by then (a copy the server sent while the batch was
/// handled counts as one), the envelopes that asked for a retry are handed out again, as that
/// last delivery ([`deliver_again`](Self::deliver_again)), and the message is settled once they
/// are.
struct BatchSettlement {
    acker: jetstream::message::Acker,
    /// Whether its replies are stored together (a fan-out's batch; not coalesced requests of
    /// unrelated callers, who each get their reply as soon as it is ready).
    replies_together: bool,
    open: std::sync::Mutex<BatchProgress>,
    /// The subscription's held messages and the batch's stream sequence (when known).
    held: Option<HeldMessage>,
    /// The subscription's queue of envelopes handed out again.
    again: Arc<Again>,
    /// How often the message is kept alive while envelopes wait to be handed out again.
    keep_alive: Duration,
    /// The batch's bytes in its subscription's budget, until all its envelopes are settled.
    _admitted: Admitted,
}

struct BatchProgress {
    /// Envelopes not settled yet.
    unsettled: usize,
    /// The longest retry delay asked for, when any was.
    retry: Option<Duration>,
    /// The envelopes that asked for a retry: handed out again, or dead-lettered, when the
    /// message has no delivery left by the time the batch is settled.
    retried: Vec<Retried>,
    /// Replies waiting for the batch: the envelope's place, its reply.
    replies: Vec<(usize, EventEnvelope)>,
    /// Whether the envelopes being handled were handed out again, on the message's last
    /// delivery: those that ask for a retry now are dead-lettered.
    last_round: bool,
}

impl BatchSettlement {
    /// The delivery of `envelope`, at `index` in the batch (`original`: its message on the
    /// delivery it is handed out on), settled with the batch.
    fn delivery(
        self: &Arc<Self>,
        bus: &NatsBus,
        envelope: EventEnvelope,
        index: usize,
        original: Original,
    ) -> Delivery {
        let attempt = original.attempt;
        let acker = NatsAcker {
            bus: bus.clone(),
            original,
            settles: Settles::Part(self.clone(), index),
            keep_alive: self.keep_alive,
            holding: self.held.as_ref().map(Holding::new),
            _admitted: None,
        };
        Delivery::new(Arc::new(envelope), attempt, Some(Box::new(acker)))
    }

    /// One envelope settled as `kind` (with its reply, to store with the batch's; with what
    /// it still needs when it asks for a retry); the last one stores the replies and settles
    /// the message.
    async fn settled(
        self: &Arc<Self>,
        bus: &NatsBus,
        kind: AckKind,
        retried: Option<Retried>,
        reply: Option<(usize, EventEnvelope)>,
    ) -> Result<()> {
        let last = {
            let mut open = self.open.lock().expect("batch settlement lock");
            if let AckKind::Nak(delay) = kind {
                let delay = delay.unwrap_or_default();
                open.retry = Some(open.retry.map_or(delay, |d| d.max(delay)));
            }
            open.retried.extend(retried);
            open.replies.extend(reply);
            open.unsettled = open.unsettled.saturating_sub(1);
            (open.unsettled == 0).then(|| {
                (
                    open.retry.take(),
                    std::mem::take(&mut open.retried),
                    open.last_round,
                )
            })
        };
        let Some((retry, retried, last_round)) = last else {
            return Ok(());
        };
        // Retried whole: its replies are made again, then stored as the same batches.
        let kind = match retry {
            None => self.replies_stored(bus).await,
            Some(delay) => match self.out_of_deliveries(bus, retried, last_round).await {
                None => AckKind::Nak(Some(delay)),
                Some(again) if !again.is_empty() => {
                    return self.deliver_again(bus, again, delay).await;
                }
                Some(_) => self.replies_stored(bus).await,
            },
        };
        settle_message(&self.acker, kind, self.held.as_ref()).await
    }

    /// Stores the replies handed to the batch, in its order; how to settle the message then.
    async fn replies_stored(&self, bus: &NatsBus) -> AckKind {
        let mut replies =
            std::mem::take(&mut self.open.lock().expect("batch settlement lock").replies);
        if replies.is_empty() {
            return AckKind::Ack;
        }
        replies.sort_by_key(|(i, _)| *i);
        let replies = replies.into_iter().map(|(_, r)| r).collect();
        match bus.publish_all(replies).await {
            Ok(()) => AckKind::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "could not store a batch's replies; redelivering the batch");
                AckKind::Nak(Some(DEAD_LETTER_RETRY))
            }
        }
    }

    /// Hands the envelopes that asked for a retry (their place, their message on its last
    /// delivery) out again through the subscription: the copy the server sent while the batch
    /// was handled was their last delivery, so their handlers decide as on a last delivery (a
    /// tool's failure policy sends its caller the error reply) instead of their being
    /// dead-lettered unhandled. They are queued by a task of their own once the retry `delay`
    /// they asked for has passed (no handler waits for it), and the message is kept alive from
    /// now until it is settled: the server would not deliver it again, and its
    /// `MAX_DELIVERIES` advisory would dead-letter the whole batch.
    async fn deliver_again(
        self: &Arc<Self>,
        bus: &NatsBus,
        again: Vec<(usize, Original)>,
        delay: Duration,
    ) -> Result<()> {
        let prefix = &bus.inner.config.subject_prefix;
        let mut deliveries = Vec::with_capacity(again.len());
        for (index, original) in again {
            // Decoded once already: this cannot fail, but is not unwrapped.
            match decode(prefix, &original.subject, &original.payload) {
                // Its holding is taken while the settling envelope still holds the message.
                Ok(envelope) => deliveries.push(self.delivery(bus, envelope, index, original)),
                Err(reason) => {
                    bus.reject(&original, &reason).await;
                }
            }
        }
        {
            let mut open = self.open.lock().expect("batch settlement lock");
            open.unsettled = deliveries.len();
            open.last_round = true;
        }
        if deliveries.is_empty() {
            let kind = self.replies_stored(bus).await;
            return settle_message(&self.acker, kind, self.held.as_ref()).await;
        }
        tracing::info!(
            envelopes = deliveries.len(),
            "a batch asked for a retry on its message's last delivery; handing those envelopes out again as that delivery"
        );
        match self.again.wait(deliveries) {
            Ok(ticket) => {
                tokio::spawn(queued_again(
                    Arc::downgrade(self),
                    self.keep_alive,
                    tokio::time::Instant::now() + delay,
                    ticket,
                    self.again.clone(),
                ));
            }
            Err(deliveries) => settle_unhandled(deliveries).await,
        }
        Ok(())
    }
}

/// Keeps a batch's message alive (a progress acknowledgement now and every `keep_alive`) while
/// its envelopes wait in the subscription's [`Again`] (`ticket`) until `ready`, then to be
/// handed out, until the batch is settled (or dropped).
async fn queued_again(
    batch: std::sync::Weak<BatchSettlement>,
    keep_alive: Duration,
    ready: tokio::time::Instant,
    ticket: u64,
    again: Arc<Again>,
) {
    let mut waiting = Some(ticket);
    // Once settled (or dropped), no envelope of it is left.
    while let Some(settlement) = batch.upgrade() {
        if let Err(e) = settlement.acker.ack_with(AckKind::Progress).await {
            tracing::warn!(error = %e, "could not keep alive a batch whose envelopes wait to be handled again");
        }
        drop(settlement);
        let now = tokio::time::Instant::now();
        if now >= ready
            && let Some(ticket) = waiting.take()
        {
            again.ready(ticket);
        }
        let wake = match waiting {
            Some(_) => ready.min(now + keep_alive),
            None => now + keep_alive,
        };
        tokio::time::sleep_until(wake).await;
    }
}

/// Settles envelopes of batches that no handler will take (their subscription closed, or its
/// queue of envelopes to hand out again full) as retries, at once: a batch is redelivered (to
/// another instance) when its message has deliveries left; on its last delivery such an
/// envelope is dead-lettered as still failing (with its notice), not left with its whole batch
/// to the server's `MAX_DELIVERIES` advisory (which would dead-letter its handled envelopes
/// too).
async fn settle_unhandled(deliveries: Vec<Delivery>) {
    for delivery in deliveries {
        tracing::info!(event_id = %delivery.envelope.id, attempt = delivery.current_attempt(), "an envelope of a batch will not be handled by this subscription (closed, or full); settled as a retry");
        let retry = Settlement::Retry {
            delay: Duration::ZERO,
        };
        if let Err(e) = delivery.settle(retry).await {
            tracing::warn!(error = %e, "could not settle a batch's envelope");
        }
    }
}

/// A subscription's envelopes to be handed out again (see [`BatchSettlement::deliver_again`]):
/// those waiting for their retry delay, and those ready, at most `capacity` in all. Closed with
/// the subscription: what it holds then is taken out and settled, so a batch is not left to
/// the server's advisory, and a batch and the queue holding its envelopes do not keep each
/// other alive.
struct Again {
    /// `None` once closed.
    state: std::sync::Mutex<Option<AgainState>>,
    capacity: usize,
    queued: tokio::sync::Notify,
}

#[derive(Default)]
struct AgainState {
    /// Ready to be handed out, in order.
    ready: VecDeque<Delivery>,
    /// Waiting for their retry delay, by ticket.
    waiting: HashMap<u64, Vec<Delivery>>,
    held: usize,
    next_ticket: u64,
}

impl Again {
    fn new(capacity: usize) -> Self {
        Self {
            state: std::sync::Mutex::new(Some(AgainState::default())),
            capacity,
            queued: tokio::sync::Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Option<AgainState>> {
        self.state.lock().expect("again queue lock")
    }

    /// Holds `deliveries` until [`ready`](Self::ready) with the ticket returned; gives them
    /// back when closed or full.
    fn wait(&self, deliveries: Vec<Delivery>) -> std::result::Result<u64, Vec<Delivery>> {
        let mut state = self.state();
        let Some(state) = state
            .as_mut()
            .filter(|s| s.held + deliveries.len() <= self.capacity)
        else {
            return Err(deliveries);
        };
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.held += deliveries.len();
        state.waiting.insert(ticket, deliveries);
        Ok(ticket)
    }

    /// Makes the deliveries of `ticket` (unless taken by closing) ready to be handed out.
    fn ready(&self, ticket: u64) {
        if let Some(state) = self.state().as_mut()
            && let Some(deliveries) = state.waiting.remove(&ticket)
        {
            state.ready.extend(deliveries);
            self.queued.notify_one();
        }
    }

    fn pop(&self) -> Option<Delivery> {
        let mut state = self.state();
        let state = state.as_mut()?;
        let delivery = state.ready.pop_front()?;
        state.held -= 1;
        Some(delivery)
    }

    /// Closes it; returns what it held.
    fn close(&self) -> Vec<Delivery> {
        let Some(state) = self.state().take() else {
            return Vec::new();
        };
        let mut left: Vec<Delivery> = state.ready.into();
        left.extend(state.waiting.into_values().flatten());
        left
    }
}

/// What an envelope of a batch that asked for the message to be delivered again still needs,
/// when the message has no delivery left.
enum Unfinished {
    /// Its handling asked for a retry: handed out again as the last delivery (dead-lettered as
    /// still failing, with a notice, when it already was).
    Retry,
    /// Its dead letter (for `reason`) could not be stored; `notice`: whether its
    /// `event.dead_lettered` notice is still to be published.
    DeadLetter { reason: String, notice: bool },
}

/// An envelope of a batch (its place in it) settled with a negative acknowledgement.
struct Retried {
    index: usize,
    original: Original,
    unfinished: Unfinished,
}

impl Retried {
    /// What the envelope at `index` still needs, when it was settled as a retry (`kind`).
    fn of(
        kind: &AckKind,
        index: usize,
        original: &Original,
        unfinished: impl FnOnce() -> Unfinished,
    ) -> Option<Self> {
        matches!(kind, AckKind::Nak(_)).then(|| Self {
            index,
            original: original.clone(),
            unfinished: unfinished(),
        })
    }
}

impl BatchSettlement {
    /// `None` while the message has deliveries left for the envelopes that asked for a retry
    /// (a copy the server sent while the batch was handled counts as a delivery). Otherwise
    /// the envelopes to hand out again (their place, their message on its last delivery:
    /// none on the `last_round`), and the others are dead-lettered here, once: retried whole,
    /// the server would not deliver the message again, and its `MAX_DELIVERIES` advisory
    /// would dead-letter every envelope a second time. These dead letters have the ids the
    /// advisory's would (see [`DurableSubscription::abandoned`]), so a stream keeps one copy
    /// if the message's settlement is lost all the same.
    async fn out_of_deliveries(
        &self,
        bus: &NatsBus,
        retried: Vec<Retried>,
        last_round: bool,
    ) -> Option<Vec<(usize, Original)>> {
        let max_deliver = retried.first()?.original.max_deliver;
        let newest = self
            .held
            .as_ref()
            .and_then(|(held, key)| held.delivered(*key));
        let attempt = retried
            .iter()
            .map(|r| r.original.attempt)
            .chain(newest)
            .max()
            .unwrap_or(1);
        if attempt < max_deliver {
            return None;
        }
        let sequence = self.held.as_ref().map(|(_, (sequence, _))| *sequence);
        let mut again = Vec::new();
        for Retried {
            index,
            original,
            unfinished,
        } in retried
        {
            // Its last delivery: a dead letter that cannot be stored is logged, not retried.
            let last = Original {
                attempt,
                dedup_id: sequence.map(|s| {
                    let id = last_delivery_id(&original.consumer, s, max_deliver.into());
                    format!("{id}-{index}")
                }),
                ..original
            };
            match unfinished {
                Unfinished::Retry if !last_round => again.push((index, last)),
                Unfinished::Retry => {
                    bus.reject(&last, &still_failing(attempt, max_deliver))
                        .await;
                }
                Unfinished::DeadLetter { reason, notice } => {
                    if notice {
                        bus.reject(&last, &reason).await;
                    } else {
                        bus.store_or_retry(&last, &reason).await;
                    }
                }
            }
        }
        Some(again)
    }
}

impl Acker for NatsAcker {
    fn settle(self: Box<Self>, settlement: Settlement) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            // Copies the server sent while this was handled count as deliveries too.
            let counted;
            let original = match self.attempt().filter(|a| *a > self.original.attempt) {
                Some(attempt) => {
                    counted = Original {
                        attempt,
                        ..self.original.clone()
                    };
                    &counted
                }
                None => &self.original,
            };
            let (kind, unfinished) = match settlement {
                Settlement::Ack => (AckKind::Ack, Unfinished::Retry),
                Settlement::Retry { delay } if original.attempt < original.max_deliver => {
                    (AckKind::Nak(Some(delay)), Unfinished::Retry)
                }
                Settlement::Retry { .. } => {
                    // The server would not deliver it again: dead-letter it, not let it vanish.
                    let reason = still_failing(original.attempt, original.max_deliver);
                    let kind = self.bus.reject(original, &reason).await;
                    let notice = true;
                    (kind, Unfinished::DeadLetter { reason, notice })
                }
                Settlement::DeadLetter { reason } => {
                    let kind = self.bus.store_or_retry(original, &reason).await;
                    // The handler's layer announced it.
                    let notice = false;
                    (kind, Unfinished::DeadLetter { reason, notice })
                }
            };
            match &self.settles {
                Settles::Message(acker) => {
                    settle_message(acker, kind, self.holding.as_ref().map(Holding::message)).await
                }
                Settles::Part(batch, i) => {
                    let retried = Retried::of(&kind, *i, original, || unfinished);
                    batch.settled(&self.bus, kind, retried, None).await
                }
            }
        })
    }

    fn attempt(&self) -> Option<u32> {
        self.holding
            .as_ref()
            .and_then(|h| h.message().0.delivered(h.message().1))
    }

    fn batches_replies(&self) -> bool {
        matches!(&self.settles, Settles::Part(batch, _) if batch.replies_together)
    }

    fn settle_with_reply(self: Box<Self>, reply: EventEnvelope) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            match &self.settles {
                Settles::Part(batch, i) => {
                    batch
                        .settled(&self.bus, AckKind::Ack, None, Some((*i, reply)))
                        .await
                }
                Settles::Message(_) => Err(Error::InvalidArgument(format!(
                    "a delivery of its own does not batch its reply `{}`",
                    reply.id
                ))),
            }
        })
    }

    fn keep_alive_interval(&self) -> Option<Duration> {
        Some(self.keep_alive)
    }

    fn in_progress(&self) -> BoxFuture<'_, Result<()>> {
        let acker = match &self.settles {
            Settles::Message(acker) => acker,
            Settles::Part(batch, _) => &batch.acker,
        };
        Box::pin(async move {
            acker
                .ack_with(AckKind::Progress)
                .await
                .map_err(|e| engine_error(EngineErrorKind::Ack, "progress ack", e))
        })
    }
}

struct CoreSubscription {
    prefix: String,
    /// The envelopes of a received batch not handed out yet.
    pending: VecDeque<Delivery>,
    messages: Pin<Box<dyn Stream<Item = async_nats::Message> + Send>>,
    catch_up: CatchUp,
}

impl Subscription for CoreSubscription {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            loop {
                if let Some(delivery) = self.pending.pop_front() {
                    return Some(delivery);
                }
                // Both branches are cancel-safe: nothing is lost when `next` is dropped.
                let (msg, replayed) = tokio::select! {
                    m = self.messages.next() => (m?, false),
                    m = self.catch_up.next() => (m, true),
                };
                let parts = if batch::is_batch(msg.headers.as_ref()) {
                    batch::split(&msg.payload)
                } else {
                    Ok(vec![])
                };
                let parts = match parts {
                    Ok(parts) if parts.is_empty() => vec![&msg.payload[..]],
                    Ok(parts) => parts.into_iter().map(|p| p.get().as_bytes()).collect(),
                    Err(reason) => {
                        tracing::debug!(subject = %msg.subject, %reason, "ignoring a batch that cannot be handled");
                        continue;
                    }
                };
                for part in parts {
                    match decode(&self.prefix, &msg.subject, part) {
                        Ok(env) if !self.catch_up.deliver(env.tenant(), &env.id, replayed) => {}
                        Ok(env) => self
                            .pending
                            .push_back(Delivery::new(Arc::new(env), 1, None)),
                        Err(reason) => {
                            tracing::debug!(subject = %msg.subject, %reason, "ignoring a message that cannot be handled")
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_displaced_message_takes_the_same_id_each_time_and_another_for_other_inputs() {
        let subject = "soorma.acme.action-results.x.done";
        let reply = |time: &str, data: i64| {
            serde_json::to_vec(&json!({"id": "order-7", "time": time, "data": data})).unwrap()
        };
        let id = displaced_id(subject, "order-7", 41, &reply("2026-11-28T10:00:00Z", 1));
        assert!(id.starts_with("displaced-") && id.len() == 10 + 32, "{id}");
        // Published again, stamped anew: the same id.
        let again = displaced_id(subject, "order-7", 41, &reply("2026-11-28T10:05:00Z", 1));
        assert_eq!(id, again);
        let batch = |time: &str| {
            serde_json::to_vec(&json!([{"id": "a", "time": time}, {"id": "b", "time": time}]))
                .unwrap()
        };
        assert_eq!(
            displaced_id(subject, "batch-1", 41, &batch("t1")),
            displaced_id(subject, "batch-1", 41, &batch("t2"))
        );
        let others = [
            displaced_id(
                "soorma.globex.action-results.x.done",
                "order-7",
                41,
                &reply("2026-11-28T10:00:00Z", 1),
            ),
            displaced_id(subject, "order-8", 41, &reply("2026-11-28T10:00:00Z", 1)),
            displaced_id(subject, "order-7", 42, &reply("2026-11-28T10:00:00Z", 1)),
            displaced_id(subject, "order-7", 41, &reply("2026-11-28T10:00:00Z", 2)),
            displaced_id(subject, "order-7", 41, b"not json"),
        ];
        for other in others {
            assert_ne!(id, other);
        }
    }

    #[test]
    fn a_start_that_narrows_a_consumer_names_the_filters_it_drops() {
        let own = |fs: &[&str]| fs.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>();
        let one = consumer::Config {
            filter_subject: "soorma.*.business-facts.job.posted".into(),
            ..Default::default()
        };
        let two = consumer::Config {
            filter_subjects: own(&[
                "soorma.*.business-facts.job.closed",
                "soorma.*.business-facts.job.posted",
            ]),
            ..Default::default()
        };
        let posted = own(&["soorma.*.business-facts.job.posted"]);
        let both = own(&[
            "soorma.*.business-facts.job.closed",
            "soorma.*.business-facts.job.posted",
        ]);
        assert!(dropped_filters(&one, &posted).is_empty());
        assert!(
            dropped_filters(&one, &both).is_empty(),
            "widening drops nothing"
        );
        assert_eq!(
            dropped_filters(&two, &posted),
            ["soorma.*.business-facts.job.closed"]
        );
        assert!(dropped_filters(&two, &own(&["soorma.*.business-facts.>"])).is_empty());
        assert!(dropped_filters(&two, &[]).is_empty(), "no filter takes all");
        let all = consumer::Config::default();
        assert_eq!(dropped_filters(&all, &posted), [">"]);
    }

    #[test]
    fn a_message_takes_its_bytes_of_the_budget_and_never_more_than_all_of_it() {
        assert_eq!(admission(400, 1 << 20), 400);
        assert_eq!(admission(0, 1 << 20), 1);
        assert_eq!(admission(5 << 20, 1 << 20), 1 << 20);
        assert_eq!(admission(usize::MAX, u32::MAX), u32::MAX);
        assert_eq!(admission(10, 0), 1);
    }

    #[test]
    fn a_max_deliveries_advisory_counts_only_for_its_consumers_last_delivery() {
        let advisory = |stream: &str, consumer: &str, deliveries| MaxDeliveries {
            stream: stream.into(),
            consumer: consumer.into(),
            stream_seq: 7,
            deliveries,
        };
        assert!(advisory("S", "c", 3).is_last_of("S", "c", 3));
        assert!(advisory("S", "c", 4).is_last_of("S", "c", 3));
        assert!(!advisory("S", "c", 2).is_last_of("S", "c", 3));
        assert!(!advisory("S", "other", 3).is_last_of("S", "c", 3));
        assert!(!advisory("T", "c", 3).is_last_of("S", "c", 3));
    }

    #[test]
    fn the_subjects_tenant_is_authoritative() {
        let env = |tenant: Option<&str>| {
            let mut e = EventEnvelope::new("e1", "s", Topic::ActionRequests, "x.requested");
            e.tenant_id = tenant.map(str::to_owned);
            serde_json::to_vec(&e).unwrap()
        };
        let subject = |t: &str| format!("soorma.{t}.action-requests.x.requested");
        assert!(decode("soorma", &subject("acme"), &env(Some("acme"))).is_ok());
        assert!(decode("soorma", &subject("default"), &env(None)).is_ok());
        for (subject_tenant, envelope_tenant) in [
            ("acme", Some("globex")),
            ("acme", None),
            ("default", Some("acme")),
            ("acme", Some("")),
            ("ac@me", Some("ac@me")),
        ] {
            let reason =
                decode("soorma", &subject(subject_tenant), &env(envelope_tenant)).unwrap_err();
            assert!(reason.contains("tenant"), "{reason}");
        }
        let huge = EventEnvelope::new("e1", "s", Topic::ActionRequests, "x.requested")
            .with_tenant_id("g".repeat(1_000_000));
        let reason = decode(
            "soorma",
            &subject("acme"),
            &serde_json::to_vec(&huge).unwrap(),
        )
        .unwrap_err();
        assert!(reason.len() < 400, "{}", reason.len());
    }

    #[test]
    fn the_subjects_topic_and_type_are_authoritative() {
        let env = EventEnvelope::new("e1", "s", Topic::ActionRequests, "x.requested");
        let json = serde_json::to_vec(&env).unwrap();
        assert!(
            decode(
                "soorma",
                "soorma.default.action-requests.x.requested",
                &json
            )
            .is_ok()
        );
        for subject in [
            "soorma.default.business-facts.x.requested",
            "soorma.default.action-requests.y.requested",
            "soorma.default.action-requests.x.requested.z",
            "soorma.default.action-requests.x",
        ] {
            let reason = decode("soorma", subject, &json).unwrap_err();
            assert!(reason.contains("not its subject's"), "{subject}: {reason}");
        }
    }

    #[test]
    fn dead_letter_subjects_are_bounded() {
        let ordinary = "soorma.acme.action-requests.x.requested";
        assert_eq!(
            dead_letter_subject("soorma", ordinary),
            "soorma-dlq.acme.action-requests.x.requested"
        );
        let longest = format!(
            "soorma.{}.action-requests.{}",
            "t".repeat(64),
            "e".repeat(MAX_ID_LEN)
        );
        assert_eq!(
            dead_letter_subject("soorma", &longest),
            longest.replacen("soorma.", "soorma-dlq.", 1)
        );
        let tokens = ["x"; 2_000].join(".");
        let long = format!("soorma.acme.action-requests.{tokens}");
        assert_eq!(
            dead_letter_subject("soorma", &long),
            "soorma-dlq.acme.subject-too-long"
        );
        let bad_tenant = format!("soorma.ac@me.action-requests.{tokens}");
        assert_eq!(
            dead_letter_subject("soorma", &bad_tenant),
            format!("soorma-dlq.{DEFAULT_TENANT}.subject-too-long")
        );
    }

    #[test]
    fn undecodable_reasons_are_bounded_and_nesting_is_limited() {
        let deep = format!(
            r#"{{"id":"e","source":"s","type":"t","topic":"action-requests","data":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let reason = decode("soorma", "soorma.default.a.b", deep.as_bytes()).unwrap_err();
        assert!(reason.contains("recursion limit"), "{reason}");
        let long_variant = format!(
            r#"{{"id":"e","source":"s","topic":"{}","type":"t"}}"#,
            "x".repeat(1_000_000)
        );
        let reason = decode("soorma", "soorma.default.a.b", long_variant.as_bytes()).unwrap_err();
        assert!(reason.len() <= MAX_REASON_BYTES, "{}", reason.len());
        assert_eq!(header_value("a\r\nb\u{0}c"), "a  b c");
        assert_eq!(notice_tenant("soorma", "soorma.ac@me.a.b"), DEFAULT_TENANT);
        assert_eq!(notice_tenant("soorma", "soorma.acme.a.b"), "acme");
    }
}
