use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer, stream};
use futures_util::{Stream, StreamExt};
use serde_json::json;
use soorma_common::{EventEnvelope, Topic};
use tokio::sync::Mutex;

use super::{NatsConfig, assets, engine_error, names};
use crate::error::{EngineErrorKind, Error, Result};
use crate::spi::bus::{
    Acker, Delivery, EventBus, EventFilter, Settlement, Subscription, SubscriptionSpec,
};
use crate::util::{BoxFuture, new_id, now_rfc3339};

/// Header carrying the dead-letter reason on DLQ messages.
pub const DEAD_LETTER_REASON_HEADER: &str = "Soorma-Dead-Letter-Reason";

struct Inner {
    client: async_nats::Client,
    js: jetstream::Context,
    config: Arc<NatsConfig>,
    /// Topics whose stream is known to exist (the fast path of every publish takes no lock
    /// that waits).
    streams: std::sync::RwLock<HashMap<Topic, stream::Stream>>,
    creating: Mutex<()>,
    dlq: Mutex<bool>,
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
            .field("url", &self.inner.config.url)
            .finish_non_exhaustive()
    }
}

impl NatsBus {
    pub(crate) fn new(
        client: async_nats::Client,
        js: jetstream::Context,
        config: Arc<NatsConfig>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                js,
                config,
                streams: std::sync::RwLock::default(),
                creating: Mutex::new(()),
                dlq: Mutex::new(false),
            }),
        }
    }

    /// The stream keeping `topic`'s events, created on first use (failing as a `kind` error).
    async fn stream(&self, topic: Topic, kind: EngineErrorKind) -> Result<stream::Stream> {
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
            duplicate_window: std::time::Duration::from_secs(120),
            description: Some(format!("soorma `{topic}` events")),
            ..Default::default()
        };
        let check = |c: &stream::Config| assets::usable_event_stream(c, &subject);
        let s = assets::open_stream(&self.inner.js, wanted, &check, kind).await?;
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
            storage: cfg.storage,
            num_replicas: cfg.replicas,
            description: Some("soorma dead letters".into()),
            ..Default::default()
        };
        let check = |c: &stream::Config| assets::usable_stream(c, &subject);
        assets::open_stream(&self.inner.js, wanted, &check, EngineErrorKind::Ack).await?;
        *ready = true;
        Ok(())
    }

    /// Stores a message that cannot be handled in the DLQ stream, with the reason, and
    /// publishes `event.dead_lettered` on `system-events`.
    async fn dead_letter(
        &self,
        subject: &str,
        payload: bytes::Bytes,
        reason: &str,
        consumer: &str,
    ) -> Result<()> {
        self.ensure_dlq().await?;
        let cfg = &self.inner.config;
        let mut headers = HeaderMap::new();
        headers.insert(DEAD_LETTER_REASON_HEADER, reason);
        headers.insert("Soorma-Consumer", consumer);
        headers.insert("Soorma-Original-Subject", subject);
        let dlq_subject = format!(
            "{}-dlq.{}",
            cfg.subject_prefix,
            subject
                .strip_prefix(&format!("{}.", cfg.subject_prefix))
                .unwrap_or(subject)
        );
        self.inner
            .js
            .publish_with_headers(dlq_subject, headers, payload)
            .await
            .map_err(|e| engine_error(EngineErrorKind::Ack, "dead-letter publish", e))?
            .await
            .map_err(|e| engine_error(EngineErrorKind::Ack, "dead-letter ack", e))?;
        Ok(())
    }

    async fn publish_envelope(&self, envelope: &EventEnvelope) -> Result<()> {
        let cfg = &self.inner.config;
        let subject = names::subject(
            &cfg.subject_prefix,
            envelope.tenant(),
            envelope.topic,
            &envelope.event_type,
        )?;
        self.stream(envelope.topic, EngineErrorKind::Publish)
            .await?;
        let payload = serde_json::to_vec(envelope).map_err(|e| Error::serialize("event", e))?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", envelope.id.as_str());
        if let Some(tp) = envelope
            .trace_id
            .as_deref()
            .and_then(|t| names::traceparent(t, &envelope.id))
        {
            headers.insert("traceparent", tp.as_str());
        }
        self.inner
            .js
            .publish_with_headers(subject, headers, payload.into())
            .await
            .map_err(|e| engine_error(EngineErrorKind::Publish, "publish", e))?
            .await
            .map_err(|e| engine_error(EngineErrorKind::Publish, "publish not acknowledged", e))?;
        Ok(())
    }

    async fn subscribe_durable(&self, spec: SubscriptionSpec) -> Result<Box<dyn Subscription>> {
        let cfg = &self.inner.config;
        let stream = self.stream(spec.topic, EngineErrorKind::Subscribe).await?;
        let mut filter_subjects = filters(cfg, &spec)?;
        // A single filter goes in `filter_subject` (the server's simplest, fastest path).
        let filter_subject = if filter_subjects.len() == 1 {
            filter_subjects.pop().unwrap_or_default()
        } else {
            String::new()
        };
        let name = names::consumer_name(&spec.group, spec.topic, spec.tenant.as_deref());
        let consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(name.clone()),
                description: Some(format!("soorma consumer group `{}`", spec.group)),
                filter_subject,
                filter_subjects,
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: cfg.ack_wait,
                deliver_policy: consumer::DeliverPolicy::New,
                max_deliver: -1,
                max_ack_pending: cfg.max_ack_pending,
                // As many replicas as the stream (adopted streams keep theirs).
                num_replicas: 0,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                engine_error(
                    EngineErrorKind::Subscribe,
                    format!("cannot create consumer `{name}`"),
                    e,
                )
            })?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(256)
            .messages()
            .await
            .map_err(|e| {
                engine_error(
                    EngineErrorKind::Subscribe,
                    format!("cannot consume from `{name}`"),
                    e,
                )
            })?;
        Ok(Box::new(DurableSubscription {
            bus: self.clone(),
            consumer: name,
            messages,
            // Well inside `ack_wait`, so a slow handler's event is not redelivered meanwhile.
            keep_alive: cfg.ack_wait / 3,
        }))
    }

    async fn subscribe_core(&self, filters: Vec<String>) -> Result<Box<dyn Subscription>> {
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
        Ok(Box::new(CoreSubscription { messages: merged }))
    }
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

    fn subscribe(&self, spec: SubscriptionSpec) -> BoxFuture<'_, Result<Box<dyn Subscription>>> {
        Box::pin(async move {
            if spec.durable {
                self.subscribe_durable(spec).await
            } else {
                let f = filters(&self.inner.config, &spec)?;
                self.subscribe_core(f).await
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
            self.subscribe_core(vec![f]).await
        })
    }
}

type MessageStream = consumer::pull::Stream;

struct DurableSubscription {
    bus: NatsBus,
    consumer: String,
    messages: MessageStream,
    keep_alive: Duration,
}

impl Subscription for DurableSubscription {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            loop {
                let msg = match self.messages.next().await? {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(consumer = %self.consumer, error = %e, "consumer stream error; continuing");
                        continue;
                    }
                };
                let attempt = msg
                    .info()
                    .map(|i| u32::try_from(i.delivered).unwrap_or(u32::MAX))
                    .unwrap_or(1);
                let (msg, acker) = msg.split();
                match serde_json::from_slice::<EventEnvelope>(&msg.payload) {
                    Ok(envelope) => {
                        let envelope = Arc::new(envelope);
                        let acker = NatsAcker {
                            bus: self.bus.clone(),
                            consumer: self.consumer.clone(),
                            subject: msg.subject.to_string(),
                            payload: msg.payload.clone(),
                            acker,
                            keep_alive: self.keep_alive,
                        };
                        return Some(Delivery::new(envelope, attempt, Some(Box::new(acker))));
                    }
                    Err(e) => {
                        let reason = format!("undecodable event envelope: {e}");
                        tracing::warn!(consumer = %self.consumer, subject = %msg.subject, %reason, "dead-lettering message");
                        self.bus
                            .reject_raw(&self.consumer, &msg.subject, msg.payload.clone(), &reason)
                            .await;
                        if let Err(e) = acker.ack_with(AckKind::Term).await {
                            tracing::warn!(error = %e, "could not terminate undecodable message");
                        }
                    }
                }
            }
        })
    }
}

impl NatsBus {
    /// Dead-letters an undecodable message and announces it on `system-events`.
    async fn reject_raw(&self, consumer: &str, subject: &str, payload: bytes::Bytes, reason: &str) {
        if let Err(e) = self.dead_letter(subject, payload, reason, consumer).await {
            tracing::error!(error = %e, "could not store dead letter");
        }
        let notice = EventEnvelope::new(
            new_id(),
            consumer,
            Topic::SystemEvents,
            "event.dead_lettered",
        )
        .with_time(now_rfc3339())
        .with_data(json!({
            "subject": subject,
            "consumer": consumer,
            "reason": reason,
        }));
        if let Err(e) = self.publish_envelope(&notice).await {
            tracing::error!(error = %e, "could not publish the dead-letter notice");
        }
    }
}

struct NatsAcker {
    bus: NatsBus,
    consumer: String,
    subject: String,
    payload: bytes::Bytes,
    acker: jetstream::message::Acker,
    keep_alive: Duration,
}

impl Acker for NatsAcker {
    fn settle(self: Box<Self>, settlement: Settlement) -> BoxFuture<'static, Result<()>> {
        Box::pin(async move {
            let kind = match settlement {
                Settlement::Ack => AckKind::Ack,
                Settlement::Retry { delay } => AckKind::Nak(Some(delay)),
                Settlement::DeadLetter { reason } => {
                    self.bus
                        .dead_letter(&self.subject, self.payload.clone(), &reason, &self.consumer)
                        .await?;
                    AckKind::Term
                }
            };
            self.acker
                .ack_with(kind)
                .await
                .map_err(|e| engine_error(EngineErrorKind::Ack, "ack", e))
        })
    }

    fn keep_alive_interval(&self) -> Option<Duration> {
        Some(self.keep_alive)
    }

    fn in_progress(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.acker
                .ack_with(AckKind::Progress)
                .await
                .map_err(|e| engine_error(EngineErrorKind::Ack, "progress ack", e))
        })
    }
}

struct CoreSubscription {
    messages: Pin<Box<dyn Stream<Item = async_nats::Message> + Send>>,
}

impl Subscription for CoreSubscription {
    fn next(&mut self) -> BoxFuture<'_, Option<Delivery>> {
        Box::pin(async move {
            loop {
                let msg = self.messages.next().await?;
                match serde_json::from_slice::<EventEnvelope>(&msg.payload) {
                    Ok(env) => return Some(Delivery::new(Arc::new(env), 1, None)),
                    Err(e) => {
                        tracing::debug!(subject = %msg.subject, error = %e, "ignoring undecodable message")
                    }
                }
            }
        })
    }
}
