//! What only the embedded platform does: attribute-registered (inventory) handlers in a test
//! binary, and a test platform observing a platform it did not create. The product scenarios
//! run on it (and on NATS) in `scenarios/`.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use soorma::prelude::*;
use soorma::testing::TestPlatform;

const WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Square {
    n: i64,
}

/// Squares a number.
#[on_invoke("square.requested", agent = "squarer")]
async fn square(req: Invocation<Square>) -> Result<i64, ToolError> {
    req.data
        .n
        .checked_mul(req.data.n)
        .ok_or_else(|| ToolError::new("overflow"))
}

/// Doubles every item, then sums the doubles.
#[on_task("sum.doubles.requested", agent = "summer")]
async fn sum_doubles(mut task: TaskContext<Vec<i64>>) -> soorma::Result<()> {
    let d: Vec<Delegation> = task
        .data
        .iter()
        .map(|n| Delegation::new("square.requested", &json!({"n": n}), "squared"))
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

#[on_result("squared", agent = "summer")]
async fn squared(result: ResultContext<i64>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let sum: i64 = all.iter().filter_map(|s| s.result.as_ref()?.as_i64()).sum();
        task.complete(sum).await?;
    }
    Ok(())
}

#[tokio::test]
async fn attribute_registered_handlers_run_and_describe_themselves() {
    let mut t = TestPlatform::new();
    let tool = t.start(Tool::new("squarer")).await.unwrap();
    let cap = &tool.definition().capabilities[0];
    assert_eq!(cap.description, "Squares a number.");
    assert_eq!(
        cap.consumed_event.payload_schema.as_ref().unwrap()["properties"]["n"]["type"],
        "integer"
    );
    t.start(Worker::new("summer")).await.unwrap();
    let sum: i64 = t
        .client()
        .invoke("sum.doubles.requested", [1, 2, 3], "sum.done")
        .await
        .unwrap();
    assert_eq!(sum, 14);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn test_platform_can_observe_any_platform() {
    let mut t = TestPlatform::with_platform(Platform::embedded())
        .await
        .unwrap();
    t.start(Tool::new("squarer")).await.unwrap();
    let n: i64 = t
        .client()
        .invoke("square.requested", json!({"n": 9}), "sq")
        .await
        .unwrap();
    assert_eq!(n, 81);
    let reply = t.expect_event("sq", WAIT).await.unwrap();
    assert_eq!(reply.source, "squarer");
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once() {
    use soorma::EngineParts;
    use soorma::embedded::{EmbeddedBus, MemoryRegistry, MemoryStore};
    use std::sync::Arc;

    // Every "process" is a platform on the same in-memory bus, store and registry.
    let (bus, store, registry) = (
        EmbeddedBus::new(),
        MemoryStore::new(),
        MemoryRegistry::new(),
    );
    let platform = move || {
        let parts = EngineParts::new(
            "embedded",
            Arc::new(bus.clone()),
            Arc::new(store.clone()),
            Arc::new(registry.clone()),
        );
        async move { Platform::from_parts(parts) }
    };
    soorma_tests::restarts::human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once(
        platform, WAIT,
    )
    .await;
}

/// Meant for the `squarer`, but its agent name is misspelt.
#[on_invoke("cube.requested", agent = "sqaurer")]
async fn cube(req: Invocation<Square>) -> Result<i64, ToolError> {
    Ok(req.data.n.pow(3))
}

#[tokio::test]
async fn a_misspelt_agent_name_on_an_attribute_fails_the_group_naming_it() {
    let platform = Platform::embedded();
    let started = std::time::Instant::now();
    let err = Agents::new()
        .tool("squarer", handlers![square])
        .worker("summer", handlers![sum_doubles, squared])
        .start(&platform)
        .await
        .unwrap_err();
    let Error::Misconfigured { problems, .. } = &err else {
        panic!("expected Misconfigured, got {err}");
    };
    assert!(
        problems.iter().any(|p| p.contains("`cube`")
            && p.contains(
                "names agent `sqaurer` (did you mean `squarer`?), which this group does not start"
            )),
        "{problems:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Nothing started.
    assert!(platform.discovery().all().await.unwrap().is_empty());
}

/// A state store counting the writes (create, update, put) of each bucket.
#[derive(Clone, Default)]
struct CountingStore {
    inner: soorma::embedded::MemoryStore,
    writes: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<&'static str, usize>>>,
}

impl CountingStore {
    fn count(&self, key: &soorma::state::StateKey) {
        *self.writes.lock().unwrap().entry(key.bucket).or_default() += 1;
    }

    fn writes(&self, bucket: &str) -> usize {
        self.writes
            .lock()
            .unwrap()
            .get(bucket)
            .copied()
            .unwrap_or(0)
    }
}

impl soorma::state::StateStore for CountingStore {
    fn get<'a>(
        &'a self,
        key: &'a soorma::state::StateKey,
    ) -> soorma::BoxFuture<'a, soorma::Result<Option<soorma::state::Versioned<Vec<u8>>>>> {
        self.inner.get(key)
    }
    fn create<'a>(
        &'a self,
        key: &'a soorma::state::StateKey,
        value: Vec<u8>,
    ) -> soorma::BoxFuture<'a, soorma::Result<soorma::state::Revision>> {
        self.count(key);
        self.inner.create(key, value)
    }
    fn update<'a>(
        &'a self,
        key: &'a soorma::state::StateKey,
        value: Vec<u8>,
        expected: soorma::state::Revision,
    ) -> soorma::BoxFuture<'a, soorma::Result<soorma::state::Revision>> {
        self.count(key);
        self.inner.update(key, value, expected)
    }
    fn put<'a>(
        &'a self,
        key: &'a soorma::state::StateKey,
        value: Vec<u8>,
    ) -> soorma::BoxFuture<'a, soorma::Result<soorma::state::Revision>> {
        self.count(key);
        self.inner.put(key, value)
    }
    fn delete<'a>(
        &'a self,
        key: &'a soorma::state::StateKey,
    ) -> soorma::BoxFuture<'a, soorma::Result<()>> {
        self.inner.delete(key)
    }
    fn keys<'a>(
        &'a self,
        bucket: &'static str,
        tenant: &'a str,
    ) -> soorma::BoxFuture<'a, soorma::Result<Vec<String>>> {
        self.inner.keys(bucket, tenant)
    }
    fn tenants<'a>(
        &'a self,
        bucket: &'static str,
    ) -> soorma::BoxFuture<'a, soorma::Result<Vec<String>>> {
        self.inner.tenants(bucket)
    }
}

/// A fan-out/fan-in of 1,000 costs state writes per delegation group and per batch of
/// results, not per sub-task: one group record, and per batch one results chunk and one
/// update of the task (each chunk written is one the task lists).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fan_in_writes_state_per_group_and_per_batch_of_results_not_per_sub_task() {
    use soorma::EngineParts;
    use soorma::embedded::{EmbeddedBus, MemoryRegistry};
    use std::sync::Arc;

    const FAN: usize = 1_000;
    let store = CountingStore::default();
    let platform = Platform::from_parts(EngineParts::new(
        "embedded",
        Arc::new(EmbeddedBus::new()),
        Arc::new(store.clone()),
        Arc::new(MemoryRegistry::new()),
    ));
    let mut t = TestPlatform::with_platform(platform).await.unwrap();
    t.start(soorma_tests::agents::fan_in()).await.unwrap();
    let client = t.client();
    client
        .bus()
        .request("big.requested", FAN as u32, "big.completed")
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while t.events_of_type("ghost.requested").len() < FAN {
        assert!(std::time::Instant::now() < deadline, "not fanned out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (tasks_before, subtasks_before) = (
        store.writes(soorma::TASKS_BUCKET),
        store.writes(soorma::SUBTASKS_BUCKET),
    );
    assert_eq!(subtasks_before, 1, "the group's record, once");
    let bus = client.bus();
    let sends: Vec<_> = t
        .events_of_type("ghost.requested")
        .iter()
        .map(|req| {
            let value: i64 = serde_json::from_value(req.data.clone()).unwrap();
            let env = soorma_tests::agents::result_for(req, value, None);
            let bus = bus.clone();
            tokio::spawn(async move { bus.publish_envelope(env).await })
        })
        .collect();
    for s in sends {
        s.await.unwrap().unwrap();
    }
    t.expect_event("big.completed", WAIT * 4).await.unwrap();
    let task_id = t.events_of_type("big.requested")[0].id.clone();
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", task_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    let listed: usize = record.groups.values().map(|g| g.chunks.len()).sum();
    let chunk_writes = store.writes(soorma::SUBTASKS_BUCKET) - subtasks_before;
    let task_writes = store.writes(soorma::TASKS_BUCKET) - tasks_before;
    // A batch's chunk is `<group>-r…`; merges of 16 of them write `-m…` and `-f…` chunks.
    let stored = t
        .platform()
        .state()
        .keys(soorma::SUBTASKS_BUCKET, "default")
        .await
        .unwrap();
    let batches = stored.iter().filter(|k| k.contains("-g0-r")).count();
    println!(
        "{FAN} results: {batches} batches, {chunk_writes} chunk writes ({listed} listed), \
         {task_writes} task writes"
    );
    // Small results: each merge writes one chunk for 16.
    assert!(
        chunk_writes - batches <= batches / 15,
        "{} merges for {batches} batches",
        chunk_writes - batches
    );
    assert!(listed <= batches, "{listed} listed for {batches} batches");
    // One task update per batch, plus completing the task and marking its reply sent.
    assert!(
        task_writes <= batches + 3,
        "{task_writes} task writes for {batches} batches"
    );
    assert!(
        chunk_writes + task_writes < FAN / 2,
        "{chunk_writes} + {task_writes} writes for {FAN} results"
    );
    t.shutdown().await.unwrap();
}
