//! Platform-independent product scenarios: each takes a fresh [`TestPlatform`] (embedded or
//! NATS) and the patience to use, and asserts the same behaviour on both.
//!
//! Handlers are registered with the builder API so the scenarios do not depend on which
//! attribute-registered handlers a test binary links.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use soorma::AgentBuilder;
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma::{ActionReply, EventEnvelope, TaskStatus};

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculate {
    expression: String,
    /// Decimal places of the result (default: all).
    #[serde(default)]
    precision: Option<u8>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
struct Calculated {
    result: f64,
}

/// Evaluates an arithmetic expression.
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    if req.data.expression == "panic" {
        panic!("calculator exploded");
    }
    soorma_examples::calc::eval(&req.data.expression)
        .map(|result| match req.data.precision {
            Some(p) => (result * 10f64.powi(p.into())).round() / 10f64.powi(p.into()),
            None => result,
        })
        .map(|result| Calculated { result })
        .map_err(|e| ToolError::new(e.to_string()))
}

async fn wait_until(wait: Duration, cond: impl Fn() -> bool) {
    tokio::time::timeout(wait, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition not reached in time");
}

/// The calculator tool.
pub fn calculator() -> AgentBuilder {
    Tool::new("calculator")
        .use_registered_handlers(false)
        .handler(
            Handler::on_invoke("calculate.requested", calculate)
                .with_description("Evaluates an arithmetic expression."),
        )
}

/// A worker fanning out one `upper.requested` per item.
pub fn batcher() -> AgentBuilder {
    Worker::new("batcher")
        .use_registered_handlers(false)
        .handler(Handler::on_task("batch.requested", batch))
        .handler(Handler::on_result("upper.completed", batch_collect))
}

/// A tool upper-casing text.
pub fn upper_tool() -> AgentBuilder {
    Tool::new("upper")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("upper.requested", upper))
}

/// A worker chaining two delegations.
pub fn chainer() -> AgentBuilder {
    Worker::new("chainer")
        .use_registered_handlers(false)
        .handler(Handler::on_task("chain.requested", chain))
        .handler(Handler::on_result("chain.upper.done", chain_upper))
        .handler(Handler::on_result("chain.reverse.done", chain_reverse))
}

/// A tool reversing text.
pub fn reverser() -> AgentBuilder {
    Tool::new("reverser")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("reverse.requested", reverse))
}

/// A worker whose task handler fails or panics.
pub fn exploder() -> AgentBuilder {
    Worker::new("exploder")
        .use_registered_handlers(false)
        .handler(Handler::on_task("explode.requested", explode))
}

/// A worker fanning out to an event nobody serves (the test plays the sub-agents).
pub fn fan_in() -> AgentBuilder {
    Worker::new("fan-in")
        .use_registered_handlers(false)
        .handler(Handler::on_task("big.requested", big))
        .handler(Handler::on_result("ghost.completed", ghost_done))
}

fn reply_of(env: &EventEnvelope) -> ActionReply {
    serde_json::from_value(env.data.clone()).expect("reply shape")
}

pub async fn tool_replies_on_the_callers_response_event_with_success_and_error(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
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
    wait_until(wait, || t.events_of_type("my.answer").len() == 2).await;
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

pub async fn tool_replies_on_a_custom_response_topic(mut t: TestPlatform, _wait: Duration) {
    t.start(calculator()).await.unwrap();
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

pub async fn panicking_tool_replies_with_an_error_and_keeps_serving(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(calculator()).await.unwrap();
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

pub async fn malformed_payload_gets_a_typed_error_reply_naming_event_type_and_path(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let client = t.client();
    // A sender that does not check schemas (another SDK, or `skip_validation`).
    let unchecked = |data: Value| {
        client
            .request("calculate.requested", data, "r")
            .skip_validation()
    };
    let err = unchecked(json!({"expression": 12}))
        .await
        .unwrap()
        .into_result::<Calculated>()
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

    let missing = unchecked(json!({"nope": true}))
        .await
        .unwrap()
        .into_result::<Calculated>()
        .unwrap_err();
    assert!(
        missing.to_string().contains("missing field `expression`"),
        "{missing}"
    );

    // Dead-lettered with the reason, and the agent keeps serving.
    let dl = t.expect_event("event.dead_lettered", wait).await.unwrap();
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

pub async fn requests_are_checked_against_the_consumers_schema_before_publishing(
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
    task.complete(value).await.map(drop)
}

pub async fn request_without_response_event_is_handled_without_reply_or_crash(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(calculator()).await.unwrap();
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

pub async fn agent_without_handlers_fails_loudly(t: TestPlatform, _wait: Duration) {
    let platform = t.platform().clone();
    let err = Tool::new("nobody-registered-this")
        .use_registered_handlers(false)
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

pub async fn typed_state_extractor_and_misconfiguration_errors(t: TestPlatform, _wait: Duration) {
    let platform = t.platform().clone();
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

pub async fn registry_definition_carries_capabilities_and_schemas(
    t: TestPlatform,
    _wait: Duration,
) {
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

#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

async fn count_invoke(req: Invocation<u32>, State(c): State<Counter>) -> Result<u32, ToolError> {
    c.0.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Ok(req.data)
}

pub async fn instances_of_one_agent_share_work_and_different_agents_each_get_events(
    t: TestPlatform,
    wait: Duration,
) {
    let platform = t.platform().clone();
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
    wait_until(wait, || {
        x.0.load(Ordering::SeqCst) == 10 && y.0.load(Ordering::SeqCst) == 10
    })
    .await;
    for agent in [ia, ib, ax, ay] {
        agent.shutdown().await.unwrap();
    }
    assert_eq!(
        (x.0.load(Ordering::SeqCst), y.0.load(Ordering::SeqCst)),
        (10, 10),
        "and no more"
    );
}

pub async fn graceful_shutdown_finishes_in_flight_handlers_then_stops_taking_events(
    t: TestPlatform,
    wait: Duration,
) {
    async fn slow(req: Invocation<u64>, State(started): State<Counter>) -> Result<u64, ToolError> {
        started.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(req.data)).await;
        Ok(req.data)
    }
    let started = Counter::default();
    let handle = Tool::new("slow")
        .use_registered_handlers(false)
        .with_state(started.clone())
        .handler(Handler::on_invoke("slow.requested", slow))
        .start(t.platform())
        .await
        .unwrap();
    let bus = t.client().bus();
    bus.request("slow.requested", 300, "slow.done")
        .await
        .unwrap();
    wait_until(wait, || started.0.load(Ordering::SeqCst) == 1).await;
    assert!(t.events_of_type("slow.done").is_empty(), "still in flight");
    handle.shutdown().await.unwrap();
    t.expect_event("slow.done", wait)
        .await
        .expect("the in-flight handler finished and replied");
    bus.request("slow.requested", 1, "slow.done").await.unwrap();
    tokio::time::sleep(wait / 20).await;
    assert_eq!(
        t.events_of_type("slow.done").len(),
        1,
        "no events taken after shutdown"
    );
}

pub async fn envelope_fields_propagate_from_the_handled_event(mut t: TestPlatform, wait: Duration) {
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

pub async fn retryable_event_handler_errors_are_redelivered_then_dead_lettered(
    mut t: TestPlatform,
    wait: Duration,
) {
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
    let dl = t.expect_event("event.dead_lettered", wait).await.unwrap();
    assert_eq!(dl.data["event_type"], "broken.event");
    assert_eq!(
        dl.data["attempt"], 1,
        "non-retryable errors are not retried"
    );
    wait_until(wait, || c.0.load(Ordering::SeqCst) == 3).await; // two retryable failures, then success
    assert_eq!(t.events_of_type("event.dead_lettered").len(), 1);
    t.shutdown().await.unwrap();
}

// ---- Worker: delegate, fan-out, fan-in ----

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Job {
    items: Vec<String>,
}

/// Fans out one `upper.requested` per item (same event type for all).
async fn batch(mut task: TaskContext<Job>) -> soorma::Result<()> {
    let delegations: Vec<Delegation> = task
        .data
        .items
        .iter()
        // The NATS restart tests start the tool after the batcher delegates to it: the
        // requests wait in their stream until it runs.
        .map(|item| {
            Delegation::new("upper.requested", item, "upper.completed").skip_consumer_check()
        })
        .collect();
    task.delegate_parallel(delegations).await?;
    task.progress(0.5, "fanned out").await
}

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

async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    if req.data == "fail" {
        return Err(ToolError::new("refusing to shout"));
    }
    Ok(req.data.to_uppercase())
}

pub async fn fan_out_with_repeated_event_type_keeps_sub_tasks_distinct_and_in_order(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(batcher()).await.unwrap();
    t.start(upper_tool()).await.unwrap();
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
    let progress = t.expect_event("task.progress", wait).await.unwrap();
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

pub async fn a_failed_sub_task_is_recorded_as_failed_in_the_group(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(batcher()).await.unwrap();
    t.start(upper_tool()).await.unwrap();
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
async fn chain(mut task: TaskContext<String>) -> soorma::Result<()> {
    let input = task.data.clone();
    task.set_state("step", "upper")?;
    task.delegate_with(Delegation::new(
        "upper.requested",
        &input,
        "chain.upper.done",
    ))
    .await?;
    Ok(())
}

async fn chain_upper(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(
        task.state_value::<String>("step")?.as_deref(),
        Some("upper")
    );
    let upper = result.data.clone().unwrap_or_default();
    task.set_state("step", "reverse")?;
    task.delegate_with(Delegation::new(
        "reverse.requested",
        &upper,
        "chain.reverse.done",
    ))
    .await?;
    Ok(())
}

async fn chain_reverse(result: ResultContext<String>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    assert_eq!(task.sub_tasks().await?.len(), 2);
    task.complete(json!({"final": result.data, "step": task.state_value::<String>("step")?}))
        .await?;
    Ok(())
}

async fn reverse(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data.chars().rev().collect())
}

pub async fn sequential_delegation_chains_through_saved_task_state(
    mut t: TestPlatform,
    _wait: Duration,
) {
    for a in [chainer(), upper_tool(), reverser()] {
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

async fn explode(task: TaskContext<u32>) -> soorma::Result<()> {
    if task.data == 0 {
        panic!("task handler exploded");
    }
    Err(Error::Handler(format!("cannot do {}", task.data)))
}

pub async fn task_handler_errors_and_panics_fail_the_task_with_an_error_reply(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(exploder()).await.unwrap();
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
async fn big(mut task: TaskContext<u32>) -> soorma::Result<()> {
    let d: Vec<Delegation> = (0..task.data)
        .map(|i| Delegation::new("ghost.requested", &i, "ghost.completed").skip_consumer_check())
        .collect();
    task.delegate_parallel(d).await?;
    Ok(())
}

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
        format!("res-{}-{value}-{}", request.id, tenant.unwrap_or("default")),
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

pub async fn concurrent_fan_in_of_1000_results_completes_exactly_once_with_all_results(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(fan_in()).await.unwrap();
    let client = t.client();
    client
        .bus()
        .request("big.requested", FAN as u32, "big.completed")
        .await
        .unwrap();
    wait_until(wait, || t.events_of_type("ghost.requested").len() == FAN).await;
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
    let done = t.expect_event("big.completed", wait * 4).await.unwrap();
    // Give stragglers (duplicates) time to be handled, then check nothing else completed.
    tokio::time::sleep(wait / 10).await;
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
    tokio::time::sleep(wait / 20).await;
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
        Some(requests[0].data.clone()),
        "the late duplicate did not overwrite the result"
    );
    t.shutdown().await.unwrap();
}

pub async fn tenants_never_see_each_others_state_or_events(mut t: TestPlatform, wait: Duration) {
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

/// Invokes `$m!(scenario, ...)` with every scenario, so each platform's test file lists them all.
#[macro_export]
macro_rules! for_each_scenario {
    ($m:ident) => {
        $m!(
            tool_replies_on_the_callers_response_event_with_success_and_error,
            tool_replies_on_a_custom_response_topic,
            panicking_tool_replies_with_an_error_and_keeps_serving,
            malformed_payload_gets_a_typed_error_reply_naming_event_type_and_path,
            requests_are_checked_against_the_consumers_schema_before_publishing,
            request_without_response_event_is_handled_without_reply_or_crash,
            agent_without_handlers_fails_loudly,
            typed_state_extractor_and_misconfiguration_errors,
            registry_definition_carries_capabilities_and_schemas,
            instances_of_one_agent_share_work_and_different_agents_each_get_events,
            graceful_shutdown_finishes_in_flight_handlers_then_stops_taking_events,
            envelope_fields_propagate_from_the_handled_event,
            retryable_event_handler_errors_are_redelivered_then_dead_lettered,
            fan_out_with_repeated_event_type_keeps_sub_tasks_distinct_and_in_order,
            a_failed_sub_task_is_recorded_as_failed_in_the_group,
            sequential_delegation_chains_through_saved_task_state,
            task_handler_errors_and_panics_fail_the_task_with_an_error_reply,
            concurrent_fan_in_of_1000_results_completes_exactly_once_with_all_results,
            tenants_never_see_each_others_state_or_events,
            planner_runs_its_state_machine_with_conditions_and_templates,
            planner_pauses_and_resumes_with_input,
            discovery_finds_agents_by_requirements_with_their_schemas,
            planner_asks_a_person_and_handles_the_answer_and_the_timeout,
            worker_asks_a_person_and_handles_the_answer_and_the_timeout,
            llm_planner_calls_a_tool_then_completes_and_unknown_events_go_back_to_the_model,
            llm_planner_waits_for_an_event_then_fails_with_the_models_reason,
            llm_planner_delegates_the_goal_to_another_planner_whose_reply_ends_it,
            llm_planner_that_keeps_publishing_is_stopped_at_its_action_limit,
            llm_written_plan_is_validated_fixed_and_run_as_a_state_machine,
            sessions_group_plans_and_plans_are_listed_by_session_and_status,
            a_sub_plan_reports_its_completion_into_the_parent_plan,
            tracker_answers_where_a_plan_is_what_happened_and_which_tasks_ran,
        );
    };
}

// ---------------------------------------------------------------------------------------------
// Planner
// ---------------------------------------------------------------------------------------------

async fn search(req: Invocation<Value>) -> Result<Value, ToolError> {
    let q = req.data["q"].as_str().unwrap_or_default().to_owned();
    if q == "broken" {
        return Err(ToolError::new("the search index is down"));
    }
    let items: Vec<String> = if q == "nothing" {
        Vec::new()
    } else {
        vec![format!("{q} book"), format!("{q} blog")]
    };
    Ok(json!({"count": items.len(), "items": items}))
}

async fn analyze(req: Invocation<Value>) -> Result<Value, ToolError> {
    let items = req.data["items"].as_array().cloned().unwrap_or_default();
    Ok(
        json!({"summary": format!("{} sources about {}", items.len(), req.data["topic"].as_str().unwrap_or("?"))}),
    )
}

/// Search and analysis tools for the planner scenarios.
pub fn research_tools() -> AgentBuilder {
    Tool::new("research-tools")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("search.requested", search))
        .handler(Handler::on_invoke("analyze.requested", analyze))
}

/// search → analyze → done, or → no_results (a failed terminal state) when nothing is found;
/// `approval` inserts a state the plan pauses in until `approval.given`.
pub fn research_plan(approval: bool) -> soorma::planner::Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let after_search = if approval { "approving" } else { "analyzing" };
    let mut def = PlanDefinition::new("research", "search, analyze, report")
        .with_state(
            StateConfig::new("start", "search the topic")
                .with_action(
                    StateAction::new("search.requested", "search.completed")
                        .with_data(json!({"q": "{{goal.topic}}"})),
                )
                .with_transition(
                    StateTransition::new("search.completed", after_search)
                        .with_condition("data.success && data.result.count > 0"),
                )
                .with_transition(
                    StateTransition::new("search.completed", "no_results")
                        .with_condition("data.success && data.result.count == 0"),
                ),
        )
        .with_state(
            StateConfig::new("analyzing", "analyze what was found")
                .with_action(
                    StateAction::new("analyze.requested", "analyze.completed").with_data(json!({
                        "items": "{{results.start.items}}",
                        "topic": "{{goal.topic}}"
                    })),
                )
                .with_transition(StateTransition::new("analyze.completed", "done")),
        )
        .with_state(
            StateConfig::new("done", "report")
                .terminal()
                .with_result(json!({
                    "summary": "{{results.analyzing.summary}}",
                    "found": "{{results.start.count}}",
                    "note": "found {{results.start.count}} sources"
                })),
        )
        .with_state(
            StateConfig::new("no_results", "nothing found")
                .failed()
                .with_result(json!("nothing found for {{goal.topic}}")),
        );
    if approval {
        def = def.with_state(
            StateConfig::new("approving", "a person approves the analysis")
                .with_transition(StateTransition::new("approval.given", "analyzing")),
        );
    }
    soorma::planner::Plan::new(def).expect("a valid plan")
}

async fn research_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await.map(drop)
}

/// A planner whose plan pauses in `approving` until `approval.given` resumes it.
async fn research_transition(mut plan: PlanContext) -> soorma::Result<()> {
    let trigger = plan.trigger().cloned().expect("a trigger");
    if trigger.event_type == "approval.given" && plan.status() == soorma::common::PlanStatus::Paused
    {
        plan.resume(trigger.data.clone()).await?;
    }
    plan.execute_next().await?;
    if plan.current_state() == "approving" && plan.status() == soorma::common::PlanStatus::Running {
        plan.pause("waiting for approval").await?;
    }
    Ok(())
}

/// The research planner (with the default transition handler, or the approval one).
pub fn research_planner(approval: bool) -> AgentBuilder {
    let mut planner = Planner::new("research-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(research_plan(approval)))
        .handler(Handler::on_goal("research.goal", research_goal));
    if approval {
        planner = planner.handler(Handler::on_transition(research_transition));
    }
    planner
}

pub async fn planner_runs_its_state_machine_with_conditions_and_templates(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let client = t.client().with_timeout(wait);
    let report: Value = client
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    assert_eq!(
        report,
        json!({"summary": "2 sources about rust", "found": 2, "note": "found 2 sources"})
    );
    // The analysis got the search's items through the template (an array, not a string).
    let analyze = t.expect_event("analyze.requested", wait).await.unwrap();
    assert_eq!(analyze.data["items"], json!(["rust book", "rust blog"]));
    // The other branch: a condition sends the plan to a failed terminal state.
    let err = client
        .invoke::<Value>(
            "research.goal",
            json!({"topic": "nothing"}),
            "research.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nothing found for nothing"),
        "{err}"
    );
    // An action that fails with no transition for it fails the plan with its error.
    let err = client
        .invoke::<Value>("research.goal", json!({"topic": "broken"}), "research.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the search index is down"),
        "{err}"
    );
    // Lifecycle events on system-events, and the persisted plan.
    let completed = t.expect_event("plan.completed", wait).await.unwrap();
    assert_eq!(completed.topic, Topic::SystemEvents);
    let plan_id = completed.data["plan_id"].as_str().unwrap().to_owned();
    let changes: Vec<_> = t
        .events_of_type("plan.state_changed")
        .into_iter()
        .filter(|e| e.data["plan_id"] == plan_id.as_str())
        .map(|e| e.data["to"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(changes, ["start", "analyzing", "done"]);
    assert_eq!(t.events_of_type("plan.failed").len(), 2);
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(record.current_state, "done");
    assert!(record.reply_sent);
    assert_eq!(record.history.len(), 3);
    t.shutdown().await.unwrap();
}

pub async fn planner_pauses_and_resumes_with_input(mut t: TestPlatform, wait: Duration) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(true)).await.unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("research.goal", json!({"topic": "tea"}), "research.done")
                .await
        }
    });
    let paused = t.expect_event("plan.paused", wait).await.unwrap();
    let plan_id = paused.data["plan_id"].as_str().unwrap().to_owned();
    assert_eq!(paused.data["reason"], "waiting for approval");
    // A stray event while paused is kept, not lost, and moves nothing.
    client
        .bus()
        .publish(Topic::ActionResults, "unrelated.noise", json!({}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!goal.is_finished());
    // The approval resumes it.
    client
        .bus()
        .publish(Topic::ActionResults, "approval.given", json!({"by": "ada"}))
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let report = goal.await.unwrap().unwrap();
    assert_eq!(report["summary"], "2 sources about tea");
    t.expect_event("plan.resumed", wait).await.unwrap();
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", &plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    let record: soorma::common::PlanRecord = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(record.results["user_input"], json!({"by": "ada"}));
    assert!(record.deferred.is_empty());
    t.shutdown().await.unwrap();
}

pub async fn discovery_finds_agents_by_requirements_with_their_schemas(
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

async fn draft(req: Invocation<Value>) -> Result<Value, ToolError> {
    Ok(json!({"text": format!("A post about {}", req.data["topic"].as_str().unwrap_or("?"))}))
}

/// draft → approving (a person answers, or the question times out) → published | rejected | expired.
pub fn approval_plan() -> soorma::planner::Plan {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    soorma::planner::Plan::new(
        PlanDefinition::new("approval", "draft, then ask a person")
            .with_initial_state("drafting")
            .with_state(
                StateConfig::new("drafting", "write a draft")
                    .with_action(
                        StateAction::new("draft.requested", "draft.completed")
                            .with_data(json!({"topic": "{{goal.topic}}"})),
                    )
                    .with_transition(StateTransition::new("draft.completed", "approving")),
            )
            .with_state(
                StateConfig::new("approving", "a person approves the draft")
                    .with_transition(
                        StateTransition::new("approval.answered", "published")
                            .with_condition("data.approved == true"),
                    )
                    .with_transition(StateTransition::new("approval.answered", "rejected"))
                    .with_transition(StateTransition::new("plan.timeout", "expired")),
            )
            .with_state(
                StateConfig::new("published", "")
                    .terminal()
                    .with_result(json!({
                        "text": "{{results.drafting.text}}",
                        "approved_by": "{{results.approving.by}}"
                    })),
            )
            .with_state(
                StateConfig::new("rejected", "")
                    .failed()
                    .with_result(json!("rejected by {{results.approving.by}}")),
            )
            .with_state(StateConfig::new("expired", "").failed().with_result(json!(
                "nobody approved \"{{results.approving.question}}\" in time"
            ))),
    )
    .expect("a valid plan")
}

async fn approval_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await.map(drop)
}

async fn approval_transition(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await?;
    if plan.current_state() == "approving" && plan.status() == soorma::common::PlanStatus::Running {
        let ms = plan.record().goal_data["timeout_ms"]
            .as_u64()
            .unwrap_or(10_000);
        plan.request_human_input_within(
            "Publish this draft?",
            "approval.answered",
            Duration::from_millis(ms),
        )
        .await?;
    }
    Ok(())
}

/// The drafting tool and the approval planner.
pub fn approval_agents() -> [AgentBuilder; 2] {
    [
        Tool::new("drafter")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("draft.requested", draft)),
        Planner::new("approval-planner")
            .use_registered_handlers(false)
            .with_state(Arc::new(approval_plan()))
            .handler(Handler::on_goal("post.goal", approval_goal))
            .handler(Handler::on_transition(approval_transition)),
    ]
}

pub async fn planner_asks_a_person_and_handles_the_answer_and_the_timeout(
    mut t: TestPlatform,
    wait: Duration,
) {
    for agent in approval_agents() {
        t.start(agent).await.unwrap();
    }
    let client = t.client().with_timeout(wait * 2);
    // Answered: the question goes out on notification-events; the answer resumes the plan.
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>(
                    "post.goal",
                    json!({"topic": "kv stores", "timeout_ms": 20_000}),
                    "post.done",
                )
                .await
        }
    });
    let question = t
        .expect_event("notification.human_input", wait)
        .await
        .unwrap();
    assert_eq!(question.topic, Topic::NotificationEvents);
    assert_eq!(question.data["question"], "Publish this draft?");
    assert_eq!(question.data["response_event"], "approval.answered");
    assert_eq!(question.data["timeout_seconds"], 20.0);
    assert_eq!(
        question.response_event.as_deref(),
        Some("approval.answered")
    );
    let plan_id = question.correlation_id.clone().unwrap();
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "approval.answered",
            json!({"approved": true, "by": "grace"}),
        )
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let post = pending.await.unwrap().unwrap();
    assert_eq!(
        post,
        json!({"text": "A post about kv stores", "approved_by": "grace"})
    );
    // Answered in time: its timer is gone.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let timers = t
        .platform()
        .state()
        .keys(soorma::planner::TIMERS_BUCKET, "default")
        .await
        .unwrap();
    assert!(timers.is_empty(), "{timers:?}");

    // Not answered: the timeout moves the plan to `expired`, which fails it.
    let err = client
        .invoke::<Value>(
            "post.goal",
            json!({"topic": "queues", "timeout_ms": 300}),
            "post.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("nobody approved \"Publish this draft?\" in time"),
        "{err}"
    );
    let timeout = t.expect_event("plan.timeout", wait).await.unwrap();
    assert_eq!(timeout.topic, Topic::ActionResults);
    // A late answer changes nothing.
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "approval.answered",
            json!({"approved": true, "by": "late"}),
        )
        .correlation_id(timeout.correlation_id.clone().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.events_of_type("post.done").len(), 2);
    t.shutdown().await.unwrap();
}

async fn publish_post(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let ms = task.data["timeout_ms"].as_u64().unwrap_or(10_000);
    task.request_human_input(
        "Publish this post?",
        "post.reviewed",
        Some(Duration::from_millis(ms)),
    )
    .await
    .map(drop)
}

async fn post_reviewed(result: ResultContext<Value>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    match &result.data {
        Some(answer) => task.complete(json!({"published": answer["ok"]})).await,
        None => task.fail(result.error.clone().unwrap_or_default()).await,
    }
    .map(drop)
}

/// A worker that asks a person before publishing.
pub fn publisher() -> AgentBuilder {
    Worker::new("publisher")
        .use_registered_handlers(false)
        .handler(Handler::on_task("post.requested", publish_post))
        .handler(Handler::on_result("post.reviewed", post_reviewed))
        .handler(Handler::on_result(
            soorma::TASK_TIMEOUT_EVENT,
            post_reviewed,
        ))
}

pub async fn worker_asks_a_person_and_handles_the_answer_and_the_timeout(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(publisher()).await.unwrap();
    let client = t.client().with_timeout(wait * 2);
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("post.requested", json!({"timeout_ms": 20_000}), "post.done")
                .await
        }
    });
    let question = t
        .expect_event("notification.human_input", wait)
        .await
        .unwrap();
    assert_eq!(question.topic, Topic::NotificationEvents);
    assert_eq!(question.data["question"], "Publish this post?");
    assert_eq!(question.data["response_event"], "post.reviewed");
    let sub_task = question.correlation_id.clone().unwrap();
    client
        .bus()
        .publish(Topic::ActionResults, "post.reviewed", json!({"ok": true}))
        .correlation_id(sub_task.as_str())
        .await
        .unwrap();
    assert_eq!(pending.await.unwrap().unwrap(), json!({"published": true}));

    let err = client
        .invoke::<Value>("post.requested", json!({"timeout_ms": 300}), "post.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no answer to \"Publish this post?\" within 0.3 s"),
        "{err}"
    );
    t.expect_event(soorma::TASK_TIMEOUT_EVENT, wait)
        .await
        .unwrap();
    t.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// LLM planning (a scripted model: no network)
// ---------------------------------------------------------------------------------------------

use soorma::llm::ScriptedLlm;
use soorma::planner::llm::{LlmPlanner, PlanningOptions};

async fn assistant_goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.start_reasoning(&goal).await.map(drop)
}

async fn assistant_step(mut plan: PlanContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.step(&mut plan).await.map(drop)
}

/// A planner whose model chooses each next action (`assist.goal`).
pub fn assistant_planner(model: ScriptedLlm, options: PlanningOptions) -> AgentBuilder {
    Planner::new("assistant")
        .use_registered_handlers(false)
        .with_state(LlmPlanner::new(model).with_options(options))
        .handler(Handler::on_goal("assist.goal", assistant_goal))
        .handler(Handler::on_transition(assistant_step))
}

async fn writer_goal(goal: GoalContext, llm: State<LlmPlanner>) -> soorma::Result<()> {
    llm.start_plan(&goal).await.map(drop)
}

/// A planner whose model writes a plan per goal (`write.goal`), run as a state machine.
pub fn writer_planner(model: ScriptedLlm) -> AgentBuilder {
    Planner::new("plan-writer")
        .use_registered_handlers(false)
        .with_state(LlmPlanner::new(model))
        .handler(Handler::on_goal("write.goal", writer_goal))
}

async fn load_plan(t: &TestPlatform, plan_id: &str) -> soorma::common::PlanRecord {
    let key = soorma::state::StateKey::new(soorma::planner::PLANS_BUCKET, "default", plan_id);
    let stored = t.platform().state().get(&key).await.unwrap().unwrap();
    serde_json::from_slice(&stored.value).unwrap()
}

pub async fn llm_planner_calls_a_tool_then_completes_and_unknown_events_go_back_to_the_model(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let model = ScriptedLlm::new([
        // An event nobody consumes: sent back to the model with the reason.
        r#"{"action": "publish", "event_type": "multiply.requested", "data": {"a": 6, "b": 7}, "response_event": "multiply.completed"}"#,
        r#"{"action": "publish", "event_type": "calculate.requested", "data": {"expression": "6*7"}, "response_event": "calculate.completed"}"#,
        r#"{"action": "complete", "result": {"answer": 42}}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let answer: Value = t
        .client()
        .with_timeout(wait)
        .invoke(
            "assist.goal",
            json!({"question": "6 times 7?"}),
            "assist.done",
        )
        .await
        .unwrap();
    assert_eq!(answer, json!({"answer": 42}));
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    // The first prompt: the goal and the calculator (the planner's own goal is not offered).
    let first = &requests[0][1].content;
    assert!(first.contains("\"question\": \"6 times 7?\""), "{first}");
    assert!(
        first.contains("request event: `calculate.requested`"),
        "{first}"
    );
    assert!(!first.contains("assist.goal"), "{first}");
    let rejected = &requests[1].last().unwrap().content;
    assert!(
        rejected.contains(
            "no registered agent consumes `multiply.requested`; the request events are: `calculate.requested`"
        ),
        "{rejected}"
    );
    // The third prompt (after the reply) shows the request and its result.
    let third = &requests[2][1].content;
    assert!(
        third.contains(
            r#"1. published `calculate.requested` {"expression":"6*7"} -> result: {"result":42.0}"#
        ),
        "{third}"
    );
    assert!(third.contains("the reply to step 1"), "{third}");
    // The request carried the plan id as correlation id; the plan record keeps the step.
    let request = t.expect_event("calculate.requested", wait).await.unwrap();
    let plan_id = request.correlation_id.clone().unwrap();
    assert_eq!(request.id, format!("{plan_id}-a1"));
    let record = load_plan(&t, &plan_id).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(record.actions, 1);
    assert_eq!(record.planner.as_deref(), Some("assistant"));
    assert_eq!(record.state["steps"][0]["result"], json!({"result": 42.0}));
    assert!(t.events_of_type("multiply.requested").is_empty());
    t.shutdown().await.unwrap();
}

pub async fn llm_planner_waits_for_an_event_then_fails_with_the_models_reason(
    mut t: TestPlatform,
    wait: Duration,
) {
    let model = ScriptedLlm::new([
        r#"{"action": "wait", "reason": "waiting for the budget approval"}"#,
        r#"{"action": "fail", "error": "the budget was refused"}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let client = t.client().with_timeout(wait * 2);
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>("assist.goal", json!({"task": "buy a boat"}), "assist.done")
                .await
        }
    });
    let paused = t.expect_event("plan.paused", wait).await.unwrap();
    assert_eq!(paused.data["reason"], "waiting for the budget approval");
    let plan_id = paused.data["plan_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!goal.is_finished());
    client
        .bus()
        .publish(
            Topic::ActionResults,
            "budget.decided",
            json!({"approved": false}),
        )
        .correlation_id(plan_id.as_str())
        .await
        .unwrap();
    let err = goal.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("the budget was refused"), "{err}");
    t.expect_event("plan.resumed", wait).await.unwrap();
    let second = &model.requests()[1][1].content;
    assert!(
        second.contains(r#"1. received `budget.decided` {"approved":false}"#),
        "{second}"
    );
    assert!(
        second.contains("The event that just arrived: `budget.decided` (step 1)."),
        "{second}"
    );
    let record = load_plan(&t, &plan_id).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Failed);
    t.shutdown().await.unwrap();
}

pub async fn llm_planner_delegates_the_goal_to_another_planner_whose_reply_ends_it(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let model = ScriptedLlm::new([
        r#"{"action": "delegate", "event_type": "research.goal", "data": {"topic": "tea"}, "response_event": "research.done"}"#,
    ]);
    t.start(assistant_planner(model.clone(), PlanningOptions::default()))
        .await
        .unwrap();
    let report: Value = t
        .client()
        .with_timeout(wait)
        .invoke(
            "assist.goal",
            json!({"task": "research tea"}),
            "assist.done",
        )
        .await
        .unwrap();
    assert_eq!(report["summary"], "2 sources about tea");
    // The sub-plan's reply ended the plan without asking the model again.
    assert_eq!(model.request_count(), 1);
    let goal = t.expect_event("research.goal", wait).await.unwrap();
    let parent = goal.correlation_id.clone().unwrap();
    assert_eq!(goal.plan_id.as_deref(), Some(parent.as_str()));
    let sub = load_plan(&t, &goal.id).await;
    assert_eq!(sub.parent_plan_id.as_deref(), Some(parent.as_str()));
    assert_eq!(sub.planner.as_deref(), Some("research-planner"));
    let record = load_plan(&t, &parent).await;
    assert_eq!(record.status, soorma::common::PlanStatus::Completed);
    assert_eq!(
        record.result.as_ref().unwrap()["summary"],
        "2 sources about tea"
    );
    assert_eq!(record.state["steps"][0]["kind"], "delegate");
    // Each planner handled only its own plans: one completion each, no failure.
    assert_eq!(t.events_of_type("plan.completed").len(), 2);
    assert!(t.events_of_type("plan.failed").is_empty());
    t.shutdown().await.unwrap();
}

pub async fn llm_planner_that_keeps_publishing_is_stopped_at_its_action_limit(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let model = ScriptedLlm::from_fn(|_| {
        r#"{"action": "publish", "event_type": "calculate.requested", "data": {"expression": "1+1"}, "response_event": "calculate.completed"}"#.into()
    });
    t.start(assistant_planner(
        model.clone(),
        PlanningOptions::new().with_max_actions(3),
    ))
    .await
    .unwrap();
    let err = t
        .client()
        .with_timeout(wait)
        .invoke::<Value>(
            "assist.goal",
            json!({"task": "count forever"}),
            "assist.done",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the plan reached its limit of 3 actions"),
        "{err}"
    );
    assert_eq!(t.events_of_type("calculate.requested").len(), 3);
    // Asked for the first action, then after each of the three replies.
    assert_eq!(model.request_count(), 4);
    let last = &model.requests()[3][1].content;
    assert!(last.contains("Actions used: 3 of 3"), "{last}");
    let failed = t.expect_event("plan.failed", wait).await.unwrap();
    assert!(
        failed.data["error"]
            .as_str()
            .unwrap()
            .contains("limit of 3 actions")
    );
    t.shutdown().await.unwrap();
}

pub async fn llm_written_plan_is_validated_fixed_and_run_as_a_state_machine(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(calculator()).await.unwrap();
    let plan = |event: &str| {
        json!({
            "plan_type": "arithmetic",
            "states": {
                "start": {"state_name": "start",
                          "action": {"event_type": event, "response_event": "calculate.completed",
                                     "data": {"expression": "{{goal.expression}}"}},
                          "transitions": [{"on_event": "calculate.completed", "to_state": "done",
                                           "condition": "data.success"},
                                          {"on_event": "calculate.completed", "to_state": "failed"}]},
                "done": {"state_name": "done", "is_terminal": true,
                         "result": {"value": "{{results.start.result}}"}},
                "failed": {"state_name": "failed", "is_terminal": true, "fails": true,
                           "result": "cannot compute {{goal.expression}}"}
            }
        })
        .to_string()
    };
    let model = ScriptedLlm::new([plan("compute.requested"), plan("calculate.requested")]);
    t.start(writer_planner(model.clone())).await.unwrap();
    let out: Value = t
        .client()
        .with_timeout(wait)
        .invoke("write.goal", json!({"expression": "2*(3+4)"}), "write.done")
        .await
        .unwrap();
    assert_eq!(out, json!({"value": 14.0}));
    assert_eq!(model.request_count(), 2);
    let feedback = &model.requests()[1][3].content;
    assert!(
        feedback.contains("state `start`: no registered agent consumes `compute.requested`"),
        "{feedback}"
    );
    let started = t.expect_event("plan.started", wait).await.unwrap();
    assert_eq!(started.data["plan_type"], "arithmetic");
    t.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Sessions, nested plans, the tracker
// ---------------------------------------------------------------------------------------------

pub async fn sessions_group_plans_and_plans_are_listed_by_session_and_status(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::{PlanStatus, SessionRecord};
    use soorma::planner::PlanFilter;
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    let sessions = t.platform().sessions();
    let created = sessions
        .create(
            SessionRecord::new("reading-list")
                .with_user_id("ada")
                .with_name("Reading list"),
        )
        .await
        .unwrap();
    assert_eq!(created.tenant_id.as_deref(), Some("default"));
    let ada = t
        .client()
        .with_user("ada")
        .with_session("reading-list")
        .with_timeout(wait);
    let report: Value = ada
        .invoke("research.goal", json!({"topic": "rust"}), "research.done")
        .await
        .unwrap();
    assert_eq!(report["found"], 2);
    ada.invoke::<Value>(
        "research.goal",
        json!({"topic": "nothing"}),
        "research.done",
    )
    .await
    .unwrap_err();
    // A goal in a session nobody created starts the session.
    let bob = t
        .client()
        .with_user("bob")
        .with_session("chat-7")
        .with_timeout(wait);
    bob.invoke::<Value>("research.goal", json!({"topic": "tea"}), "research.done")
        .await
        .unwrap();

    let listed: Vec<_> = sessions
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(listed, ["reading-list", "chat-7"]);
    let of_bob = sessions.list_for_user("bob").await.unwrap();
    assert_eq!(of_bob.len(), 1);
    assert_eq!(of_bob[0].session_id, "chat-7");
    assert_eq!(of_bob[0].plan_ids.len(), 1);
    let reading = sessions.get("reading-list").await.unwrap().unwrap();
    assert_eq!(reading.name.as_deref(), Some("Reading list"));
    assert_eq!(reading.plan_ids.len(), 2);

    let plans = t.platform().plans();
    let in_session = plans.by_session("reading-list").await.unwrap();
    assert_eq!(
        in_session.iter().map(|p| &p.plan_id).collect::<Vec<_>>(),
        reading.plan_ids.iter().collect::<Vec<_>>(),
        "listed oldest first, in the order they started"
    );
    assert!(in_session.iter().all(|p| {
        p.session_id.as_deref() == Some("reading-list")
            && p.user_id.as_deref() == Some("ada")
            && p.planner.as_deref() == Some("research-planner")
    }));
    assert_eq!(in_session[0].status, PlanStatus::Completed);
    assert_eq!(in_session[1].status, PlanStatus::Failed);
    let completed = plans.by_status(PlanStatus::Completed).await.unwrap();
    let topics: Vec<_> = completed
        .iter()
        .map(|p| p.goal_data["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["rust", "tea"]);
    assert_eq!(plans.by_status(PlanStatus::Failed).await.unwrap().len(), 1);
    assert!(
        plans
            .by_status(PlanStatus::Running)
            .await
            .unwrap()
            .is_empty()
    );
    let failed_in_session = plans
        .list(
            &PlanFilter::new()
                .session("reading-list")
                .status(PlanStatus::Failed),
        )
        .await
        .unwrap();
    assert_eq!(failed_in_session.len(), 1);
    assert_eq!(
        failed_in_session[0].error.as_deref(),
        Some("nothing found for nothing")
    );
    let by_user = plans.list(&PlanFilter::new().user("bob")).await.unwrap();
    assert_eq!(by_user.len(), 1);
    let one = plans.get(&by_user[0].plan_id).await.unwrap().unwrap();
    assert_eq!(one.session_id.as_deref(), Some("chat-7"));
    // Tenants see only their own sessions and plans.
    assert!(sessions.for_tenant("acme").list().await.unwrap().is_empty());
    assert!(
        plans
            .for_tenant("acme")
            .list(&PlanFilter::new())
            .await
            .unwrap()
            .is_empty()
    );
    t.shutdown().await.unwrap();
}

/// Plan ids the report planner's transition handler was called for.
#[derive(Clone, Default)]
pub struct Handled(Arc<std::sync::Mutex<Vec<String>>>);

async fn report_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await.map(drop)
}

async fn report_transition(mut plan: PlanContext, handled: State<Handled>) -> soorma::Result<()> {
    handled.0.0.lock().unwrap().push(plan.plan_id().to_owned());
    plan.execute_next().await
}

/// A planner whose plan hands the research to the research planner (a sub-plan: its action is
/// `research.goal`) and reports on its reply.
pub fn report_planner(handled: Handled) -> AgentBuilder {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("report", "research in a sub-plan, then report")
            .with_state(
                StateConfig::new("start", "have the topic researched")
                    .with_action(
                        StateAction::new("research.goal", "research.done")
                            .with_data(json!({"topic": "{{goal.topic}}"})),
                    )
                    .with_transition(
                        StateTransition::new("research.done", "done")
                            .with_condition("data.success"),
                    ),
            )
            .with_state(
                StateConfig::new("done", "report")
                    .terminal()
                    .with_result(json!({"report": "Report: {{results.start.summary}}"})),
            ),
    )
    .expect("a valid plan");
    Planner::new("report-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(plan))
        .with_state(handled)
        .handler(Handler::on_goal("report.goal", report_goal))
        .handler(Handler::on_transition(report_transition))
}

pub async fn a_sub_plan_reports_its_completion_into_the_parent_plan(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::PlanStatus;
    use soorma::planner::{TaskState, Tracker};
    let tracker = Tracker::start(t.platform()).await.unwrap();
    let handled = Handled::default();
    t.start(research_tools()).await.unwrap();
    t.start(research_planner(false)).await.unwrap();
    t.start(report_planner(handled.clone())).await.unwrap();
    let client = t.client().with_session("trip").with_timeout(wait);
    let reply = client
        .request("report.goal", json!({"topic": "rust"}), "report.done")
        .await
        .unwrap();
    let parent_id = reply.reply.request_id.clone();
    let report: Value = reply.into_result().unwrap();
    assert_eq!(report, json!({"report": "Report: 2 sources about rust"}));

    // The records: the child names its parent, each plan its planner; both are in the session.
    let plans = t.platform().plans();
    let parent = plans.get(&parent_id).await.unwrap().unwrap();
    assert_eq!(parent.planner.as_deref(), Some("report-planner"));
    assert!(parent.parent_plan_id.is_none());
    let children = plans.sub_plans(&parent_id).await.unwrap();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(
        child.plan_id,
        format!("{parent_id}-a1"),
        "the goal event's id"
    );
    assert_eq!(child.parent_plan_id.as_deref(), Some(parent_id.as_str()));
    assert_eq!(child.planner.as_deref(), Some("research-planner"));
    assert_eq!(child.status, PlanStatus::Completed);
    assert_eq!(child.session_id.as_deref(), Some("trip"));
    // The child's reply moved the parent by its transition and became its state's result.
    let steps: Vec<_> = parent
        .history
        .iter()
        .map(|s| (s.state.as_str(), s.on_event.as_deref()))
        .collect();
    assert_eq!(steps, [("start", None), ("done", Some("research.done"))]);
    assert_eq!(parent.results["start"]["summary"], "2 sources about rust");
    let session = t.platform().sessions().get("trip").await.unwrap().unwrap();
    assert_eq!(session.plan_ids, [parent_id.clone(), child.plan_id.clone()]);
    // Each planner advances only its own plans: the report planner never handled the child's
    // events (its search and analysis replies).
    let seen = handled.0.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|p| *p == parent_id), "{seen:?}");

    // The tracker links them: the sub-plan is a task of the parent, and its sub-plan.
    let view = tracker
        .wait_for(&parent_id, wait, |p| {
            p.is_finished() && p.tasks.iter().all(|t| t.state.is_finished())
        })
        .await
        .unwrap();
    assert_eq!(view.sub_plans, std::slice::from_ref(&child.plan_id));
    let task = view.task(&child.plan_id).unwrap();
    assert_eq!(task.event_type.as_deref(), Some("research.goal"));
    assert_eq!(task.agent.as_deref(), Some("research-planner"));
    assert_eq!(task.state, TaskState::Completed);
    let child_view = tracker
        .wait_until_finished(&child.plan_id, wait)
        .await
        .unwrap();
    assert_eq!(
        child_view.parent_plan_id.as_deref(),
        Some(parent_id.as_str())
    );
    assert_eq!(child_view.session_id.as_deref(), Some("trip"));

    // A failed sub-plan fails the parent with its error (no transition takes a failure).
    let err = client
        .invoke::<Value>("report.goal", json!({"topic": "nothing"}), "report.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nothing found for nothing"),
        "{err}"
    );
    assert_eq!(
        plans.by_status(PlanStatus::Failed).await.unwrap().len(),
        2,
        "the sub-plan and its parent"
    );
    t.shutdown().await.unwrap();
}

/// Summarises what was found, reporting progress on the way.
async fn summarize(mut task: TaskContext<Value>) -> soorma::Result<()> {
    let items = task.data["items"].as_array().cloned().unwrap_or_default();
    task.progress(0.5, format!("reading {} sources", items.len()))
        .await?;
    task.complete(json!({"summary": format!("{} sources read", items.len())}))
        .await
        .map(drop)
}

async fn digest_goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    goal.start(&plan).await.map(drop)
}

/// search (a tool) → summarize (a worker that reports progress) → done.
pub fn digest_planner() -> AgentBuilder {
    use soorma::common::{PlanDefinition, StateAction, StateConfig, StateTransition};
    let plan = Plan::new(
        PlanDefinition::new("digest", "search, then summarize")
            .with_state(
                StateConfig::new("start", "search")
                    .with_action(
                        StateAction::new("search.requested", "search.completed")
                            .with_data(json!({"q": "{{goal.topic}}"})),
                    )
                    .with_transition(StateTransition::new("search.completed", "summarizing")),
            )
            .with_state(
                StateConfig::new("summarizing", "summarize")
                    .with_action(
                        StateAction::new("summarize.requested", "summarize.completed")
                            .with_data(json!({"items": "{{results.start.items}}"})),
                    )
                    .with_transition(StateTransition::new("summarize.completed", "done")),
            )
            .with_state(
                StateConfig::new("done", "")
                    .terminal()
                    .with_result(json!("{{results.summarizing.summary}}")),
            ),
    )
    .expect("a valid plan");
    Planner::new("digest-planner")
        .use_registered_handlers(false)
        .with_state(Arc::new(plan))
        .handler(Handler::on_goal("digest.goal", digest_goal))
}

pub async fn tracker_answers_where_a_plan_is_what_happened_and_which_tasks_ran(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::common::PlanStatus;
    use soorma::planner::{TaskState, Tracker, ViewSource};
    let tracker = Tracker::start(t.platform()).await.unwrap();
    t.start(research_tools()).await.unwrap();
    t.start(
        Worker::new("summarizer")
            .use_registered_handlers(false)
            .handler(Handler::on_task("summarize.requested", summarize)),
    )
    .await
    .unwrap();
    t.start(digest_planner()).await.unwrap();
    let reply = t
        .client()
        .with_timeout(wait)
        .request("digest.goal", json!({"topic": "tea"}), "digest.done")
        .await
        .unwrap();
    let plan_id = reply.reply.request_id.clone();
    assert_eq!(reply.into_result::<String>().unwrap(), "2 sources read");
    // The worker's progress carries the plan's id (its task came from the plan's action).
    let progress = t.expect_event("task.progress", wait).await.unwrap();
    assert_eq!(progress.data["plan_id"], plan_id.as_str());

    let plan = tracker
        .wait_for(&plan_id, wait, |p| {
            p.is_finished() && p.tasks.len() == 2 && p.tasks.iter().all(|t| t.state.is_finished())
        })
        .await
        .unwrap();
    // Where is it?
    assert_eq!(plan.source, ViewSource::Events);
    assert_eq!(plan.status, PlanStatus::Completed);
    assert_eq!(plan.current_state.as_deref(), Some("done"));
    assert_eq!(plan.plan_type.as_deref(), Some("digest"));
    assert_eq!(plan.result, Some(json!("2 sources read")));
    assert!(plan.updated_at.is_some() && plan.started_at <= plan.updated_at);
    // What happened?
    let happened: Vec<_> = plan
        .events
        .iter()
        .map(|e| (e.event_type.as_str(), e.state.as_deref()))
        .collect();
    assert_eq!(
        happened,
        [
            ("plan.started", Some("start")),
            ("plan.state_changed", Some("start")),
            ("plan.state_changed", Some("summarizing")),
            ("plan.state_changed", Some("done")),
            ("plan.completed", Some("done")),
        ]
    );
    assert!(plan.events.iter().all(|e| e.at.is_some()));
    assert!(plan.events.windows(2).all(|w| w[0].at <= w[1].at));
    // Which tasks ran?
    let search = &plan.tasks[0];
    assert_eq!(search.task_id, format!("{plan_id}-a1"));
    assert_eq!(search.event_type.as_deref(), Some("search.requested"));
    assert_eq!(search.agent.as_deref(), Some("research-tools"));
    assert_eq!(search.state, TaskState::Completed);
    let summary = &plan.tasks[1];
    assert_eq!(summary.task_id, format!("{plan_id}-a2"));
    assert_eq!(summary.event_type.as_deref(), Some("summarize.requested"));
    assert_eq!(summary.agent.as_deref(), Some("summarizer"));
    assert_eq!(summary.state, TaskState::Completed);
    assert_eq!(summary.message.as_deref(), Some("reading 2 sources"));
    assert_eq!(summary.progress, Some(1.0));
    assert_eq!(tracker.plan(&plan_id).await.unwrap(), Some(plan.clone()));
    assert_eq!(tracker.watched_plans().len(), 1);

    // A tracker started later answers from the stored plan record.
    let late = Tracker::start(t.platform()).await.unwrap();
    assert!(late.watched(&plan_id).is_none());
    let stored = late.plan(&plan_id).await.unwrap().unwrap();
    assert_eq!(stored.source, ViewSource::Stored);
    assert_eq!(stored.status, PlanStatus::Completed);
    assert_eq!(stored.current_state.as_deref(), Some("done"));
    let states: Vec<_> = stored
        .events
        .iter()
        .filter(|e| e.event_type == "plan.state_changed")
        .map(|e| e.state.as_deref().unwrap())
        .collect();
    assert_eq!(states, ["start", "summarizing", "done"]);
    assert_eq!(stored.events.last().unwrap().event_type, "plan.completed");
    assert!(stored.tasks.is_empty());
    assert!(late.plan("no-such-plan").await.unwrap().is_none());
    // The tracker of another tenant sees nothing of it.
    let other = Tracker::builder(t.platform())
        .tenant("acme")
        .start()
        .await
        .unwrap();
    assert!(other.plan(&plan_id).await.unwrap().is_none());
    t.shutdown().await.unwrap();
}
