//! The embedded platform, tested as a product: tools, workers, agents, bad input, tenancy,
//! competing consumers, graceful shutdown, registry definitions and envelope propagation.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma::{ActionReply, EventEnvelope, TaskStatus};

const WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculate {
    expression: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
struct Calculated {
    result: f64,
}

/// Evaluates an arithmetic expression.
#[on_invoke("calculate.requested", agent = "calculator")]
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    if req.data.expression == "panic" {
        panic!("calculator exploded");
    }
    soorma_examples::calc::eval(&req.data.expression)
        .map(|result| Calculated { result })
        .map_err(|e| ToolError::new(e.to_string()))
}

async fn wait_until(cond: impl Fn() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition not reached in time");
}

fn reply_of(env: &EventEnvelope) -> ActionReply {
    serde_json::from_value(env.data.clone()).expect("reply shape")
}

#[tokio::test]
async fn tool_replies_on_the_callers_response_event_with_success_and_error() {
    let mut t = TestPlatform::new();
    t.start(Tool::new("calculator")).await.unwrap();
    let client = t.client();

    let ok: Calculated = client
        .invoke(
            "calculate.requested",
            json!({"expression": "6 * 7"}),
            "my.answer",
        )
        .await
        .unwrap();
    assert_eq!(ok, Calculated { result: 42.0 });

    let err = client
        .invoke::<Calculated>(
            "calculate.requested",
            json!({"expression": "1/0"}),
            "my.answer",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { message, .. } if message == "division by zero"),
        "{err}"
    );

    // The reply went out on the caller-named event, on action-results, correlated.
    let replies = t.events_of_type("my.answer");
    assert_eq!(replies.len(), 2);
    let request = &t.events_of_type("calculate.requested")[0];
    assert_eq!(replies[0].topic, Topic::ActionResults);
    assert_eq!(replies[0].correlation_id, request.correlation_id);
    assert_eq!(replies[0].source, "calculator");
    let reply = reply_of(&replies[0]);
    assert_eq!(reply.request_id, request.id);
    assert!(reply.success);
    assert!(!reply_of(&replies[1]).success);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn tool_replies_on_a_custom_response_topic() {
    let mut t = TestPlatform::new();
    t.start(Tool::new("calculator")).await.unwrap();
    let reply = t
        .client()
        .request(
            "calculate.requested",
            json!({"expression": "1+1"}),
            "calc.done",
        )
        .response_topic(Topic::NotificationEvents)
        .await
        .unwrap();
    assert_eq!(reply.envelope.topic, Topic::NotificationEvents);
    assert_eq!(reply.into_result::<Calculated>().unwrap().result, 2.0);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn panicking_tool_replies_with_an_error_and_keeps_serving() {
    let mut t = TestPlatform::new();
    t.start(Tool::new("calculator")).await.unwrap();
    let client = t.client();
    let err = client
        .invoke::<Calculated>("calculate.requested", json!({"expression": "panic"}), "r")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("handler panicked: calculator exploded"),
        "{err}"
    );
    let ok: Calculated = client
        .invoke("calculate.requested", json!({"expression": "2"}), "r")
        .await
        .unwrap();
    assert_eq!(ok.result, 2.0);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn malformed_payload_gets_a_typed_error_reply_naming_event_type_and_path() {
    let mut t = TestPlatform::new();
    t.start(Tool::new("calculator")).await.unwrap();
    let client = t.client();
    let err = client
        .invoke::<Calculated>("calculate.requested", json!({"expression": 12}), "r")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("invalid payload for event `calculate.requested`"),
        "{msg}"
    );
    assert!(msg.contains("Calculate"), "names the Rust type: {msg}");
    assert!(
        msg.contains("at `expression`"),
        "names the serde path: {msg}"
    );

    let missing = client
        .invoke::<Calculated>("calculate.requested", json!({"nope": true}), "r")
        .await
        .unwrap_err();
    assert!(
        missing.to_string().contains("missing field `expression`"),
        "{missing}"
    );

    // Dead-lettered with the reason, and the agent keeps serving.
    let dl = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert_eq!(dl.topic, Topic::SystemEvents);
    assert_eq!(dl.data["agent"], "calculator");
    assert!(dl.data["reason"].as_str().unwrap().contains("expression"));
    let ok: Calculated = client
        .invoke("calculate.requested", json!({"expression": "3"}), "r")
        .await
        .unwrap();
    assert_eq!(ok.result, 3.0);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn request_without_response_event_is_handled_without_reply_or_crash() {
    let mut t = TestPlatform::new();
    t.start(Tool::new("calculator")).await.unwrap();
    let bus = t.client().bus();
    // A raw request missing response_event, published as an envelope.
    let env = EventEnvelope::new("raw-1", "raw", Topic::ActionRequests, "calculate.requested")
        .with_data(json!({"expression": "1"}));
    bus.publish_envelope(env).await.unwrap();
    // The bus API refuses to build such a request.
    let err = bus
        .request("calculate.requested", json!({}), "")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let err = bus.respond("x.done", json!({}), " ").await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    // Still serving.
    let ok: Calculated = t
        .client()
        .invoke("calculate.requested", json!({"expression": "4"}), "r")
        .await
        .unwrap();
    assert_eq!(ok.result, 4.0);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn agent_without_handlers_fails_loudly() {
    let platform = Platform::embedded();
    let err = Tool::new("nobody-registered-this")
        .start(&platform)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoHandlers { .. }), "{err}");
    assert!(err.to_string().contains("has no handlers"));
}

#[derive(Clone)]
struct Greeting(String);

async fn greet(req: Invocation<String>, State(g): State<Greeting>) -> Result<String, ToolError> {
    Ok(format!("{} {}", g.0, req.data))
}

#[tokio::test]
async fn typed_state_extractor_and_misconfiguration_errors() {
    let platform = Platform::embedded();
    // Missing state and a duplicate handler are reported together.
    let err = Tool::new("greeter")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("greet.requested", greet))
        .handler(Handler::on_invoke("greet.requested", greet))
        .start(&platform)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("State<") && msg.contains("Greeting") && msg.contains(".with_state"),
        "{msg}"
    );
    assert!(msg.contains("both handle `greet.requested`"), "{msg}");

    let tool = Tool::new("greeter")
        .use_registered_handlers(false)
        .with_state(Greeting("hello".into()))
        .handler(Handler::on_invoke("greet.requested", greet))
        .start(&platform)
        .await
        .unwrap();
    let s: String = platform
        .client("c")
        .invoke("greet.requested", "ada", "greeted")
        .await
        .unwrap();
    assert_eq!(s, "hello ada");
    tool.shutdown().await.unwrap();
}

#[tokio::test]
async fn registry_definition_carries_capabilities_and_schemas() {
    let platform = Platform::embedded();
    let tool = Tool::new("calculator")
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

#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

async fn count_invoke(req: Invocation<u32>, State(c): State<Counter>) -> Result<u32, ToolError> {
    c.0.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Ok(req.data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_of_one_agent_share_work_and_different_agents_each_get_events() {
    let platform = Platform::embedded();
    let (a, b) = (Counter::default(), Counter::default());
    let mk = |c: &Counter| {
        Tool::new("worker-pool")
            .use_registered_handlers(false)
            .with_state(c.clone())
            .handler(Handler::on_invoke("work.requested", count_invoke))
    };
    let ia = mk(&a).start(&platform).await.unwrap();
    let ib = mk(&b).start(&platform).await.unwrap();
    let client = platform.client("c");
    let calls: Vec<_> = (0..200u32)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(
                async move { client.invoke::<u32>("work.requested", i, "work.done").await },
            )
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(c.await.unwrap().unwrap(), i as u32);
    }
    let (na, nb) = (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst));
    assert_eq!(na + nb, 200, "each request handled exactly once");
    assert!(na > 0 && nb > 0, "both instances took work: {na} / {nb}");

    // Different agents subscribed to the same event each receive it.
    let (x, y) = (Counter::default(), Counter::default());
    async fn seen(_e: Event, State(c): State<Counter>) {
        c.0.fetch_add(1, Ordering::SeqCst);
    }
    let mk_agent = |name: &str, c: &Counter| {
        Agent::new(name)
            .use_registered_handlers(false)
            .with_state(c.clone())
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "thing.happened",
                seen,
            ))
    };
    let ax = mk_agent("x", &x).start(&platform).await.unwrap();
    let ay = mk_agent("y", &y).start(&platform).await.unwrap();
    for _ in 0..10 {
        client
            .bus()
            .announce("thing.happened", json!({}))
            .await
            .unwrap();
    }
    wait_until(|| x.0.load(Ordering::SeqCst) == 10 && y.0.load(Ordering::SeqCst) == 10).await;
    for agent in [ia, ib, ax, ay] {
        agent.shutdown().await.unwrap();
    }
    assert_eq!(
        (x.0.load(Ordering::SeqCst), y.0.load(Ordering::SeqCst)),
        (10, 10),
        "and no more"
    );
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_handlers_then_stops_taking_events() {
    let t = TestPlatform::new();
    async fn slow(req: Invocation<u64>) -> Result<u64, ToolError> {
        tokio::time::sleep(Duration::from_millis(req.data)).await;
        Ok(req.data)
    }
    let handle = Tool::new("slow")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("slow.requested", slow))
        .start(t.platform())
        .await
        .unwrap();
    let bus = t.client().bus();
    bus.request("slow.requested", 200, "slow.done")
        .await
        .unwrap();
    t.expect_matching(|_| false, Duration::from_millis(30), "nothing")
        .await
        .unwrap_err(); // let it start
    handle.shutdown().await.unwrap();
    assert_eq!(
        t.events_of_type("slow.done").len(),
        1,
        "the in-flight handler finished and replied"
    );
    bus.request("slow.requested", 1, "slow.done").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        t.events_of_type("slow.done").len(),
        1,
        "no events taken after shutdown"
    );
}

#[tokio::test]
async fn envelope_fields_propagate_from_the_handled_event() {
    let mut t = TestPlatform::new();
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
    let relayed = t.expect_event("relayed", WAIT).await.unwrap();
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

#[tokio::test]
async fn retryable_event_handler_errors_are_redelivered_then_dead_lettered() {
    let mut t = TestPlatform::new();
    async fn flaky(_e: Event, State(c): State<Counter>) -> Result<(), ToolError> {
        let n = c.0.fetch_add(1, Ordering::SeqCst);
        if n < 2 {
            Err(ToolError::new("busy").retryable())
        } else {
            Ok(())
        }
    }
    async fn broken(_e: Event) -> Result<(), ToolError> {
        Err(ToolError::new("cannot ever work"))
    }
    let c = Counter::default();
    t.start(
        Agent::new("flaky")
            .use_registered_handlers(false)
            .with_state(c.clone())
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "flaky.event",
                flaky,
            ))
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "broken.event",
                broken,
            )),
    )
    .await
    .unwrap();
    let bus = t.client().bus();
    bus.announce("flaky.event", json!({})).await.unwrap();
    bus.announce("broken.event", json!({})).await.unwrap();
    let dl = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert_eq!(dl.data["event_type"], "broken.event");
    assert_eq!(
        dl.data["attempt"], 1,
        "non-retryable errors are not retried"
    );
    wait_until(|| c.0.load(Ordering::SeqCst) == 3).await; // two retryable failures, then success
    assert_eq!(t.events_of_type("event.dead_lettered").len(), 1);
    t.shutdown().await.unwrap();
}

// ---- Worker: delegate, fan-out, fan-in ----

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Job {
    items: Vec<String>,
}

/// Fans out one `upper.requested` per item (same event type for all).
#[on_task("batch.requested", agent = "batcher")]
async fn batch(mut task: TaskContext<Job>) -> soorma::Result<()> {
    let delegations: Vec<Delegation> = task
        .data
        .items
        .iter()
        .map(|item| Delegation::new("upper.requested", item, "upper.completed"))
        .collect();
    task.delegate_parallel(delegations).await?;
    task.progress(0.5, "fanned out").await
}

#[on_result("upper.completed", agent = "batcher")]
async fn batch_collect(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let out: Vec<Value> = all
            .into_iter()
            .map(|s| s.result.unwrap_or_default())
            .collect();
        task.complete(out).await?;
    }
    Ok(())
}

#[on_invoke("upper.requested", agent = "upper")]
async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    if req.data == "fail" {
        return Err(ToolError::new("refusing to shout"));
    }
    Ok(req.data.to_uppercase())
}

#[tokio::test]
async fn fan_out_with_repeated_event_type_keeps_sub_tasks_distinct_and_in_order() {
    let mut t = TestPlatform::new();
    t.start(Worker::new("batcher")).await.unwrap();
    t.start(Tool::new("upper")).await.unwrap();
    let out: Vec<String> = t
        .client()
        .invoke(
            "batch.requested",
            json!({"items": ["a", "b", "a", "c"]}),
            "batch.completed",
        )
        .await
        .unwrap();
    assert_eq!(out, ["A", "B", "A", "C"]);
    let progress = t.expect_event("task.progress", WAIT).await.unwrap();
    assert_eq!(progress.topic, Topic::SystemEvents);
    assert_eq!(progress.data["agent"], "batcher");
    assert_eq!(progress.data["progress"], 0.5);
    // The sub-task requests carried distinct correlation ids.
    let reqs = t.events_of_type("upper.requested");
    let mut ids: Vec<_> = reqs
        .iter()
        .map(|r| r.correlation_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failed_sub_task_is_recorded_as_failed_in_the_group() {
    let mut t = TestPlatform::new();
    t.start(Worker::new("batcher")).await.unwrap();
    t.start(Tool::new("upper")).await.unwrap();
    let out: Vec<Value> = t
        .client()
        .invoke(
            "batch.requested",
            json!({"items": ["ok", "fail"]}),
            "batch.completed",
        )
        .await
        .unwrap();
    assert_eq!(out, [json!("OK"), Value::Null]);
    t.shutdown().await.unwrap();
}

/// Chains two delegations sequentially: upper, then reverse, then completes.
#[on_task("chain.requested", agent = "chainer")]
async fn chain(mut task: TaskContext<String>) -> soorma::Result<()> {
    let input = task.data.clone();
    task.set_state("step", "upper")?;
    task.delegate("upper.requested", input, "chain.upper.done")
        .await?;
    Ok(())
}

#[on_result("chain.upper.done", agent = "chainer")]
async fn chain_upper(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(
        task.state_value::<String>("step")?.as_deref(),
        Some("upper")
    );
    let upper = result.data.clone().unwrap_or_default();
    task.set_state("step", "reverse")?;
    task.delegate("reverse.requested", upper, "chain.reverse.done")
        .await?;
    Ok(())
}

#[on_result("chain.reverse.done", agent = "chainer")]
async fn chain_reverse(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(task.sub_tasks().await?.len(), 2);
    task.complete(json!({"final": result.data, "step": task.state_value::<String>("step")?}))
        .await?;
    Ok(())
}

#[on_invoke("reverse.requested", agent = "reverser")]
async fn reverse(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data.chars().rev().collect())
}

#[tokio::test]
async fn sequential_delegation_chains_through_saved_task_state() {
    let mut t = TestPlatform::new();
    for a in [
        Worker::new("chainer"),
        Tool::new("upper"),
        Tool::new("reverser"),
    ] {
        t.start(a).await.unwrap();
    }
    let out: Value = t
        .client()
        .invoke("chain.requested", "abc", "chain.completed")
        .await
        .unwrap();
    assert_eq!(out, json!({"final": "CBA", "step": "reverse"}));
    t.shutdown().await.unwrap();
}

#[on_task("explode.requested", agent = "exploder")]
async fn explode(task: TaskContext<u32>) -> soorma::Result<()> {
    if task.data == 0 {
        panic!("task handler exploded");
    }
    Err(Error::Handler(format!("cannot do {}", task.data)))
}

#[tokio::test]
async fn task_handler_errors_and_panics_fail_the_task_with_an_error_reply() {
    let mut t = TestPlatform::new();
    t.start(Worker::new("exploder")).await.unwrap();
    let client = t.client();
    let e1 = client
        .invoke::<Value>("explode.requested", 7, "explode.done")
        .await
        .unwrap_err();
    assert!(e1.to_string().contains("cannot do 7"), "{e1}");
    let e2 = client
        .invoke::<Value>("explode.requested", 0, "explode.done")
        .await
        .unwrap_err();
    assert!(e2.to_string().contains("task handler exploded"), "{e2}");
    // The failed task is recorded.
    let reqs = t.events_of_type("explode.requested");
    let state = t.platform().state();
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", reqs[0].id.clone());
    let stored = state.get(&key).await.unwrap().unwrap();
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    t.shutdown().await.unwrap();
}

// ---- Fan-in atomicity and duplicates ----

const FAN: usize = 1_000;

/// Fans out to an event nobody serves; the test plays the sub-agents.
#[on_task("big.requested", agent = "fan-in")]
async fn big(mut task: TaskContext<u32>) -> soorma::Result<()> {
    let d: Vec<Delegation> = (0..task.data)
        .map(|i| Delegation::new("ghost.requested", &i, "ghost.completed"))
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

#[on_result("ghost.completed", agent = "fan-in")]
async fn ghost_done(result: ResultContext<i64>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let values: Vec<Value> = all
            .into_iter()
            .map(|s| s.result.unwrap_or_default())
            .collect();
        task.complete(values).await?;
    }
    Ok(())
}

fn result_for(request: &EventEnvelope, value: i64, tenant: Option<&str>) -> EventEnvelope {
    let mut env = EventEnvelope::new(
        format!("res-{}-{value}", request.id),
        "ghost",
        Topic::ActionResults,
        "ghost.completed",
    )
    .with_correlation_id(request.correlation_id.clone().unwrap())
    .with_data(serde_json::to_value(ActionReply::success(&request.id, json!(value))).unwrap());
    if let Some(t) = tenant {
        env = env.with_tenant_id(t);
    }
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_fan_in_of_1000_results_completes_exactly_once_with_all_results() {
    let mut t = TestPlatform::new();
    t.start(Worker::new("fan-in")).await.unwrap();
    let client = t.client();
    client
        .bus()
        .request("big.requested", FAN as u32, "big.completed")
        .await
        .unwrap();
    wait_until(|| t.events_of_type("ghost.requested").len() == FAN).await;
    let requests = t.events_of_type("ghost.requested");

    // Every result delivered twice, all at once, from many tasks.
    let bus = client.bus();
    let mut sends = Vec::new();
    for copy in 0..2 {
        for req in &requests {
            let value: i64 = serde_json::from_value(req.data.clone()).unwrap();
            let mut env = result_for(req, value, None);
            if copy == 1 {
                env.id = format!("{}-dup", env.id);
            }
            let bus = bus.clone();
            sends.push(tokio::spawn(async move { bus.publish_envelope(env).await }));
        }
    }
    for s in sends {
        s.await.unwrap().unwrap();
    }
    let done = t.expect_event("big.completed", WAIT * 4).await.unwrap();
    // Give stragglers (duplicates) time to be handled, then check nothing else completed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        t.events_of_type("big.completed").len(),
        1,
        "exactly one completion"
    );
    let reply = reply_of(&done);
    let mut values: Vec<i64> = serde_json::from_value(reply.result.unwrap()).unwrap();
    assert_eq!(values.len(), FAN);
    assert_eq!(
        values,
        (0..FAN as i64).collect::<Vec<_>>(),
        "results in delegation order"
    );
    values.dedup();
    assert_eq!(values.len(), FAN);

    // A late duplicate with a different value changes nothing.
    bus.publish_envelope(result_for(&requests[0], 999_999, None))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(t.events_of_type("big.completed").len(), 1);
    let task_id = t.events_of_type("big.requested")[0].id.clone();
    let key = soorma::state::StateKey::new(soorma::TASKS_BUCKET, "default", task_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::TaskRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, TaskStatus::Completed);
    assert_eq!(record.groups.len(), 1);
    assert!(
        record
            .groups
            .values()
            .all(|g| g.size == FAN as u32 && g.finished == FAN as u32)
    );
    let sub_key = soorma::state::StateKey::new(
        soorma::SUBTASKS_BUCKET,
        "default",
        requests[0].correlation_id.clone().unwrap(),
    );
    let first = t.platform().state().get(&sub_key).await.unwrap().unwrap();
    let first: soorma::SubTaskInfo = serde_json::from_slice(&first.value).unwrap();
    assert_eq!(
        first.result,
        Some(json!(0)),
        "the late duplicate did not overwrite the result"
    );
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn tenants_never_see_each_others_state_or_events() {
    let mut t = TestPlatform::new();
    t.start(Worker::new("fan-in")).await.unwrap();
    let a = t.client().with_tenant("tenant-a");
    a.bus()
        .request("big.requested", 1u32, "big.completed")
        .tenant_id("tenant-a")
        .await
        .unwrap();
    let req = t.expect_event("ghost.requested", WAIT).await.unwrap();
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
    let dl = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
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
    let done = t.expect_event("big.completed", WAIT).await.unwrap();
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
    wait_until(|| seen.0.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(seen.0.load(Ordering::SeqCst), 1);
    t.shutdown().await.unwrap();
}
