//! Validation of action requests against the payload schema their consumer registered.
//!
//! `request`, `invoke` and `delegate` look up the requested event in the registry (a snapshot
//! refreshed at most every [`REFRESH`]) and, when a consumer registered a payload schema for
//! it, validate the payload before publishing: a mismatch fails the call with
//! [`Error::SchemaViolation`] listing every violation, and nothing is published. Events no
//! registered agent describes are published unchecked. Opt out per call with
//! `skip_validation()`, or build without the `schema-validation` feature.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use soorma_common::{AgentDefinition, EventEnvelope, Topic};

use crate::error::{Error, Result, SchemaViolation};
use crate::spi::registry::Registry;

/// How long a registry snapshot is used before it is read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// Validates requests against the schemas in the registry, caching what it reads.
pub(crate) struct RequestValidator {
    registry: Arc<dyn Registry>,
    refresh: Duration,
    cache: Mutex<Cache>,
    /// Serializes registry reads, so an expiring snapshot is read once, not by every caller.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Cache {
    /// When the registry read of `snapshot` started.
    fetched: Option<Instant>,
    snapshot: Arc<Snapshot>,
    #[cfg(feature = "schema-validation")]
    compiled: HashMap<String, Compiled>,
}

#[cfg(feature = "schema-validation")]
struct Compiled {
    /// The snapshot's copy: the same `Arc` until the next registry read.
    schema: Arc<Value>,
    /// `None` when the registered schema is not a valid JSON Schema (logged, not enforced).
    validator: Option<Arc<jsonschema::Validator>>,
}

impl std::fmt::Debug for RequestValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestValidator").finish_non_exhaustive()
    }
}

impl RequestValidator {
    pub(crate) fn new(registry: Arc<dyn Registry>) -> Self {
        Self {
            registry,
            refresh: REFRESH,
            cache: Mutex::default(),
            reading: tokio::sync::Mutex::const_new(()),
        }
    }

    /// Checks `env` (an action request) against its consumer's payload schema.
    pub(crate) async fn check(&self, env: &EventEnvelope) -> Result<()> {
        if env.topic != Topic::ActionRequests || !cfg!(feature = "schema-validation") {
            return Ok(());
        }
        let snapshot = self.snapshot(false).await;
        let Some(schema) = snapshot.schemas.get(&env.event_type) else {
            return Ok(());
        };
        let violations = self.violations(&env.event_type, schema, &env.data);
        if violations.is_empty() {
            Ok(())
        } else {
            tracing::debug!(event_type = %env.event_type, count = violations.len(), "request rejected by its schema");
            Err(Error::SchemaViolation {
                event: env.event_type.clone(),
                violations,
            })
        }
    }

    /// Whether a registered agent consumes `event` (an action request) for `tenant`. A miss
    /// reads the registry again before answering, so an agent that registered a moment ago
    /// is found.
    pub(crate) async fn has_consumer(&self, event: &str, tenant: &str) -> bool {
        if self.snapshot(false).await.consumes(event, tenant) {
            return true;
        }
        self.snapshot(true).await.consumes(event, tenant)
    }

    /// The request event of the capability `name` names (a registered capability's task name,
    /// or the action request event it consumes), from the registry snapshot; a miss reads the
    /// registry again, so an agent that registered a moment ago is found.
    pub(crate) async fn capability_event(&self, name: &str) -> Option<String> {
        if let Some(event) = self.snapshot(false).await.capability_event(name) {
            return Some(event);
        }
        self.snapshot(true).await.capability_event(name)
    }

    /// The registry snapshot (a stale one if the registry cannot be read; nothing is enforced
    /// before the first successful read), read again when older than the refresh interval. A
    /// `force`d snapshot is one read after this call began: callers missing at once share one
    /// registry read.
    async fn snapshot(&self, force: bool) -> Arc<Snapshot> {
        let asked = Instant::now();
        if !force && let Some(fresh) = self.fresh() {
            return fresh;
        }
        let _reading = self.reading.lock().await;
        if force {
            if let Some(read) = self.read_since(asked) {
                return read;
            }
        } else if let Some(fresh) = self.fresh() {
            return fresh;
        }
        let started = Instant::now();
        match self.registry.agents().await {
            Ok(agents) => {
                let snapshot = Arc::new(Snapshot::of(agents));
                let mut cache = self.lock();
                cache.fetched = Some(started);
                cache.snapshot = snapshot.clone();
                snapshot
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the registry; requests are checked against the last snapshot read");
                self.lock().snapshot.clone()
            }
        }
    }

    /// The snapshot, if its registry read started at or after `asked`.
    fn read_since(&self, asked: Instant) -> Option<Arc<Snapshot>> {
        let cache = self.lock();
        cache
            .fetched
            .filter(|started| *started >= asked)
            .map(|_| cache.snapshot.clone())
    }

    fn fresh(&self) -> Option<Arc<Snapshot>> {
        let cache = self.lock();
        cache
            .fetched
            .filter(|at| at.elapsed() < self.refresh)
            .map(|_| cache.snapshot.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(feature = "schema-validation")]
    fn violations(&self, event: &str, schema: &Arc<Value>, data: &Value) -> Vec<SchemaViolation> {
        let validator = {
            let mut cache = self.lock();
            match cache.compiled.get_mut(event) {
                // Compared by pointer while the snapshot is the same (no deep comparison per
                // request); a new snapshot with the same schema keeps the compiled validator.
                Some(c) if Arc::ptr_eq(&c.schema, schema) => c.validator.clone(),
                Some(c) if *c.schema == **schema => {
                    c.schema = schema.clone();
                    c.validator.clone()
                }
                _ => {
                    let validator = match compile(schema) {
                        Ok(v) => Some(Arc::new(v)),
                        Err(e) => {
                            tracing::warn!(event_type = %event, error = %e, "the registered payload schema is not a valid JSON Schema; not enforced");
                            None
                        }
                    };
                    cache.compiled.insert(
                        event.to_owned(),
                        Compiled {
                            schema: schema.clone(),
                            validator: validator.clone(),
                        },
                    );
                    validator
                }
            }
        };
        let Some(validator) = validator else {
            return Vec::new();
        };
        // Every violation is collected only for a payload that has some.
        if validator.is_valid(data) {
            return Vec::new();
        }
        validator
            .iter_errors(data)
            .map(|e| SchemaViolation::new(e.instance_path().to_string(), e.to_string()))
            .collect()
    }

    #[cfg(not(feature = "schema-validation"))]
    fn violations(&self, _: &str, _: &Arc<Value>, _: &Value) -> Vec<SchemaViolation> {
        Vec::new()
    }
}

/// Compiles a JSON Schema (a registered payload schema) into a validator; the error says why
/// it is not a valid JSON Schema.
#[cfg(feature = "schema-validation")]
pub(crate) fn compile(
    schema: &Value,
) -> std::result::Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    jsonschema::validator_for(schema)
}

/// Event type → payload schema, from each capability's consumed event. When several agents
/// consume one event, the first by agent name that registered a schema wins.
/// What the registry says about action requests, read at one moment.
#[derive(Default)]
struct Snapshot {
    /// Event type → the payload schema its consumer registered.
    schemas: HashMap<String, Arc<Value>>,
    /// Event type → the tenants whose requests of it a registered agent serves (`None`: all).
    consumers: HashMap<String, Vec<Option<String>>>,
    /// Capability task name → the request event it consumes (the first agent by name wins).
    by_task_name: HashMap<String, String>,
}

impl Snapshot {
    fn of(agents: Vec<AgentDefinition>) -> Self {
        let mut consumers: HashMap<String, Vec<Option<String>>> = HashMap::new();
        for agent in &agents {
            let events = agent
                .capabilities
                .iter()
                .map(|c| &c.consumed_event)
                .chain(agent.consumed_events.iter())
                .filter(|e| e.topic == Topic::ActionRequests);
            for event in events {
                consumers
                    .entry(event.event_name.clone())
                    .or_default()
                    .push(agent.tenant_id.clone());
            }
        }
        let mut by_task_name = HashMap::new();
        let mut sorted: Vec<&AgentDefinition> = agents.iter().collect();
        sorted.sort_by(|a, b| (&a.name, &a.agent_id).cmp(&(&b.name, &b.agent_id)));
        for cap in sorted.iter().flat_map(|a| a.capabilities.iter()) {
            if cap.consumed_event.topic == Topic::ActionRequests {
                by_task_name
                    .entry(cap.task_name.clone())
                    .or_insert_with(|| cap.consumed_event.event_name.clone());
            }
        }
        Self {
            schemas: payload_schemas(agents),
            consumers,
            by_task_name,
        }
    }

    /// The request event of the capability `name` names: its task name, or the event itself.
    fn capability_event(&self, name: &str) -> Option<String> {
        self.by_task_name
            .get(name)
            .cloned()
            .or_else(|| self.consumers.contains_key(name).then(|| name.to_owned()))
    }

    fn consumes(&self, event: &str, tenant: &str) -> bool {
        self.consumers.get(event).is_some_and(|tenants| {
            tenants
                .iter()
                .any(|t| t.as_deref().is_none_or(|t| t == tenant))
        })
    }
}

fn payload_schemas(mut agents: Vec<AgentDefinition>) -> HashMap<String, Arc<Value>> {
    agents.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then_with(|| a.agent_id.cmp(&b.agent_id))
    });
    let mut schemas = HashMap::new();
    for agent in agents {
        for cap in agent.capabilities {
            let event = cap.consumed_event;
            if event.topic != Topic::ActionRequests {
                continue;
            }
            if let Some(schema) = event.payload_schema {
                schemas
                    .entry(event.event_name)
                    .or_insert_with(|| Arc::new(schema));
            }
        }
    }
    schemas
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::util::BoxFuture;

    /// A registry of no agents whose reads take a while and are counted.
    #[derive(Default)]
    struct SlowRegistry {
        reads: AtomicUsize,
    }

    impl Registry for SlowRegistry {
        fn register(&self, _agent: AgentDefinition) -> BoxFuture<'_, Result<()>> {
            Box::pin(async { Ok(()) })
        }

        fn deregister<'a>(&'a self, _agent_id: &'a str) -> BoxFuture<'a, Result<()>> {
            Box::pin(async { Ok(()) })
        }

        fn agents(&self) -> BoxFuture<'_, Result<Vec<AgentDefinition>>> {
            Box::pin(async {
                self.reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(Vec::new())
            })
        }
    }

    #[tokio::test]
    async fn callers_missing_at_once_share_one_registry_read() {
        let registry = Arc::new(SlowRegistry::default());
        let validator = Arc::new(RequestValidator::new(registry.clone()));
        let mut misses = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let validator = validator.clone();
            misses
                .spawn(async move { validator.has_consumer("nobody.requested", "default").await });
        }
        while let Some(found) = misses.join_next().await {
            assert!(!found.unwrap());
        }
        // One read for the snapshot, one more (after the misses began) for all ten misses.
        assert_eq!(registry.reads.load(Ordering::SeqCst), 2);

        // A miss after that reads again: an agent may have registered since.
        assert!(!validator.has_consumer("nobody.requested", "default").await);
        assert_eq!(registry.reads.load(Ordering::SeqCst), 3);
    }
}
