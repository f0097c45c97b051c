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
