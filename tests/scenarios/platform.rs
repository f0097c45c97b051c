//! Platform-wide behaviour: the registry and discovery, schema validation before publishing,
//! envelope fields carried from event to event, and tenant isolation.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::agents::{Calculated, batcher, calculator, fan_in, research_planner, result_for};

use crate::support::{Counter, wait_until};

scenario!(registry_definition_carries_capabilities_and_schemas);
async fn registry_definition_carries_capabilities_and_schemas(t: TestPlatform, _wait: Duration) {
    let platform = t.platform().clone();
    let tool = calculator()
        .version("2.1.0")
        .start(&platform)
        .await
        .unwrap();
    let found = platform
        .discovery()
        .by_consumed_event("calculate.requested")
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    let def = &found[0];
    assert_eq!(
        (def.name.as_str(), def.version.as_str()),
        ("calculator", "2.1.0")
    );
    let cap = &def.capabilities[0];
    assert_eq!(cap.description, "Evaluates an arithmetic expression.");
    let payload = cap.consumed_event.payload_schema.as_ref().unwrap();
    assert_eq!(payload["properties"]["expression"]["type"], "string");
    let response = cap.consumed_event.response_schema.as_ref().unwrap();
    assert_eq!(response["properties"]["result"]["type"], "number");
    let produced = &cap.produced_events[0];
    assert_eq!(produced.event_name, "calculate.completed");
    assert_eq!(
        produced.payload_schema.as_ref().unwrap()["properties"]["result"]["properties"]["result"]["type"],
        "number"
    );
    assert_eq!(
        platform
            .discovery()
            .by_capability("calculate.requested")
            .await
            .unwrap()
            .len(),
        1
    );
    tool.shutdown().await.unwrap();
    assert!(
        platform.discovery().all().await.unwrap().is_empty(),
        "deregistered on shutdown"
    );
}

scenario!(discovery_finds_agents_by_requirements_with_their_schemas);
async fn discovery_finds_agents_by_requirements_with_their_schemas(
    mut t: TestPlatform,
    _wait: Duration,
) {
    use soorma::AgentKind;
    use soorma::registry::Requirements;
    t.start(calculator()).await.unwrap();
    t.start(batcher()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let discovery = t.platform().discovery();
    let tools = discovery
        .discover(&Requirements::new().kind(AgentKind::Tool))
        .await
        .unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "calculator");
    let cap = &tools[0].capabilities[0];
    assert_eq!(cap.description, "Evaluates an arithmetic expression.");
    // Consumed events: capabilities, and the events of #[on_result] handlers.
    let by_result = discovery
        .discover(&Requirements::new().consumes("upper.completed"))
        .await
        .unwrap();
    assert_eq!(by_result[0].name, "batcher");
    let planners = discovery
        .discover(
            &Requirements::new()
                .consumes("research.goal")
                .kind(AgentKind::Planner),
        )
        .await
        .unwrap();
    assert_eq!(planners[0].name, "research-planner");
    assert!(
        discovery
            .discover(
                &Requirements::new()
                    .capability("calculate.requested")
                    .kind(AgentKind::Worker)
            )
            .await
            .unwrap()
            .is_empty()
    );
    // The request and reply schemas come from the handlers' Rust types.
    let request = discovery
        .request_schema("calculate.requested")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(request["required"], json!(["expression"]));
    assert_eq!(
        request["properties"]["precision"]["description"],
        "Decimal places of the result (default: all)."
    );
    let reply = discovery
        .response_schema("calculate.requested")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply["required"], json!(["result"]));
    let produced = &cap.produced_events[0];
    assert_eq!(produced.topic, Topic::ActionResults);
    assert!(produced.payload_schema.is_some());
    t.shutdown().await.unwrap();
}

scenario!(requests_are_checked_against_the_consumers_schema_before_publishing);
async fn requests_are_checked_against_the_consumers_schema_before_publishing(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    t.start(
        Worker::new("forwarder")
            .use_registered_handlers(false)
            .handler(Handler::on_task("forward.requested", forward))
            .handler(Handler::on_result("forward.calculated", forward_done)),
    )
    .await
    .unwrap();
    let client = t.client();
    // Every violation, with its JSON path; nothing is published.
    let err = client
        .invoke::<Calculated>(
            "calculate.requested",
            json!({"expression": 12, "precision": "high"}),
            "r",
        )
        .await
        .unwrap_err();
    let Error::SchemaViolation { event, violations } = &err else {
        panic!("expected a schema violation, got {err}");
    };
    assert_eq!(event, "calculate.requested");
    let paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
    assert!(paths.contains(&"/expression"), "{err}");
    assert!(paths.contains(&"/precision"), "{err}");
    assert!(err.to_string().contains("at `/expression`"), "{err}");
    let missing = client
        .invoke::<Calculated>("calculate.requested", json!({}), "r")
        .await
        .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("\"expression\" is a required property"),
        "{missing}"
    );
    // A delegation breaking the schema fails the task before anything is saved or published.
    let failed = client
        .invoke::<Value>(
            "forward.requested",
            json!({"expression": false}),
            "forward.done",
        )
        .await
        .unwrap_err();
    assert!(
        failed.to_string().contains("does not match the schema"),
        "{failed}"
    );
    // A valid delegation goes through.
    let ok: Value = client
        .invoke(
            "forward.requested",
            json!({"expression": "6*7"}),
            "forward.done",
        )
        .await
        .unwrap();
    assert_eq!(ok["result"], 42.0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let published: Vec<_> = t.events_of_type("calculate.requested");
    assert_eq!(published.len(), 1, "only the valid request was published");
    assert_eq!(published[0].data["expression"], "6*7");
    // Unknown events are published unchecked; opting out publishes anyway.
    client
        .bus()
        .request("nobody.requested", json!({"any": "thing"}), "nobody.done")
        .await
        .unwrap();
    client
        .bus()
        .request("calculate.requested", json!({"expression": 1}), "r")
        .skip_validation()
        .await
        .unwrap();
    t.expect_matching(
        |e| e.event_type == "calculate.requested" && e.data["expression"] == 1,
        wait,
        "the unchecked request",
    )
    .await
    .unwrap();
    t.shutdown().await.unwrap();
}

async fn forward(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let data = task.data.clone();
    task.delegate_with(Delegation::new(
        "calculate.requested",
        &data,
        "forward.calculated",
    ))
    .await?;
    Ok(())
}

async fn forward_done(result: ResultContext<Calculated>) -> soorma::Result<()> {
    let mut task = result.parent().await?;
    let value = result.data.clone();
    task.complete(value).await?;
    Ok(())
}

scenario!(envelope_fields_propagate_from_the_handled_event);
async fn envelope_fields_propagate_from_the_handled_event(mut t: TestPlatform, wait: Duration) {
    async fn relay(event: Event) -> soorma::Result<()> {
        event.bus().announce("relayed", event.data.clone()).await?;
        Ok(())
    }
    t.start(
        Agent::new("relay")
            .use_registered_handlers(false)
            .handler(Handler::on_event(Topic::BusinessFacts, "original", relay)),
    )
    .await
    .unwrap();
    let client = t
        .client()
        .with_tenant("acme")
        .with_user("u1")
        .with_session("s1");
    let id = client
        .publish(Topic::BusinessFacts, "original", json!({"n": 1}))
        .await
        .unwrap();
    let relayed = t.expect_event("relayed", wait).await.unwrap();
    let original = t.events_of_type("original")[0].clone();
    assert_eq!(original.id, id);
    assert_eq!(relayed.source, "relay");
    assert_eq!(relayed.tenant_id.as_deref(), Some("acme"));
    assert_eq!(relayed.user_id.as_deref(), Some("u1"));
    assert_eq!(relayed.session_id.as_deref(), Some("s1"));
    assert_eq!(relayed.trace_id, original.trace_id);
    assert!(relayed.trace_id.is_some());
    assert_eq!(relayed.parent_event_id.as_deref(), Some(id.as_str()));
    assert!(relayed.time.as_deref().is_some_and(|t| t.ends_with('Z')));
    t.shutdown().await.unwrap();
}

scenario!(tenants_never_see_each_others_state_or_events);
async fn tenants_never_see_each_others_state_or_events(mut t: TestPlatform, wait: Duration) {
    t.start(fan_in()).await.unwrap();
    let a = t.client().with_tenant("tenant-a");
    a.bus()
        .request("big.requested", 1u32, "big.completed")
        .tenant_id("tenant-a")
        .await
        .unwrap();
    let req = t.expect_event("ghost.requested", wait).await.unwrap();
    assert_eq!(
        req.tenant_id.as_deref(),
        Some("tenant-a"),
        "delegations inherit the tenant"
    );
    let task_id = t.events_of_type("big.requested")[0].id.clone();
    let state = t.platform().state().clone();
    let key_a = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "tenant-a", task_id.clone());
    let key_b = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "tenant-b", task_id.clone());
    assert!(state.get(&key_a).await.unwrap().is_some());
    assert!(
        state.get(&key_b).await.unwrap().is_none(),
        "tenant B cannot read tenant A's task"
    );

    // A result claiming the sub-task from tenant B is rejected (dead-lettered), not recorded.
    t.client()
        .bus()
        .publish_envelope(result_for(&req, 5, Some("tenant-b")))
        .await
        .unwrap();
    let dl = t.expect_event("event.dead_lettered", wait).await.unwrap();
    assert!(
        dl.data["reason"]
            .as_str()
            .unwrap()
            .contains("no parent task"),
        "{}",
        dl.data
    );
    assert!(t.events_of_type("big.completed").is_empty());
    // The genuine tenant-A result completes it.
    t.client()
        .bus()
        .publish_envelope(result_for(&req, 5, Some("tenant-a")))
        .await
        .unwrap();
    let done = t.expect_event("big.completed", wait).await.unwrap();
    assert_eq!(done.tenant_id.as_deref(), Some("tenant-a"));

    // An agent serving tenant B never receives tenant A's events.
    let seen = Counter::default();
    async fn count(_e: Event, State(c): State<Counter>) {
        c.0.fetch_add(1, Ordering::SeqCst);
    }
    t.start(
        Agent::new("b-only")
            .tenant("tenant-b")
            .use_registered_handlers(false)
            .with_state(seen.clone())
            .handler(Handler::on_event(Topic::BusinessFacts, "*", count)),
    )
    .await
    .unwrap();
    a.publish(Topic::BusinessFacts, "private.fact", json!({}))
        .await
        .unwrap();
    t.client()
        .with_tenant("tenant-b")
        .publish(Topic::BusinessFacts, "public.fact", json!({}))
        .await
        .unwrap();
    wait_until(wait, || seen.0.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(wait / 20).await;
    assert_eq!(seen.0.load(Ordering::SeqCst), 1);
    t.shutdown().await.unwrap();
}
