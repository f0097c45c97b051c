//! Validation of action requests against the payload schema their consumer registered.
//!
//! `request`, `invoke` and `delegate` look up the requested event in the registry (a read at
//! most [`REFRESH`] old, from the platform's shared [`AgentsSnapshot`]) and, when a consumer
//! registered a payload schema for it, validate the payload before publishing: a mismatch
//! fails the call with [`Error::SchemaViolation`] listing every violation, and nothing is
//! published. Events no
//! registered agent describes are published unchecked. Opt out per call with
//! `skip_validation()`, or build without the `schema-validation` feature.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use soorma_common::{EventEnvelope, Topic};

use super::snapshot::{AgentsSnapshot, PerRead, Read};
use crate::error::{Error, Result, SchemaViolation};

/// How old a registry read may be for a request's check to use it.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// Validates requests against the schemas in the registry, from the platform's shared
/// registry snapshot ([`AgentsSnapshot`]).
pub(crate) struct RequestValidator {
    agents: AgentsSnapshot,
    /// How old a read may be for a check ([`REFRESH`]).
    refresh: Duration,
    /// What the last registry read that succeeded says about action requests.
    tables: PerRead<Snapshot>,
    /// Event type → its schema's compiled validator.
    #[cfg(feature = "schema-validation")]
    compiled: std::sync::Mutex<HashMap<String, Compiled>>,
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
    pub(crate) fn new(agents: AgentsSnapshot) -> Self {
        Self {
            agents,
            refresh: REFRESH,
            tables: PerRead::default(),
            #[cfg(feature = "schema-validation")]
            compiled: std::sync::Mutex::default(),
        }
    }

    /// The same, checking against reads at most `refresh` old (the tests' short refresh).
    #[cfg(test)]
    fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
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

    /// What the registry says about action requests: from a read at most [`REFRESH`] old, or
    /// (`current`) one begun after this call. When the registry cannot be read, the last read
    /// that succeeded; before the first, an empty registry (no schema enforced, no consumer
    /// found). Derived once per read taken, and only from a read newer than the one it has.
    async fn snapshot(&self, current: bool) -> Arc<Snapshot> {
        let read = if current {
            self.agents.current().await
        } else {
            if let Some((read, tables)) = self.tables.last()
                && read.began().elapsed() <= self.refresh
            {
                return tables;
            }
            self.agents.recent(self.refresh).await
        };
        match read {
            Ok(read) => self.tables.of(read, Snapshot::of),
            Err(e) => {
                // The failed read itself is logged once, where it ran.
                tracing::debug!(error = %e, "requests are checked against the last registry read that succeeded");
                self.tables
                    .last()
                    .map(|(_, tables)| tables)
                    .unwrap_or_default()
            }
        }
    }

    #[cfg(feature = "schema-validation")]
    fn violations(&self, event: &str, schema: &Arc<Value>, data: &Value) -> Vec<SchemaViolation> {
        let validator = {
            let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
            match compiled.get_mut(event) {
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
                    compiled.insert(
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
    fn of(agents: &Read) -> Self {
        let mut consumers: HashMap<String, Vec<Option<String>>> = HashMap::new();
        for agent in agents.iter() {
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
        // Where several agents name one capability or schema, the first by name (then id) wins:
        // a read lists them in that order.
        let (mut by_task_name, mut schemas) = (HashMap::new(), HashMap::new());
        for cap in agents.iter().flat_map(|a| a.capabilities.iter()) {
            let event = &cap.consumed_event;
            if event.topic != Topic::ActionRequests {
                continue;
            }
            by_task_name
                .entry(cap.task_name.clone())
                .or_insert_with(|| event.event_name.clone());
            if let Some(schema) = &event.payload_schema {
                schemas
                    .entry(event.event_name.clone())
                    .or_insert_with(|| Arc::new(schema.clone()));
            }
        }
        Self {
            schemas,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use soorma_common::{AgentCapability, AgentDefinition, AgentKind, EventDefinition};

    use super::*;
    use crate::platform::test_registries::Counting;
    use crate::spi::registry::Registry;

    /// A platform on `registry`: its shared snapshot and its own request checks.
    fn platform_validator(registry: &Arc<Counting>) -> (AgentsSnapshot, Arc<RequestValidator>) {
        let platform = crate::platform::Platform::from_parts(crate::engine::EngineParts::new(
            "embedded",
            Arc::new(crate::engine::embedded::EmbeddedBus::new()),
            Arc::new(crate::engine::embedded::MemoryStore::new()),
            registry.clone(),
        ));
        (platform.agents().clone(), platform.validator().clone())
    }

    /// Request checks on a platform's snapshot, answering from a read while under 60 s old
    /// (so that counted reads do not depend on how fast the test runs).
    fn validator(registry: &Arc<Counting>) -> (AgentsSnapshot, Arc<RequestValidator>) {
        let (agents, _) = platform_validator(registry);
        let validator = RequestValidator::new(agents.clone()).with_refresh(Duration::from_secs(60));
        (agents, Arc::new(validator))
    }

    /// `test`, failed when it does not end within 10 s (instead of hanging).
    async fn within<T>(test: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), test)
            .await
            .expect("the test ends within 10 s")
    }

    #[tokio::test]
    async fn callers_missing_at_once_share_registry_reads() {
        within(async {
            let registry = Arc::new(Counting::default());
            let (_, validator) = validator(&registry);
            let mut misses = tokio::task::JoinSet::new();
            for _ in 0..10 {
                let validator = validator.clone();
                misses.spawn(
                    async move { validator.has_consumer("nobody.requested", "default").await },
                );
            }
            while let Some(found) = misses.join_next().await {
                assert!(!found.unwrap());
            }
            // One read for the snapshot; the ten misses each need a read begun after they missed:
            // the first miss starts one, and the others (missing a moment after it began) share
            // the next.
            let reads = registry.listings.load(Ordering::SeqCst);
            assert!(reads <= 3, "ten callers made {reads} registry reads");

            // A miss after that reads again: an agent may have registered since.
            assert!(!validator.has_consumer("nobody.requested", "default").await);
            assert_eq!(registry.listings.load(Ordering::SeqCst), reads + 1);
        })
        .await;
    }

    /// The registry `calc` (consuming `add.requested`, whose payload must have an `a`) is in.
    async fn with_calc() -> Arc<Counting> {
        let registry = Arc::new(Counting::default());
        let schema = serde_json::json!({"type": "object", "required": ["a"]});
        let add = AgentCapability::new(
            "add",
            EventDefinition::new("add.requested", Topic::ActionRequests)
                .with_payload_schema(schema),
        );
        registry
            .register(AgentDefinition::new("calc-1", "calc", AgentKind::Tool).with_capability(add))
            .await
            .unwrap();
        registry
    }

    fn add_request(data: Value) -> EventEnvelope {
        EventEnvelope::new("r1", "client", Topic::ActionRequests, "add.requested").with_data(data)
    }

    fn refused(checked: Result<()>) -> bool {
        matches!(checked, Err(Error::SchemaViolation { .. }))
            || !cfg!(feature = "schema-validation")
    }

    #[tokio::test]
    async fn requests_are_checked_from_the_platforms_shared_read() {
        within(async {
            let registry = with_calc().await;
            let (agents, validator) = platform_validator(&registry);

            // A read made by another user of the snapshot (the gateway, the MCP server) serves
            // the request checks: no read of their own.
            assert_eq!(agents.current().await.unwrap().len(), 1);
            assert!(validator.has_consumer("add.requested", "default").await);
            assert_eq!(
                validator.capability_event("add").await.as_deref(),
                Some("add.requested")
            );
            let good = add_request(serde_json::json!({"a": 1}));
            assert!(validator.check(&good).await.is_ok());
            assert!(refused(
                validator
                    .check(&add_request(serde_json::json!({"b": 1})))
                    .await
            ));
            assert_eq!(registry.listings.load(Ordering::SeqCst), 1);
        })
        .await;
    }

    #[tokio::test]
    async fn a_newer_read_replaces_what_requests_are_checked_against() {
        within(async {
            let registry = Arc::new(Counting::default());
            let (_, validator) = validator(&registry);
            assert!(
                validator
                    .check(&add_request(serde_json::json!({"b": 1})))
                    .await
                    .is_ok()
            );
            let empty = registry.listings.load(Ordering::SeqCst);

            // calc registers: its consumer is found (a miss reads again), and from then on its
            // schema is enforced, without a read per request.
            let calc = with_calc().await;
            let agents = calc.agents.lock().unwrap().clone();
            registry.agents.lock().unwrap().extend(agents);
            assert!(validator.has_consumer("add.requested", "default").await);
            let bad = add_request(serde_json::json!({"b": 1}));
            for _ in 0..10 {
                assert!(refused(validator.check(&bad).await));
            }
            assert_eq!(registry.listings.load(Ordering::SeqCst), empty + 1);
        })
        .await;
    }

    #[tokio::test]
    async fn a_registry_that_cannot_be_read_leaves_the_last_good_read_in_force() {
        within(async {
            let registry = with_calc().await;
            // Every check reads the registry again (no read is young enough).
            let agents =
                AgentsSnapshot::new(crate::platform::discovery::Discovery::new(registry.clone()));
            let validator = RequestValidator::new(agents).with_refresh(Duration::ZERO);
            assert!(validator.has_consumer("add.requested", "default").await);

            registry.failing.store(true, Ordering::SeqCst);
            let before = registry.listings.load(Ordering::SeqCst);
            let bad = add_request(serde_json::json!({"b": 1}));
            assert!(refused(validator.check(&bad).await));
            assert!(validator.has_consumer("add.requested", "default").await);
            assert_eq!(
                validator.capability_event("add").await.as_deref(),
                Some("add.requested")
            );
            // Those answers came after failed reads, not from a young read.
            assert!(registry.listings.load(Ordering::SeqCst) >= before + 3);
        })
        .await;
    }
}
