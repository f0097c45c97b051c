use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use tokio::sync::Mutex;

use super::{NatsConfig, assets, engine_error, names};
use crate::error::{BoxError, EngineErrorKind, Error, Result};
use crate::spi::state::{Revision, StateChange, StateKey, StateStore, StateWatch, Versioned};
use crate::spi::tenant::validate_tenant;
use crate::util::BoxFuture;

/// How long a key listing waits for the next entry before it reads the subjects it has not
/// seen directly (they vanished since it started, or the listing stalled).
const LISTING_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// How many keys a listing reads directly at once.
const DIRECT_READS: usize = 16;

/// The state store on JetStream KV: one bucket per state bucket (`soorma_tasks`, ...), keys
/// `<tenant>.<key>`, revision-checked `create` / `update`.
#[derive(Clone)]
pub struct NatsStore {
    js: jetstream::Context,
    config: Arc<NatsConfig>,
    /// The buckets opened: read without waiting for one being opened.
    buckets: Arc<std::sync::RwLock<HashMap<&'static str, kv::Store>>>,
    /// Held while a bucket is opened (one at a time, each once).
    opening: Arc<Mutex<()>>,
}

impl std::fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsStore").finish_non_exhaustive()
    }
}

fn state_err(kind: EngineErrorKind, what: &str, key: &StateKey, e: impl Into<BoxError>) -> Error {
    engine_error(kind, format!("{what} `{key}`"), e)
}

impl NatsStore {
    pub(crate) fn new(js: jetstream::Context, config: Arc<NatsConfig>) -> Self {
        Self {
            js,
            config,
            buckets: Arc::default(),
            opening: Arc::default(),
        }
    }

    /// The live keys of one tenant: the latest entry of each `<tenant>.*` subject, so listing
    /// reads that tenant's keys, not the whole bucket.
    async fn tenant_keys(
        &self,
        store: &kv::Store,
        tenant: &str,
    ) -> std::result::Result<Vec<String>, BoxError> {
        Ok(live_keys(&self.js.client(), store, &format!("{tenant}.*"))
            .await?
            .into_iter()
            .filter_map(|k| names::kv_key_decode(tenant, &k))
            .collect())
    }

    /// The KV bucket for `bucket`, created on first use (failing as a `kind` error).
    async fn bucket(&self, bucket: &'static str, kind: EngineErrorKind) -> Result<kv::Store> {
        if let Some(b) = self.opened(bucket) {
            return Ok(b);
        }
        let _opening = self.opening.lock().await;
        // Opened meanwhile by the holder before.
        if let Some(b) = self.opened(bucket) {
            return Ok(b);
        }
        let name = names::bucket_name(&self.config.bucket_prefix, bucket);
        let wanted = kv::Config {
            bucket: name,
            description: format!("soorma `{bucket}` state"),
            history: 1,
            storage: self.config.storage,
            num_replicas: self.config.replicas,
            ..Default::default()
        };
        let store = assets::open_bucket(&self.js, wanted, &assets::usable_bucket, kind).await?;
        self.buckets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(bucket, store.clone());
        Ok(store)
    }

    /// The bucket for `bucket`, when it is open already.
    fn opened(&self, bucket: &str) -> Option<kv::Store> {
        self.buckets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(bucket)
            .cloned()
    }
}

impl StateStore for NatsStore {
    fn get<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<Option<Versioned<Vec<u8>>>>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateRead).await?;
            let k = names::kv_key(&key.tenant, &key.key)?;
            let entry = super::during_failover(|| store.entry(k.clone()))
                .await
                .map_err(|e| state_err(EngineErrorKind::StateRead, "read", key, e))?;
            Ok(entry
                .filter(|e| e.operation == kv::Operation::Put)
                .map(|e| Versioned {
                    value: e.value.to_vec(),
                    revision: e.revision,
                }))
        })
    }

    fn create<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateWrite).await?;
            let (k, value) = (
                names::kv_key(&key.tenant, &key.key)?,
                bytes::Bytes::from(value),
            );
            super::during_failover(|| store.create(&k, value.clone()))
                .await
                .map_err(|e| match e.kind() {
                    kv::CreateErrorKind::AlreadyExists => Error::Conflict {
                        key: key.to_string(),
                    },
                    _ => state_err(EngineErrorKind::StateWrite, "create", key, e),
                })
        })
    }

    fn update<'a>(
        &'a self,
        key: &'a StateKey,
        value: Vec<u8>,
        expected: Revision,
    ) -> BoxFuture<'a, Result<Revision>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateWrite).await?;
            let (k, value) = (
                names::kv_key(&key.tenant, &key.key)?,
                bytes::Bytes::from(value),
            );
            super::during_failover(|| store.update(&k, value.clone(), expected))
                .await
                .map_err(|e| match e.kind() {
                    kv::UpdateErrorKind::WrongLastRevision => Error::Conflict {
                        key: key.to_string(),
                    },
                    _ => state_err(EngineErrorKind::StateWrite, "update", key, e),
                })
        })
    }

    fn put<'a>(&'a self, key: &'a StateKey, value: Vec<u8>) -> BoxFuture<'a, Result<Revision>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateWrite).await?;
            let (k, value) = (
                names::kv_key(&key.tenant, &key.key)?,
                bytes::Bytes::from(value),
            );
            super::during_failover(|| store.put(&k, value.clone()))
                .await
                .map_err(|e| state_err(EngineErrorKind::StateWrite, "write", key, e))
        })
    }

    fn delete<'a>(&'a self, key: &'a StateKey) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateWrite).await?;
            let k = names::kv_key(&key.tenant, &key.key)?;
            super::during_failover(|| store.delete(&k))
                .await
                .map_err(|e| state_err(EngineErrorKind::StateWrite, "delete", key, e))
        })
    }

    fn delete_if<'a>(&'a self, key: &'a StateKey, expected: Revision) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let store = self.bucket(key.bucket, EngineErrorKind::StateWrite).await?;
            let k = names::kv_key(&key.tenant, &key.key)?;
            super::during_failover(|| store.delete_expect_revision(&k, Some(expected)))
                .await
                .map_err(|e| match e.kind() {
                    kv::DeleteErrorKind::WrongLastRevision => Error::Conflict {
                        key: key.to_string(),
                    },
                    _ => state_err(EngineErrorKind::StateWrite, "delete", key, e),
                })
        })
    }

    fn keys<'a>(
        &'a self,
        bucket: &'static str,
        tenant: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            names::tenant_token(tenant)?;
            let store = self.bucket(bucket, EngineErrorKind::StateList).await?;
            let mut keys = self.tenant_keys(&store, tenant).await.map_err(|e| {
                engine_error(
                    EngineErrorKind::StateList,
                    format!("list `{bucket}` for tenant `{tenant}`"),
                    e,
                )
            })?;
            keys.sort();
            Ok(keys)
        })
    }

    fn watch<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Box<dyn StateWatch>>> {
        Box::pin(async move {
            let store = self.bucket(bucket, EngineErrorKind::Subscribe).await?;
            let failed = |e: BoxError| {
                engine_error(
                    EngineErrorKind::Subscribe,
                    format!("watch state bucket `{bucket}`"),
                    e,
                )
            };
            let held = store
                .stream
                .get_info()
                .await
                .map_err(|e| failed(e.into()))?
                .state
                .messages
                > 0;
            let entries = store
                .watch_with_history(">")
                .await
                .map_err(|e| failed(e.into()))?;
            Ok(Box::new(Watch {
                entries,
                current_due: true,
                first: held,
                current_next: !held,
            }) as Box<dyn StateWatch>)
        })
    }

    fn tenants<'a>(&'a self, bucket: &'static str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let store = self.bucket(bucket, EngineErrorKind::StateList).await?;
            tenants(&store).await.map_err(|e| {
                engine_error(
                    EngineErrorKind::StateList,
                    format!("list the tenants of `{bucket}`"),
                    e,
                )
            })
        })
    }
}

/// How long a watch waits for the first record of a bucket that held records when it started
/// before it reports [`StateChange::Current`] anyway (they may have been purged meanwhile).
const WATCH_FIRST_RECORD: std::time::Duration = std::time::Duration::from_secs(5);

/// A watch on one KV bucket: the last entry of every key (its ordered consumer replays them),
/// then changes as they are stored.
struct Watch {
    entries: kv::Watch,
    /// `Current` is still to be reported.
    current_due: bool,
    /// Nothing has arrived yet from a bucket that held records.
    first: bool,
    /// `Current` goes out before the next entry.
    current_next: bool,
}

impl Watch {
    /// The change an entry makes (`None` for a key that is not `<tenant>.<key>`).
    fn change(entry: kv::Entry) -> Option<StateChange> {
        let (tenant, _) = entry.key.split_once('.')?;
        let key = names::kv_key_decode(tenant, &entry.key)?;
        let tenant = tenant.to_owned();
        Some(match entry.operation {
            kv::Operation::Put => StateChange::Put {
                tenant,
                key,
                value: entry.value.to_vec(),
                revision: entry.revision,
            },
            kv::Operation::Delete | kv::Operation::Purge => StateChange::Delete {
                tenant,
                key,
                revision: entry.revision,
            },
        })
    }
}

impl StateWatch for Watch {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StateChange>>> {
        use futures_util::StreamExt;
        Box::pin(async move {
            loop {
                if self.current_next {
                    self.current_next = false;
                    self.current_due = false;
                    return Some(Ok(StateChange::Current));
                }
                let next = if self.first {
                    match tokio::time::timeout(WATCH_FIRST_RECORD, self.entries.next()).await {
                        Ok(next) => next,
                        Err(_) => {
                            // The records seen at the start are gone: nothing to replay.
                            self.first = false;
                            self.current_next = true;
                            continue;
                        }
                    }
                } else {
                    self.entries.next().await
                };
                self.first = false;
                let entry = match next? {
                    Ok(entry) => entry,
                    Err(e) => {
                        return Some(Err(engine_error(
                            EngineErrorKind::Subscribe,
                            "watch a state bucket",
                            e,
                        )));
                    }
                };
                if self.current_due && entry.delta == 0 {
                    self.current_next = true;
                }
                match Self::change(entry) {
                    Some(change) => return Some(Ok(change)),
                    None => continue,
                }
            }
        })
    }
}

/// The tenants of a KV bucket: the first token of its keys (`<tenant>.<key>`), from the
/// subjects the stream holds (no message is read). Deleted keys keep their subject until
/// purged, so a tenant whose keys were all deleted may be listed. A first token that is no
/// valid tenant id (a key written around the SDK) is skipped with a warning: the SDK cannot
/// list or read such a tenant's keys, and every other tenant is still listed.
async fn tenants(store: &kv::Store) -> std::result::Result<Vec<String>, BoxError> {
    let mut tenants: Vec<String> = stored_keys(store, "*.*")
        .await?
        .iter()
        .filter_map(|key| key.split_once('.').map(|(tenant, _)| tenant.to_owned()))
        .collect();
    tenants.sort();
    tenants.dedup();
    // Told once per process as a warning (the memory sweep lists tenants every minute).
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    tenants.retain(|tenant| {
        let valid = validate_tenant(tenant).is_ok();
        if !valid {
            let tenant = crate::util::bounded(tenant, 80);
            let what = "skipping the keys of a tenant that is not a valid tenant id (written around the SDK)";
            if TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::debug!(bucket = %store.name, %tenant, "{what}");
            } else {
                tracing::warn!(bucket = %store.name, %tenant, "{what}");
            }
        }
        valid
    });
    Ok(tenants)
}

/// The keys of `store` matching `pattern` (`*`/`>` wildcards) that have a message: one
/// `STREAM.INFO` request with a subject filter, no consumer, no message read. A deleted or
/// purged key keeps its subject (its marker) until the marker expires.
pub(crate) async fn stored_keys(
    store: &kv::Store,
    pattern: &str,
) -> std::result::Result<Vec<String>, BoxError> {
    use futures_util::TryStreamExt;
    let subjects: Vec<String> = store
        .stream
        .info_with_subjects(format!("{}{pattern}", store.prefix))
        .await?
        .map_ok(|(subject, _count)| subject)
        .try_collect()
        .await?;
    Ok(subjects
        .into_iter()
        .filter_map(|s| s.strip_prefix(store.prefix.as_str()).map(str::to_owned))
        .collect())
}

/// The live (not deleted) keys of `store` matching `pattern` (`*`/`>` wildcards), from the last
/// entry of each subject, headers only.
///
/// A consumer's pending count is no end marker while keys are being written (an update replaces
/// a key's message; listings stopped short under concurrent updates), so this takes the set of
/// subjects the stream holds first and reads until each has been seen; a later message of a
/// subject overrides an earlier one. Those not seen once nothing came for [`LISTING_IDLE`] are
/// read directly. The listing's consumer is deleted when it is done (the server would otherwise
/// keep it until it has been idle for 30 s).
pub(crate) async fn live_keys(
    client: &async_nats::Client,
    store: &kv::Store,
    pattern: &str,
) -> std::result::Result<Vec<String>, BoxError> {
    let mut unseen: std::collections::HashSet<String> = stored_keys(store, pattern)
        .await?
        .into_iter()
        .map(|key| format!("{}{key}", store.prefix))
        .collect();
    if unseen.is_empty() {
        return Ok(Vec::new());
    }
    let name = format!("soorma-keys-{}", crate::util::new_id());
    let mut listing = Listing {
        stream: store.stream.clone(),
        name: Some(name.clone()),
    };
    let consumer = store
        .stream
        .create_consumer(jetstream::consumer::push::OrderedConfig {
            name: Some(name.clone()),
            deliver_subject: client.new_inbox(),
            description: Some("soorma key listing".into()),
            filter_subject: format!("{}{pattern}", store.prefix),
            headers_only: true,
            replay_policy: jetstream::consumer::ReplayPolicy::Instant,
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await?;
    let listed = read_live(consumer, &mut unseen).await;
    listing.delete().await;
    let mut listed = listed?;
    // Subjects of the snapshot the listing did not deliver: expired or purged since, or held
    // up (a reconnect, a leader change) past the idle time. Each is read directly, so a
    // stalled listing is never taken for a complete one.
    use futures_util::{StreamExt, TryStreamExt};
    let read: Vec<(String, bool)> = futures_util::stream::iter(unseen.drain())
        .map(|subject| async move {
            let Some(key) = subject.strip_prefix(store.prefix.as_str()) else {
                return Ok((subject, false));
            };
            let entry = readable_entry(store, key).await?;
            let is_live = entry.is_some_and(|e| e.operation == kv::Operation::Put);
            Ok::<_, kv::EntryError>((subject, is_live))
        })
        .buffer_unordered(DIRECT_READS)
        .try_collect()
        .await?;
    listed.extend(read);
    Ok(listed
        .into_iter()
        .filter(|(_, is_live)| *is_live)
        .filter_map(|(subject, _)| {
            subject
                .strip_prefix(store.prefix.as_str())
                .map(str::to_owned)
        })
        .collect())
}

/// The entry of `key`; none for a key the KV store cannot read (written around the SDK, by a
/// raw publish on the bucket's subjects), which no caller's key can be.
pub(crate) async fn readable_entry(
    store: &kv::Store,
    key: &str,
) -> std::result::Result<Option<kv::Entry>, kv::EntryError> {
    match store.entry(key).await {
        Err(e) if e.kind() == kv::EntryErrorKind::InvalidKey => {
            // Debug: registry listings run before every request.
            tracing::debug!(bucket = %store.name, key = %crate::util::bounded(key, 200), "skipping a key the KV store cannot read");
            Ok(None)
        }
        read => read,
    }
}

/// A key listing's consumer, deleted when the listing is done, or in the background when the
/// listing is dropped before (its caller went away): the server would otherwise keep it until
/// it has been idle for 30 s.
struct Listing {
    stream: jetstream::stream::Stream,
    /// `None` once deleted.
    name: Option<String>,
}

impl Listing {
    async fn delete(&mut self) {
        if let Some(name) = self.name.take() {
            delete_listing(&self.stream, &name).await;
        }
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        if let Some(name) = self.name.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let stream = self.stream.clone();
            runtime.spawn(async move { delete_listing(&stream, &name).await });
        }
    }
}

async fn delete_listing(stream: &jetstream::stream::Stream, name: &str) {
    if let Err(e) = stream.delete_consumer(name).await {
        tracing::debug!(consumer = %name, error = %e, "could not delete the key listing's consumer; the server removes it when idle");
    }
}

/// Reads `consumer` until every subject of `unseen` has been seen (or nothing arrives for
/// [`LISTING_IDLE`]; the subjects not seen are left in `unseen`): whether each subject's last
/// entry is live.
async fn read_live(
    consumer: jetstream::consumer::Consumer<jetstream::consumer::push::OrderedConfig>,
    unseen: &mut std::collections::HashSet<String>,
) -> std::result::Result<HashMap<String, bool>, BoxError> {
    use futures_util::StreamExt;
    let mut messages = consumer.messages().await?;
    let mut live: HashMap<String, bool> = HashMap::new();
    while !unseen.is_empty() {
        // A subject of the snapshot that vanished since (expired) never comes: stop when
        // nothing arrives for a while.
        let next = tokio::time::timeout(LISTING_IDLE, messages.next()).await;
        let Ok(Some(message)) = next else { break };
        let message = message?;
        let removed = message.headers.as_ref().is_some_and(|h| {
            h.get("KV-Operation").is_some() || h.get("Nats-Marker-Reason").is_some()
        });
        let subject = message.subject.to_string();
        unseen.remove(&subject);
        live.insert(subject, !removed);
    }
    Ok(live)
}
