//! Wiring: typed requests end to end (a call, a fan-out and its fan-in), and the wiring
//! mistakes that used to cost a silent 30 s timeout, now caught at once and named: a misspelt
//! delegated event, calling an agent that is not running, a delegation whose reply nobody
//! handles, a task waiting past its deadline, a misspelt agent name in a group.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use soorma::prelude::*;
use soorma::testing::TestPlatform;

use crate::support::Counter;

/// How long a mistake may take to surface (the issue asks for 2 s; the client waits 30 s).
const FAST: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "double.requested", reply = i64)]
struct Double(i64);

#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "negate.requested", reply = i64)]
struct Negate(i64);

/// A request whose event is misspelt: `dobule` for `double`.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "dobule.requested", reply = i64)]
struct Misspelt(i64);

/// The worker's request: sums what the tools make of `n`.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "combine.requested", reply = Combined)]
struct Combine {
    n: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
struct Combined {
    doubled: i64,
    negated: Option<i64>,
    note: String,
}

/// The worker's typed state.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Notes {
    asked_at: String,
}

async fn double(req: Invocation<Double>) -> Result<i64, ToolError> {
    Ok(req.data.0 * 2)
}

async fn negate(req: Invocation<Negate>) -> Result<i64, ToolError> {
    if req.data.0 == 13 {
        return Err(ToolError::new("13 is unlucky"));
    }
    Ok(-req.data.0)
}

fn arithmetic() -> AgentBuilder {
    Tool::new("arithmetic")
        .use_registered_handlers(false)
        .handler(Handler::invoke(double))
        .handler(Handler::invoke(negate))
}

async fn combine(mut task: TaskContext<Combine, Notes>) -> soorma::Result<Delegated> {
    task.state_mut().asked_at = "combine".into();
    let n = task.data.n;
    task.fan_out((Double(n), Negate(n))).await
}

async fn combined(
    task: TaskContext<Combine, Notes>,
    (doubled, negated): (i64, Result<i64, SubTaskFailed>),
    State(calls): State<Counter>,
) -> soorma::Result<Combined> {
    calls.0.fetch_add(1, Ordering::SeqCst);
    Ok(Combined {
        doubled,
        negated: negated.ok(),
        note: task.state().asked_at.clone(),
    })
}

fn combiner(calls: Counter) -> AgentBuilder {
    Worker::new("combiner")
        .use_registered_handlers(false)
        .with_state(calls)
        .handler(Handler::task(combine))
        .handler(Handler::fan_in::<(Double, Negate)>().handle(combined))
}

scenario!(a_typed_call_gets_the_typed_reply);
async fn a_typed_call_gets_the_typed_reply(mut t: TestPlatform, wait: Duration) {
    t.start(arithmetic()).await.unwrap();
    let client = t.client().with_timeout(wait);
    assert_eq!(client.call(Double(21)).await.unwrap(), 42);
    let err = client.call(Negate(13)).await.unwrap_err();
    assert!(err.to_string().contains("13 is unlucky"), "{err}");
    t.shutdown().await.unwrap();
}

scenario!(a_typed_fan_in_runs_once_with_every_reply_and_the_tasks_typed_state);
async fn a_typed_fan_in_runs_once_with_every_reply_and_the_tasks_typed_state(
    mut t: TestPlatform,
    wait: Duration,
) {
    let calls = Counter::default();
    t.start(arithmetic()).await.unwrap();
    t.start(combiner(calls.clone())).await.unwrap();
    let client = t.client().with_timeout(wait);
    let out = client.call(Combine { n: 5 }).await.unwrap();
    assert_eq!(
        out,
        Combined {
            doubled: 10,
            negated: Some(-5),
            note: "combine".into()
        }
    );
    // A failed sub-task reaches the fan-in as `Err` where it takes `Result<T, SubTaskFailed>`.
    let out = client.call(Combine { n: 13 }).await.unwrap();
    assert_eq!((out.doubled, out.negated), (26, None));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(calls.0.load(Ordering::SeqCst), 2, "one fan-in per task");
    t.shutdown().await.unwrap();
}

async fn misdelegate(mut task: TaskContext<Combine>) -> soorma::Result<Delegated> {
    let n = task.data.n;
    task.delegate(Misspelt(n)).await
}

scenario!(a_misspelt_delegated_event_fails_the_task_at_once_naming_the_event);
async fn a_misspelt_delegated_event_fails_the_task_at_once_naming_the_event(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(arithmetic()).await.unwrap();
    t.start(
        Worker::new("misdelegator")
            .use_registered_handlers(false)
            .handler(Handler::task(misdelegate))
            .handler(Handler::fan_in::<Misspelt>().handle(
                |_t: TaskContext<Combine>, n: i64| async move {
                    Ok::<_, ToolError>(Combined {
                        doubled: n,
                        negated: None,
                        note: String::new(),
                    })
                },
            )),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let err = t
        .client()
        .call(Combine { n: 1 })
        .timeout(FAST * 2)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no agent consumes `dobule.requested`"),
        "{err}"
    );
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    t.shutdown().await.unwrap();
}

scenario!(calling_an_agent_that_is_not_running_fails_at_once);
async fn calling_an_agent_that_is_not_running_fails_at_once(t: TestPlatform, _wait: Duration) {
    let started = Instant::now();
    let err = t.client().call(Double(1)).await.unwrap_err();
    assert!(
        matches!(&err, Error::NoConsumer { event } if event == "double.requested"),
        "{err}"
    );
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    t.shutdown().await.unwrap();
}

async fn delegate_unhandled(mut task: TaskContext<Combine>) -> soorma::Result<String> {
    let n = task.data.n;
    task.delegate_with(Delegation::new(
        "double.requested",
        &n,
        "double.done.somewhere",
    ))
    .await
}

scenario!(a_delegation_whose_reply_no_handler_takes_fails_the_task_naming_the_reply);
async fn a_delegation_whose_reply_no_handler_takes_fails_the_task_naming_the_reply(
    mut t: TestPlatform,
    _wait: Duration,
) {
    t.start(arithmetic()).await.unwrap();
    t.start(
        Worker::new("forgetful")
            .use_registered_handlers(false)
            .handler(Handler::task(delegate_unhandled)),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let err = t
        .client()
        .call(Combine { n: 1 })
        .timeout(FAST * 2)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("double.done.somewhere"), "{message}");
    assert!(message.contains("forgetful"), "{message}");
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
    t.shutdown().await.unwrap();
}

async fn wait_long(mut task: TaskContext<Combine>) -> soorma::Result<String> {
    task.fail_after(Duration::from_millis(300)).await?;
    task.delegate_with(
        Delegation::new("nobody.requested", &task.data.n, "nobody.completed").skip_consumer_check(),
    )
    .await
}

async fn nobody_replied(result: ResultContext<i64>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    task.complete(result.data.unwrap_or_default()).await?;
    Ok(())
}

scenario!(a_task_past_its_deadline_fails_naming_the_sub_task_it_waits_for);
async fn a_task_past_its_deadline_fails_naming_the_sub_task_it_waits_for(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Worker::new("patient")
            .use_registered_handlers(false)
            .handler(Handler::task(wait_long))
            .handler(Handler::on_result("nobody.completed", nobody_replied)),
    )
    .await
    .unwrap();
    let err = t
        .client()
        .call(Combine { n: 1 })
        .timeout(wait)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("deadline"), "{message}");
    assert!(message.contains("`nobody.requested`"), "{message}");
    t.shutdown().await.unwrap();
}

scenario!(a_deadline_event_carries_the_time_it_fired_and_the_time_it_was_due);
async fn a_deadline_event_carries_the_time_it_fired_and_the_time_it_was_due(
    mut t: TestPlatform,
    wait: Duration,
) {
    t.start(
        Worker::new("patient")
            .use_registered_handlers(false)
            .handler(Handler::task(wait_long))
            .handler(Handler::on_result("nobody.completed", nobody_replied)),
    )
    .await
    .unwrap();
    let _ = t.client().call(Combine { n: 1 }).timeout(wait).await;
    let fired = t.expect_event("task.deadline", wait).await.unwrap();
    let time = fired.time.clone().expect("stamped");
    let due = fired.data["deadline_at"].as_str().expect("deadline_at");
    // RFC 3339 UTC with milliseconds: the strings order as the times do.
    assert!(time.as_str() >= due, "stamped {time}, due {due}");
    let scheduled_for = fired.data["scheduled_for"].as_str().expect("scheduled_for");
    assert!(
        time.as_str() >= scheduled_for,
        "stamped {time}, due {scheduled_for}"
    );
    // Computed from the same clock just after `deadline_at`.
    assert!(
        scheduled_for >= due,
        "scheduled for {scheduled_for}, due {due}"
    );
    t.shutdown().await.unwrap();
}

scenario!(a_group_names_every_wiring_mistake_before_anything_starts);
async fn a_group_names_every_wiring_mistake_before_anything_starts(
    t: TestPlatform,
    _wait: Duration,
) {
    let platform = t.platform().clone();
    // A misspelt agent to start.
    let err = Agents::new()
        .tool("arithmetic", vec![Handler::invoke(double)])
        .start_only(&platform, &["arithmetc"])
        .await
        .unwrap_err();
    let Error::Misconfigured { problems, .. } = &err else {
        panic!("expected Misconfigured, got {err}");
    };
    assert!(
        problems[0].contains("no agent `arithmetc`") && problems[0].contains("`arithmetic`?"),
        "{problems:?}"
    );
    // A task handler listed for a tool, and two agents of one name: both reported.
    let err = Agents::new()
        .tool("arithmetic", vec![Handler::task(combine)])
        .tool("arithmetic", vec![Handler::invoke(double)])
        .start(&platform)
        .await
        .unwrap_err();
    let Error::Misconfigured { problems, .. } = &err else {
        panic!("expected Misconfigured, got {err}");
    };
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().any(|p| p.contains("belongs in a worker")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("two agents are named `arithmetic`")),
        "{problems:?}"
    );
    // Nothing started.
    assert!(platform.discovery().all().await.unwrap().is_empty());
    t.shutdown().await.unwrap();
}

/// Doubles every number, as a batch fanned out to the tool.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "double_all.requested", reply = Vec<i64>)]
struct DoubleAll(Vec<i64>);

async fn double_all(mut task: TaskContext<DoubleAll>) -> soorma::Result<Delegated> {
    let batch: Vec<Double> = task.data.0.iter().map(|n| Double(*n)).collect();
    task.fan_out(batch).await
}

async fn doubled_all(
    _task: TaskContext<DoubleAll>,
    doubled: Vec<i64>,
    State(calls): State<Counter>,
) -> soorma::Result<Vec<i64>> {
    calls.0.fetch_add(1, Ordering::SeqCst);
    Ok(doubled)
}

scenario!(a_batch_fan_out_of_any_size_comes_back_as_one_vec_in_order);
async fn a_batch_fan_out_of_any_size_comes_back_as_one_vec_in_order(
    mut t: TestPlatform,
    wait: Duration,
) {
    let calls = Counter::default();
    t.start(arithmetic()).await.unwrap();
    t.start(
        Worker::new("batcher")
            .use_registered_handlers(false)
            .with_state(calls.clone())
            .handler(Handler::task(double_all))
            .handler(Handler::fan_in::<Vec<Double>>().handle(doubled_all)),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait);
    let numbers: Vec<i64> = (1..=25).collect();
    let out = client.call(DoubleAll(numbers.clone())).await.unwrap();
    assert_eq!(out, numbers.iter().map(|n| n * 2).collect::<Vec<_>>());
    assert_eq!(client.call(DoubleAll(vec![7])).await.unwrap(), [14]);
    // An empty batch has no reply to wait for: the task fails at once, saying so.
    let err = client.call(DoubleAll(Vec::new())).await.unwrap_err();
    assert!(err.to_string().contains("an empty batch"), "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(calls.0.load(Ordering::SeqCst), 2, "one fan-in per task");
    t.shutdown().await.unwrap();
}

scenario!(a_task_failed_by_its_deadline_whose_reply_failed_replies_when_the_timer_comes_again);
async fn a_task_failed_by_its_deadline_whose_reply_failed_replies_when_the_timer_comes_again(
    t: TestPlatform,
    wait: Duration,
) {
    // The worker's first publish of the task's reply fails (after the deadline stored the
    // failed task): the deadline's handler fails, retryably, and its event comes again.
    let failing = soorma_tests::slow_bus::FailingPublish::platform(
        t.platform(),
        &<Combine as soorma::Request>::reply_event(),
        1,
    );
    let worker = Worker::new("patient")
        .use_registered_handlers(false)
        .handler(Handler::task(wait_long))
        .handler(Handler::on_result("nobody.completed", nobody_replied))
        .start(&failing)
        .await
        .unwrap();
    let err = t
        .client()
        .call(Combine { n: 1 })
        .timeout(wait)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("deadline"), "{message}");
    worker.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "chain.requested", reply = i64)]
struct Chain {
    n: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "triple.requested", reply = i64)]
struct Triple(i64);

/// Triples after 300 ms: the task still waits for it when the double's reply comes again.
async fn triple(req: Invocation<Triple>) -> Result<i64, ToolError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(req.data.0 * 3)
}

/// Negates after 50 ms: the double's reply comes first.
async fn later_negate(req: Invocation<Negate>) -> Result<i64, ToolError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(-req.data.0)
}

async fn chain(mut task: TaskContext<Chain>) -> soorma::Result<Delegated> {
    let n = task.data.n;
    task.fan_out((Double(n), Negate(n))).await
}

/// The first stage's fan-in: delegates the second stage (the task keeps running).
async fn chained(
    mut task: TaskContext<Chain>,
    (doubled, _): (i64, Result<i64, SubTaskFailed>),
    State(calls): State<Counter>,
) -> soorma::Result<Delegated> {
    calls.0.fetch_add(1, Ordering::SeqCst);
    task.delegate(Triple(doubled)).await
}

async fn tripled(_task: TaskContext<Chain>, tripled: i64) -> soorma::Result<i64> {
    Ok(tripled)
}

scenario!(a_redelivered_result_that_did_not_complete_its_group_does_not_run_the_fan_in_again);
async fn a_redelivered_result_that_did_not_complete_its_group_does_not_run_the_fan_in_again(
    mut t: TestPlatform,
    wait: Duration,
) {
    use soorma::dispatch::tower::{ServiceExt, layer::layer_fn, service_fn};
    use soorma::dispatch::{HandlerError, HandlerRequest, HandlerService};

    let calls = Counter::default();
    let triples = Counter::default();
    t.start(
        Tool::new("staged-arithmetic")
            .use_registered_handlers(false)
            .with_state(triples.clone())
            .handler(Handler::invoke(double))
            .handler(Handler::invoke(later_negate))
            .handler(Handler::invoke(
                |req: Invocation<Triple>, State(n): State<Counter>| async move {
                    n.0.fetch_add(1, Ordering::SeqCst);
                    triple(req).await
                },
            )),
    )
    .await
    .unwrap();
    // The double's reply (the first of the group, which does not complete it) is recorded,
    // then its handling fails retryably once: it comes again after the group completed.
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let double_reply = <Double as soorma::Request>::reply_event();
    let fail_first_double = layer_fn(move |inner: HandlerService| {
        let (failed_once, double_reply) = (failed_once.clone(), double_reply.clone());
        service_fn(move |req: HandlerRequest| {
            let (inner, failed_once) = (inner.clone(), failed_once.clone());
            let is_double = req.envelope().event_type == double_reply;
            async move {
                let out = inner.oneshot(req).await?;
                if is_double && !failed_once.swap(true, Ordering::SeqCst) {
                    return Err(HandlerError::retryable(
                        "an injected failure after recording",
                    ));
                }
                Ok(out)
            }
        })
    });
    t.start(
        Worker::new("chainer")
            .use_registered_handlers(false)
            .with_state(calls.clone())
            .handler(Handler::task(chain))
            .handler(Handler::fan_in::<(Double, Negate)>().handle(chained))
            .handler(Handler::fan_in::<Triple>().handle(tripled))
            .layer(fail_first_double),
    )
    .await
    .unwrap();
    let out = t.client().call(Chain { n: 5 }).timeout(wait).await.unwrap();
    assert_eq!(out, 30);
    // Long enough for a second stage delegated again by the redelivery to have run.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        1,
        "the first stage's fan-in ran again"
    );
    assert_eq!(
        triples.0.load(Ordering::SeqCst),
        1,
        "the second stage was delegated again"
    );
    t.shutdown().await.unwrap();
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "fragile.requested", reply = i64)]
struct Fragile {
    n: i64,
}

async fn fragile(mut task: TaskContext<Fragile>) -> soorma::Result<Delegated> {
    let n = task.data.n;
    task.fan_out((Double(n), Negate(n))).await
}

async fn fragile_fan_in(
    _task: TaskContext<Fragile>,
    (doubled, _): (i64, Result<i64, SubTaskFailed>),
) -> soorma::Result<i64> {
    if doubled == 2 {
        panic!("the fan-in's code has a bug");
    }
    Err(soorma::Error::Timeout {
        after: Duration::ZERO,
        what: "a service the fan-in needs, on every attempt".into(),
    })
}

scenario!(a_fan_in_that_panics_or_keeps_failing_fails_its_task);
async fn a_fan_in_that_panics_or_keeps_failing_fails_its_task(mut t: TestPlatform, wait: Duration) {
    t.start(arithmetic()).await.unwrap();
    t.start(
        Worker::new("fragile")
            .use_registered_handlers(false)
            .max_deliver(3)
            .handler(Handler::task(fragile))
            .handler(Handler::fan_in::<(Double, Negate)>().handle(fragile_fan_in)),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait);
    let panicked = client.call(Fragile { n: 1 }).await.unwrap_err().to_string();
    assert!(panicked.contains("the fan-in failed"), "{panicked}");
    assert!(panicked.contains("has a bug"), "{panicked}");
    // A retryable failure on every delivery (3 here): the last one fails the task.
    let retried = client.call(Fragile { n: 2 }).await.unwrap_err().to_string();
    assert!(retried.contains("the fan-in failed"), "{retried}");
    t.shutdown().await.unwrap();
}
