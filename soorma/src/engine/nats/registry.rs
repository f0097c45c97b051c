use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::{self, kv};
use soorma_common::AgentDefinition;
use tokio::task::JoinHandle;

use super::{NatsConfig, assets, engine_error, failover, names};
use crate::error::{BoxError, EngineErrorKind, Error, Result};
use crate::spi::registry::Registry;
use crate::util::BoxFuture;

/// The registry on JetStream KV: one entry per running agent, refreshed by a heartbeat and
/// expiring (bucket `max_age`) when the agent stops heartbeating.
#[derive(Clone)]
pub struct NatsRegistry {
    store: kv::Store,
    config: Arc<NatsConfig>,
    heartbeats: Arc<Mutex<HashMap<String, JoinHandle<()>>>>,
}

impl std::fmt::Debug for NatsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsRegistry").finish_non_exhaustive()
    }
}

fn reg_err(what: &str, e: impl Into<BoxError>) -> Error {
    engine_error(EngineErrorKind::Registry, what, e)
}

impl NatsRegistry {
    pub(crate) async fn new(js: jetstream::Context, config: Arc<NatsConfig>) -> Result<Self> {
        let wanted = kv::Config {
            bucket: names::bucket_name(&config.bucket_prefix, "registry"),
            description: "soorma agent registry".into(),
            history: 1,
            max_age: config.registry_ttl,
            storage: config.storage,
            num_replicas: config.replicas,
            ..Default::default()
        };
        let heartbeat = config.heartbeat;
        let check = |c: &jetstream::stream::Config| expiring_bucket(c, heartbeat);
        let store = assets::open_bucket(&js, wanted, &check, EngineErrorKind::Registry).await?;
        Ok(Self {
            store,
            config,
            heartbeats: Arc::default(),
        })
    }

    fn key(agent_id: &str) -> Result<String> {
        names::kv_key("agents", agent_id)
    }
}

/// What the registry needs of its bucket: a KV bucket whose entries expire, later than the
/// heartbeat renews them (entries of stopped agents leave; running agents' stay).
fn expiring_bucket(
    config: &jetstream::stream::Config,
    heartbeat: std::time::Duration,
) -> std::result::Result<(), String> {
    assets::usable_bucket(config)?;
    if config.max_age.is_zero() {
        return Err("field `max_age` is 0: entries of stopped agents would never expire".into());
    }
    if config.max_age <= heartbeat {
        return Err(format!(
            "field `max_age` ({:?}) is not longer than the heartbeat ({heartbeat:?}): running \
             agents' entries would expire",
            config.max_age
        ));
    }
    Ok(())
}

impl Drop for NatsRegistry {
    fn drop(&mut self) {
        if Arc::strong_count(&self.heartbeats) == 1 {
            for (_, h) in self.heartbeats.lock().expect("heartbeat lock").drain() {
                h.abort();
            }
        }
    }
}

impl Registry for NatsRegistry {
    fn register(&self, agent: AgentDefinition) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let key = Self::key(&agent.agent_id)?;
            let value: bytes::Bytes = serde_json::to_vec(&agent)
                .map_err(|e| Error::serialize("agent definition", e))?
                .into();
            // Through a failover, the same entry is put again.
            failover::retried(self.config.failover_retry, "register", || {
                self.store.put(&key, value.clone())
            })
            .await
            .map_err(|e| reg_err("register", e))?;
            let store = self.store.clone();
            let every = self.config.heartbeat;
            let heartbeat = tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    if let Err(e) = store.put(&key, value.clone()).await {
                        tracing::warn!(error = %e, "registry heartbeat failed; retrying next interval");
                    }
                }
            });
            if let Some(old) = self
                .heartbeats
                .lock()
                .expect("heartbeat lock")
                .insert(agent.agent_id.clone(), heartbeat)
            {
                old.abort();
            }
            Ok(())
        })
    }

    fn deregister<'a>(&'a self, agent_id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if let Some(h) = self
                .heartbeats
                .lock()
                .expect("heartbeat lock")
                .remove(agent_id)
            {
                h.abort();
            }
            self.store
                .purge(Self::key(agent_id)?)
                .await
                .map_err(|e| reg_err("deregister", e))
        })
    }

    /// The registered agents: the keys the bucket holds (one `STREAM.INFO` request), then each
    /// key's entry (direct gets, a few at a time). No consumer is created.
    fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
        Box::pin(async move {
            use futures_util::{StreamExt, TryStreamExt};
            let keys = super::state::stored_keys(&self.store, "agents.*")
                .await
                .map_err(|e| reg_err("list agents", e))?;
            let entries: Vec<(String, Option<kv::Entry>)> = futures_util::stream::iter(keys)
                .map(|key| async move {
                    // A key written around the SDK is no agent's: the others are still listed.
                    let entry = super::state::readable_entry(&self.store, &key).await;
                    entry
                        .map(|e| (key, e))
                        .map_err(|e| reg_err("read agent", e))
                })
                .buffer_unordered(READ_CONCURRENCY)
                .try_collect()
                .await?;
            let mut agents = Vec::new();
            for (key, entry) in entries {
                // Deregistered (purged) or expired since the listing.
                let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                    continue;
                };
                match serde_json::from_slice::<AgentDefinition>(&entry.value) {
                    Ok(a) => agents.push(a),
                    Err(e) => {
                        tracing::warn!(%key, error = %e, "skipping undecodable registry entry")
                    }
                }
            }
            agents.sort_by(|a, b| a.name.cmp(&b.name).then(a.agent_id.cmp(&b.agent_id)));
            Ok(agents)
        })
    }
}

/// How many registry entries a listing reads at once.
const READ_CONCURRENCY: usize = 16;
