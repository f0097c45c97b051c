//! What only the NATS platform does, on a real `nats-server -js` (started per test on a free
//! loopback port with a temporary store): durability, dead letters, restarts, redelivery,
//! registry expiry, key listing, auth and configuration errors. The product scenarios run on it
//! (and on the embedded platform) in `scenarios/`.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use soorma::nats::{NatsAuth, NatsConfig};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::agents;
use soorma_tests::nats_server::{NatsServer, consumer_count};

const WAIT: Duration = Duration::from_secs(20);

async fn connect(server: &NatsServer) -> Platform {
    soorma::nats::connect(NatsConfig::new(server.url()))
        .await
        .expect("connect to the test nats-server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    // Every "process" is a new connection to the same server.
    soorma_tests::restarts::human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once(
        || connect(&server),
        WAIT,
    )
    .await;
}

/// A key written around the SDK into the timers bucket, under a first token that is no valid
/// tenant id, does not keep the other tenants' stored timers from firing after a restart (it
/// made timer recovery fail for every tenant, at every start).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_of_no_valid_tenant_in_the_timers_bucket_does_not_stop_timer_recovery() {
    use soorma::state::StateKey;
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    {
        // The bucket as the SDK makes it, then the foreign key.
        let platform = connect(&server).await;
        let store = platform.state();
        let placeholder = StateKey::new(soorma::planner::TIMERS_BUCKET, "acme", "placeholder");
        store.put(&placeholder, b"{}".to_vec()).await.unwrap();
        store.delete(&placeholder).await.unwrap();
        let js = soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
        let timers = js.get_key_value("soorma_timers").await.unwrap();
        timers.put("a=b.6869", "{}".into()).await.unwrap();
    }
    soorma_tests::restarts::human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once(
        || connect(&server),
        WAIT,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_malformed_message_is_dead_lettered_and_the_agent_keeps_serving() {
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::calculator()).await.unwrap();
    let nats = platform.nats_client().unwrap().clone();
    let js = soorma::nats::async_nats::jetstream::new(nats);
    js.publish(
        "soorma.default.action-requests.calculate.requested",
        "{not json".into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let dl = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert!(
        dl.data["reason"].as_str().unwrap().contains("undecodable"),
        "{}",
        dl.data
    );
    assert_eq!(
        dl.data["subject"],
        "soorma.default.action-requests.calculate.requested"
    );
    // The message is kept in the dead-letter stream with its reason.
    let mut dlq = js.get_stream("SOORMA_DLQ").await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 1);
    let stored = dlq
        .get_last_raw_message_by_subject("soorma-dlq.default.action-requests.calculate.requested")
        .await
        .unwrap();
    assert_eq!(&stored.payload[..], b"{not json");
    // Still serving.
    let r: serde_json::Value = t
        .client()
        .invoke(
            "calculate.requested",
            json!({"expression": "20+22"}),
            "calc.done",
        )
        .await
        .unwrap();
    assert_eq!(r["result"], 42.0);
    t.shutdown().await.unwrap();
}

/// Envelopes published together are stored in batches (up to 64 of one subject in one
/// message, in order), handed out one by one to subscribers and observers, and a batch is
/// acked once every envelope is settled: when one asks to be retried, the batch comes back
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_published_together_are_stored_in_batches_and_settled_one_by_one() {
    use soorma::EventEnvelope;
    use soorma::bus::{EventFilter, Settlement, SubscriptionSpec};
    use soorma::nats::async_nats::jetstream;
    use std::collections::BTreeSet;

    let server = NatsServer::start();
    let platform = connect(&server).await;
    let bus = platform.bus();
    let mut observer = bus.observe(Some(Topic::BusinessFacts)).await.unwrap();
    let spec = SubscriptionSpec::new("batch-reader", Topic::BusinessFacts, EventFilter::All);
    let mut sub = bus.subscribe(spec).await.unwrap();
    let id = |i: usize| format!("e{i:02}");
    let envelopes: Vec<EventEnvelope> = (0..70)
        .map(|i| EventEnvelope::new(id(i), "test", Topic::BusinessFacts, "order.placed"))
        .collect();
    bus.publish_batch(envelopes).await.unwrap();

    // Two messages, 64 and 6 envelopes, in order.
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let stream = js.get_stream("SOORMA_BUSINESS_FACTS").await.unwrap();
    let last = stream.get_info().await.unwrap().state.last_sequence;
    let mut stored = Vec::new();
    for seq in 1..=last {
        let m = stream.get_raw_message(seq).await.unwrap();
        let envelopes = soorma::nats::envelopes_of(Some(&m.headers), &m.payload).unwrap();
        stored.push(envelopes.into_iter().map(|e| e.id).collect::<Vec<_>>());
    }
    stored.sort_by_key(Vec::len);
    assert_eq!(
        stored,
        [
            (64..70).map(id).collect::<Vec<_>>(),
            (0..64).map(id).collect::<Vec<_>>()
        ]
    );

    let all: BTreeSet<String> = (0..70).map(id).collect();
    let mut observed = BTreeSet::new();
    for _ in 0..70 {
        let d = tokio::time::timeout(WAIT, observer.next())
            .await
            .unwrap()
            .unwrap();
        assert!(observed.insert(d.envelope.id.clone()), "observed twice");
    }
    assert_eq!(observed, all);

    let mut first = Vec::new();
    for _ in 0..70 {
        let d = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.attempt, 1);
        first.push(d);
    }
    assert_eq!(
        first
            .iter()
            .map(|d| d.envelope.id.clone())
            .collect::<BTreeSet<_>>(),
        all
    );
    for d in first {
        let settlement = if d.envelope.id == id(3) {
            Settlement::Retry {
                delay: Duration::from_millis(10),
            }
        } else {
            Settlement::Ack
        };
        d.settle(settlement).await.unwrap();
    }
    // e03's batch (the first 64) comes back whole; the other was acked.
    let mut again = BTreeSet::new();
    for _ in 0..64 {
        let d = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.attempt, 2);
        again.insert(d.envelope.id.clone());
        d.settle(Settlement::Ack).await.unwrap();
    }
    assert_eq!(again, (0..64).map(id).collect());
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sub.next())
            .await
            .is_err(),
        "delivered again"
    );
    let mut consumer = stream
        .get_consumer::<jetstream::consumer::pull::Config>("batch-reader__business-facts")
        .await
        .unwrap();
    let info = consumer.info().await.unwrap();
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
}

/// The replies to the requests of one batch are stored together, in order, once every request
/// is settled; a batch retried whole stores them once, when it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_to_a_batch_are_stored_together_once_it_is_handled() {
    use soorma::EventEnvelope;
    use soorma::bus::{EventFilter, Settlement, SubscriptionSpec};
    use soorma::nats::async_nats::jetstream;

    let server = NatsServer::start();
    let platform = connect(&server).await;
    let bus = platform.bus();
    let spec = SubscriptionSpec::new("replier", Topic::ActionRequests, EventFilter::All);
    let mut sub = bus.subscribe(spec).await.unwrap();
    let requests: Vec<EventEnvelope> = (0..3)
        .map(|i| {
            EventEnvelope::new(
                format!("q{i}"),
                "test",
                Topic::ActionRequests,
                "x.requested",
            )
        })
        .collect();
    bus.publish_batch(requests).await.unwrap();
    let reply_to = |d: &soorma::bus::Delivery| {
        EventEnvelope::new(
            format!("{}-reply", d.envelope.id),
            "replier",
            Topic::ActionResults,
            "x.done",
        )
    };
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let stored_replies = || async {
        let Ok(stream) = js.get_stream("SOORMA_ACTION_RESULTS").await else {
            return Vec::new();
        };
        let last = stream.get_info().await.unwrap().state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            let m = stream.get_raw_message(seq).await.unwrap();
            let envelopes = soorma::nats::envelopes_of(Some(&m.headers), &m.payload).unwrap();
            out.push(envelopes.into_iter().map(|e| e.id).collect::<Vec<_>>());
        }
        out
    };
    // First delivery: q1 asks for a retry, so no reply is stored.
    for round in 1..=2 {
        let mut deliveries = Vec::new();
        for _ in 0..3 {
            let d = tokio::time::timeout(WAIT, sub.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(d.attempt, round);
            assert!(d.batches_replies());
            deliveries.push(d);
        }
        deliveries.sort_by(|a, b| b.envelope.id.cmp(&a.envelope.id)); // settled out of order
        for d in deliveries {
            if round == 1 && d.envelope.id == "q1" {
                let retry = Settlement::Retry {
                    delay: Duration::from_millis(10),
                };
                d.settle(retry).await.unwrap();
            } else {
                let reply = reply_to(&d);
                d.settle_with_reply(reply).await.unwrap();
            }
        }
        if round == 1 {
            assert!(
                stored_replies().await.is_empty(),
                "stored before the batch was done"
            );
        }
    }
    assert_eq!(
        stored_replies().await,
        [["q0-reply", "q1-reply", "q2-reply"]]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sub.next())
            .await
            .is_err(),
        "delivered again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_published_while_the_agent_is_down_are_served_when_it_returns() {
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let first = agents::calculator().start(&platform).await.unwrap();
    first.shutdown().await.unwrap();
    let client = platform.client("patient").with_timeout(WAIT);
    let pending = tokio::spawn(async move {
        // Nobody serves it right now; on NATS the request waits in its stream.
        client
            .request(
                "calculate.requested",
                json!({"expression": "2*21"}),
                "calc.done",
            )
            .skip_consumer_check()
            .await?
            .into_result::<serde_json::Value>()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = agents::calculator().start(&platform).await.unwrap();
    assert_eq!(pending.await.unwrap().unwrap()["result"], 42.0);
    again.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_completes_across_a_nats_server_restart() {
    let mut server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::batcher()).await.unwrap();
    // The tool has run before (its durable consumer exists) but is down for now.
    agents::upper_tool()
        .start(&platform)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let client = t.client().with_timeout(WAIT * 2);
    let call = tokio::spawn(async move {
        client
            .invoke::<Vec<String>>(
                "batch.requested",
                json!({"items": ["x", "y", "z"]}),
                "batch.completed",
            )
            .await
    });
    // The sub-task requests are persisted before anyone serves them...
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("upper.requested").len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sub-tasks were not delegated"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...the server restarts (file storage)...
    server.restart();
    // ...and the tool that arrives afterwards serves them; the task completes once.
    let upper = loop {
        match agents::upper_tool().start(&platform).await {
            Ok(h) => break h,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline + WAIT,
                    "reconnect: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(call.await.unwrap().unwrap(), ["X", "Y", "Z"]);
    upper.shutdown().await.unwrap();
}

/// Holds the replies for the `late-*` items until the test opens the gate.
static GATE_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn gated_upper(req: Invocation<String>) -> Result<String, ToolError> {
    while req.data.starts_with("late") && !GATE_OPEN.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(req.data.to_uppercase())
}

/// How many replies of `event` the action-results stream stores (after `Nats-Msg-Id`
/// de-duplication; a batch counts its envelopes): a doubled completion shows here even if no
/// observer saw it.
async fn stored_results(platform: &Platform, event: &str) -> usize {
    use soorma::nats::async_nats::jetstream::consumer;
    let js = soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
    let stream = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("soorma.*.action-results.{event}"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut total = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), messages.next()).await
    {
        let m = m.unwrap();
        total += soorma::nats::envelopes_of(m.headers.as_ref(), &m.payload)
            .unwrap()
            .len();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_in_completes_across_a_nats_server_restart() {
    // A fan-out's requests travel in batches of 64 whose replies are stored together: the
    // early ones are the first batch, the late ones the next.
    const EARLY: usize = 64;
    const LATE: usize = 6;
    let mut server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::batcher()).await.unwrap();
    t.start(
        Tool::new("upper")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("upper.requested", gated_upper)),
    )
    .await
    .unwrap();
    let items: Vec<String> = (0..EARLY)
        .map(|i| format!("early-{i}"))
        .chain((0..LATE).map(|i| format!("late-{i}")))
        .collect();
    let client = t.client().with_timeout(WAIT * 2);
    let call = tokio::spawn({
        let items = items.clone();
        async move {
            client
                .invoke::<Vec<String>>(
                    "batch.requested",
                    json!({ "items": items }),
                    "batch.completed",
                )
                .await
        }
    });
    // Half of the results are in and fanned in...
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("upper.completed").len() < EARLY {
        assert!(
            tokio::time::Instant::now() < deadline,
            "results did not arrive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // ...the server restarts (stopped and started on the same port and store) while the other
    // sub-tasks are still running...
    server.restart();
    GATE_OPEN.store(true, std::sync::atomic::Ordering::SeqCst);
    // ...and the last results complete the task, once, with every result in order.
    let expected: Vec<String> = items.iter().map(|i| i.to_uppercase()).collect();
    assert_eq!(call.await.unwrap().unwrap(), expected);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stored_results(&platform, "batch.completed").await, 1);
    assert_eq!(t.events_of_type("batch.completed").len(), 1);
    assert_eq!(
        stored_results(&platform, "upper.completed").await,
        EARLY + LATE
    );
}

static SLOW_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn slow(_req: Invocation<serde_json::Value>) -> Result<String, ToolError> {
    SLOW_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(KEPT_ALIVE_FOR).await;
    Ok("done".into())
}

/// How long the keep-alive tests' handler, or their reply's publish, takes: 2.3 ack-wait
/// periods of [`with_ack_wait_of_3s`].
const KEPT_ALIVE_FOR: Duration = Duration::from_secs(7);

/// A NATS platform whose deliveries must be acknowledged within 3 s (kept alive every 1 s: 2 s
/// of slack for a loaded machine's pauses).
async fn with_ack_wait_of_3s(server: &NatsServer) -> Platform {
    soorma::nats::connect(NatsConfig::new(server.url()).with_ack_wait(Duration::from_secs(3)))
        .await
        .unwrap()
}

/// Calls `request` (replied with `reply`) once, served by a tool with `handler` started on
/// `serving`, then waits 4.5 s (1.5 ack-wait periods of the tests using it) so that a
/// redelivery would have run the handler again; checks that the server sent no copy of the
/// request (one instance skips its own copies, so the handler's count alone would not tell:
/// with a second instance, a copy would run the tool twice); returns the answer.
async fn answer_then_wait_for_redeliveries(
    calling: &Platform,
    serving: &Platform,
    handler: Handler,
    request: &str,
    reply: &str,
) -> String {
    let tool = Tool::new("once")
        .use_registered_handlers(false)
        .handler(handler)
        .start(serving)
        .await
        .unwrap();
    let answer: String = calling
        .client("test")
        .with_timeout(WAIT + KEPT_ALIVE_FOR)
        .invoke(request, json!({}), reply)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let js = soorma::nats::async_nats::jetstream::new(calling.nats_client().unwrap().clone());
    let info = js
        .get_stream("SOORMA_ACTION_REQUESTS")
        .await
        .unwrap()
        .consumer_info("once__action-requests")
        .await
        .unwrap();
    assert_eq!(
        info.delivered.consumer_sequence, 1,
        "the request was delivered again while it was handled: {info:?}"
    );
    tool.shutdown().await.unwrap();
    answer
}

/// A NATS platform whose deliveries must be acknowledged within 1 s.
async fn with_ack_wait_of_1s(server: &NatsServer) -> Platform {
    soorma::nats::connect(NatsConfig::new(server.url()).with_ack_wait(Duration::from_secs(1)))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_ack_wait_is_not_redelivered_while_it_works() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_3s(&server).await;
    let handler = Handler::on_invoke("slow.requested", slow);
    let answer = answer_then_wait_for_redeliveries(
        &platform,
        &platform,
        handler,
        "slow.requested",
        "slow.done",
    )
    .await;
    assert_eq!(answer, "done");
    // 2.3 ack-wait periods passed while the handler worked; it still ran exactly once.
    assert_eq!(SLOW_CALLS.load(std::sync::atomic::Ordering::SeqCst), 1);
}

static QUICK_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn quick(_req: Invocation<serde_json::Value>) -> Result<String, ToolError> {
    QUICK_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok("done".into())
}

/// Publishing a handler's reply is kept alive like the handler: a reply that takes 7 s to
/// store (> `ack_wait`) does not make the request redelivered, and the tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_slower_to_publish_than_ack_wait_does_not_run_the_tool_twice() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_3s(&server).await;
    // Its `quick.done` replies take 7 s to publish (as a reply retried through a cluster's
    // failover does).
    let slow_replies = soorma_tests::slow_bus::SlowPublish::platform(
        &platform,
        "quick.done",
        soorma_tests::slow_bus::Wait::Before,
        KEPT_ALIVE_FOR,
    );
    let handler = Handler::on_invoke("quick.requested", quick);
    let answer = answer_then_wait_for_redeliveries(
        &platform,
        &slow_replies,
        handler,
        "quick.requested",
        "quick.done",
    )
    .await;
    assert_eq!(answer, "done");
    assert_eq!(QUICK_CALLS.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The requests a slow echo tool took, in the order it took them.
#[derive(Clone, Default)]
struct Taken(std::sync::Arc<std::sync::Mutex<Vec<i64>>>);

/// Takes 3.5 s (over `ack_wait` in these tests).
async fn slow_echo(req: Invocation<i64>, State(taken): State<Taken>) -> Result<i64, ToolError> {
    taken.0.lock().unwrap().push(req.data);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    Ok(req.data)
}

/// Calls `<name>.requested` with each of `0..requests` (replying `<name>.done`), each call in a
/// task of its own, published `spacing` apart (else all at once).
async fn invoke_each(
    client: &soorma::Client,
    name: &str,
    requests: i64,
    spacing: Option<Duration>,
) -> Vec<tokio::task::JoinHandle<soorma::Result<i64>>> {
    let mut calls = Vec::new();
    for n in 0..requests {
        let (client, name) = (client.clone(), name.to_owned());
        calls.push(tokio::spawn(async move {
            client
                .invoke::<i64>(format!("{name}.requested"), n, format!("{name}.done"))
                .await
        }));
        if let Some(spacing) = spacing {
            // The previous request is stored by now: this one is a message of its own.
            tokio::time::sleep(spacing).await;
        }
    }
    calls
}

/// Serves `slow_echo` with `concurrency` handlers on a platform with `ack_wait` 1 s, calls it
/// with `0..requests` (published `spacing` apart, else all at once), checks every reply, then
/// waits for copies redelivered late; returns the requests it handled, sorted.
async fn slow_echoes(concurrency: usize, requests: i64, spacing: Option<Duration>) -> Vec<i64> {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let taken = Taken::default();
    let tool = Tool::new("sloth")
        .use_registered_handlers(false)
        .concurrency(concurrency)
        .with_state(taken.clone())
        .handler(Handler::on_invoke("slow-echo.requested", slow_echo))
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("test").with_timeout(WAIT);
    let calls = invoke_each(&client, "slow-echo", requests, spacing).await;
    for (n, call) in calls.into_iter().enumerate() {
        assert_eq!(call.await.unwrap().unwrap(), n as i64);
    }
    // A copy redelivered after the last reply would be handled within this.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tool.shutdown().await.unwrap();
    let mut handled = taken.0.lock().unwrap().clone();
    handled.sort_unstable();
    handled
}

/// A delivery waiting for the agent's concurrency limit is kept alive too: with one handler at
/// a time, the second request waits 3.5 s (> `ack_wait`) for the first, and each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_for_a_busy_agent_are_not_redelivered() {
    let handled = slow_echoes(1, 3, None).await;
    assert_eq!(handled, [0, 1, 2], "each request handled exactly once");
}

/// Deliveries fetched ahead wait in the client's buffer, with nothing keeping them alive, while
/// every handler is busy: past `ack_wait` the server queues them for redelivery, and sends that
/// copy even after their handling began. With two handlers (pulls of 2) and five requests that
/// each take 3.5 s (`ack_wait` 1 s), published one at a time (five messages, not one batch),
/// the fourth and fifth wait in the buffer for seconds; each request is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_buffered_past_ack_wait_are_handled_once() {
    let handled = slow_echoes(2, 5, Some(Duration::from_millis(150))).await;
    assert_eq!(
        handled,
        [0, 1, 2, 3, 4],
        "each request handled exactly once"
    );
}

static FLAKY_CALLS: std::sync::Mutex<Vec<i64>> = std::sync::Mutex::new(Vec::new());

/// Takes 3.5 s; fails retryably for 3.
async fn slow_flaky(event: Event<i64>) -> Result<(), ToolError> {
    FLAKY_CALLS.lock().unwrap().push(event.data);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    if event.data == 3 {
        return Err(ToolError::new("busy").retryable());
    }
    Ok(())
}

/// The copies the server sends of a message buffered past `ack_wait` count as its deliveries.
/// Two handlers (pulls of 2), five 3.5 s events published one at a time: events 2 and 3 come
/// in one pull while both handlers are busy, 2 waits for a handler (kept alive), 3 waits in the
/// client's buffer for 3 s and its copy (its second delivery) comes while it is handled. With
/// `max_deliver` 2, its retryable failure is its last: dead-lettered at once by the handler's
/// layer, on attempt 2 (before, it was negatively acknowledged past the server's last
/// delivery; then the bus, not the failure policy, dead-lettered it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_buffered_delivery_count_toward_max_deliver() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    let agent = Agent::new("buffered-flake")
        .use_registered_handlers(false)
        .concurrency(2)
        .max_deliver(2)
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "job.posted",
            slow_flaky,
        ))
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("test");
    for n in 0..5_i64 {
        client
            .publish(Topic::BusinessFacts, "job.posted", n)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("event.dead_lettered").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "not dead-lettered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let notices = t.events_of_type("event.dead_lettered");
    assert_eq!(notices.len(), 1);
    for notice in notices {
        let reason = notice.data["reason"].as_str().unwrap();
        assert!(reason.contains("busy"), "{reason}");
        assert_eq!(notice.data["attempt"], 2, "{notice:?}");
    }
    let mut handled = FLAKY_CALLS.lock().unwrap().clone();
    handled.sort_unstable();
    assert_eq!(handled, [0, 1, 2, 3, 4], "each event handled once");
    agent.shutdown().await.unwrap();
}

/// Takes 3.5 s; fails retryably for 3.
async fn slow_flaky_echo(
    req: Invocation<i64>,
    State(taken): State<Taken>,
) -> Result<i64, ToolError> {
    taken.0.lock().unwrap().push(req.data);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    if req.data == 3 {
        return Err(ToolError::new("busy").retryable());
    }
    Ok(req.data)
}

/// A tool `name` serving `handler` with 2 handlers at once and `max_deliver` 2, its state
/// `taken`.
async fn two_handlers_two_deliveries(
    platform: &Platform,
    name: &str,
    handler: Handler,
    taken: &Taken,
) -> soorma::AgentHandle {
    Tool::new(name)
        .use_registered_handlers(false)
        .concurrency(2)
        .max_deliver(2)
        .with_state(taken.clone())
        .handler(handler)
        .start(platform)
        .await
        .unwrap()
}

/// A tool's failure on the last delivery of a request (a copy the server sent while it was
/// handled counts as one) goes through the tool's failure policy: its caller gets the error
/// reply at once. Before, the handler was told attempt 1 of 2, asked for a retry, and the bus
/// dead-lettered the request without a reply: the caller waited for its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_last_failure_on_a_buffered_delivery_replies_with_the_error() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let taken = Taken::default();
    let handler = Handler::on_invoke("flaky-echo.requested", slow_flaky_echo);
    let tool = two_handlers_two_deliveries(&platform, "buffered-flaky-tool", handler, &taken).await;
    let client = platform.client("test").with_timeout(WAIT);
    let started = tokio::time::Instant::now();
    let spacing = Some(Duration::from_millis(150));
    let calls = invoke_each(&client, "flaky-echo", 5, spacing).await;
    for (n, call) in calls.into_iter().enumerate() {
        match (n, call.await.unwrap()) {
            (3, Err(soorma::Error::Remote { message, .. })) => {
                assert!(message.contains("busy"), "{message}");
            }
            (3, other) => panic!("request 3 should fail with the tool's error: {other:?}"),
            (n, reply) => assert_eq!(reply.unwrap(), n as i64),
        }
    }
    // Three rounds of 3.5 s handling (about 10.5 s), not a caller's timeout (20 s).
    assert!(
        started.elapsed() < Duration::from_secs(14),
        "{:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tool.shutdown().await.unwrap();
    let mut handled = taken.0.lock().unwrap().clone();
    handled.sort_unstable();
    assert_eq!(handled, [0, 1, 2, 3, 4], "each request handled once");
}

/// 0 takes 3.5 s, 1 4.5 s; 2 fails retryably at once; 3 takes 1.5 s; the others answer at once.
async fn batch_flaky(req: Invocation<i64>, State(taken): State<Taken>) -> Result<i64, ToolError> {
    taken.0.lock().unwrap().push(req.data);
    match req.data {
        0 => tokio::time::sleep(Duration::from_millis(3500)).await,
        1 => tokio::time::sleep(Duration::from_millis(4500)).await,
        2 => return Err(ToolError::new("busy").retryable()),
        3 => tokio::time::sleep(Duration::from_millis(1500)).await,
        _ => {}
    }
    Ok(req.data)
}

/// Requests 2 and 3 are stored as one batch, which waits in the client's buffer past
/// `ack_wait` (both handlers are busy with 0 and 1, and 4 waits for one): the server sends a
/// copy, its last delivery (`max_deliver` 2). When 0 is done, 4, 2 and 3 take its handler in
/// turn (1 holds the other for a second more): 2 fails on delivery 1 and asks for a retry;
/// the copy is counted while 3 is handled, so when the batch is settled it has no delivery
/// left. Request 2 is then handled again as that last delivery, and the tool's failure policy
/// sends its caller the error reply. Before, it was dead-lettered unhandled and its caller got
/// no reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_request_that_failed_before_its_last_delivery_gets_its_error_reply() {
    use soorma::EventEnvelope;
    use soorma::bus::{EventFilter, SubscriptionSpec};

    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let mut advisories = max_deliveries_advisories(&platform).await;
    let taken = Taken::default();
    let handler = Handler::on_invoke("batch-flaky.requested", batch_flaky);
    let tool = two_handlers_two_deliveries(&platform, "batch-flaky-tool", handler, &taken).await;
    let bus = platform.bus();
    let spec = SubscriptionSpec::new(
        "batch-flaky-replies",
        Topic::ActionResults,
        EventFilter::only(["batch-flaky.done"]),
    )
    .ephemeral();
    let mut replies = bus.subscribe(spec).await.unwrap();
    let request = |n: i64| {
        EventEnvelope::new(
            format!("req-{n}"),
            "test",
            Topic::ActionRequests,
            "batch-flaky.requested",
        )
        .with_data(json!(n))
        .with_correlation_id(format!("req-{n}"))
        .with_response_event("batch-flaky.done")
    };
    for n in [0, 1, 4] {
        bus.publish(request(n)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    bus.publish_batch(vec![request(2), request(3)])
        .await
        .unwrap();
    // Every reply, until 1.5 s after the fifth request's: one each.
    let mut answers = Vec::new();
    let mut wait = WAIT;
    while let Ok(reply) = tokio::time::timeout(wait, replies.next()).await {
        let reply: soorma::ActionReply =
            serde_json::from_value(reply.unwrap().envelope.data.clone()).unwrap();
        let answer = match reply.success {
            true => reply.result.unwrap().to_string(),
            false => reply.error.unwrap(),
        };
        answers.push((reply.request_id, answer));
        if answers.len() == 5 {
            wait = Duration::from_millis(1500);
        }
    }
    answers.sort();
    assert_eq!(answers.len(), 5, "one reply per request: {answers:?}");
    assert_eq!(
        answers[..2],
        [("req-0".into(), "0".into()), ("req-1".into(), "1".into())]
    );
    assert_eq!(answers[2].0, "req-2");
    assert!(answers[2].1.contains("busy"), "{answers:?}");
    assert_eq!(answers[3], ("req-3".into(), "3".into()));
    assert_eq!(answers[4], ("req-4".into(), "4".into()));
    tool.shutdown().await.unwrap();
    let mut handled = taken.0.lock().unwrap().clone();
    handled.sort_unstable();
    // 2 on both deliveries, 3 once: the batch was not handled again whole.
    assert_eq!(handled, [0, 1, 2, 2, 3, 4]);
    settled_with(None, &mut advisories, &platform, 0).await;
}

/// Publishes `job.posted` envelopes `job-0` to `job-<parts - 1>` together (one batch).
async fn publish_jobs(platform: &Platform, parts: usize) {
    let envelopes = (0..parts)
        .map(|i| {
            soorma::EventEnvelope::new(
                format!("job-{i}"),
                "test",
                Topic::BusinessFacts,
                "job.posted",
            )
        })
        .collect();
    platform.bus().publish_batch(envelopes).await.unwrap();
}

/// A batch message of `parts` envelopes on a subscription with `max_deliver` 2 and `ack_wait`
/// 1 s. The first envelope asks for a retry after `delay` on delivery 1; the second is held past
/// `ack_wait` with no progress: the server sends a copy, which the subscription takes and
/// skips (its message is being handled), and which makes delivery 2 the last. The others are
/// handled. Once the copy is counted, the second asks for a retry too (dead-lettered: its last
/// delivery). Returns when that is settled.
async fn retried_before_and_after_a_copy(
    sub: &mut Box<dyn soorma::bus::Subscription>,
    platform: &Platform,
    parts: usize,
    delay: Duration,
) -> tokio::time::Instant {
    use soorma::bus::Settlement;

    publish_jobs(platform, parts).await;
    let mut deliveries = Vec::new();
    for _ in 0..parts {
        deliveries.push(sub.next().await.unwrap());
    }
    let mut deliveries = deliveries.into_iter();
    let (first, second) = (deliveries.next().unwrap(), deliveries.next().unwrap());
    assert_eq!((first.envelope.id.as_str(), first.attempt), ("job-0", 1));
    first.settle(Settlement::Retry { delay }).await.unwrap();
    for handled in deliveries {
        handled.settle(Settlement::Ack).await.unwrap();
    }
    let copy_counted = async {
        while second.current_attempt() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        d = sub.next() => panic!("a copy of a message being handled was handed out: {d:?}"),
        counted = tokio::time::timeout(Duration::from_secs(5), copy_counted) => {
            counted.expect("the server sends a copy after `ack_wait`");
        }
    }
    assert_eq!(second.current_attempt(), 2, "the copy counts as a delivery");
    let retry = Settlement::Retry {
        delay: Duration::from_millis(10),
    };
    second.settle(retry).await.unwrap();
    tokio::time::Instant::now()
}

/// The first envelope of [`retried_before_and_after_a_copy`], handed out again by `sub` as its
/// message's last delivery.
async fn handed_out_again(sub: &mut Box<dyn soorma::bus::Subscription>) -> soorma::bus::Delivery {
    let again = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("handed out again")
        .unwrap();
    assert_eq!(
        (again.envelope.id.as_str(), again.attempt),
        ("job-0", 2),
        "handed out again as the last delivery"
    );
    again
}

/// The server's `MAX_DELIVERIES` advisories: one means a message on its last delivery was
/// left unsettled past `ack_wait`.
async fn max_deliveries_advisories(platform: &Platform) -> soorma::nats::async_nats::Subscriber {
    let client = platform.nats_client().unwrap();
    let advisories = client
        .subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>")
        .await
        .unwrap();
    client.flush().await.unwrap();
    advisories
}

/// After 3 s, nothing more is handed out by `sub`, no message was left unsettled on its last
/// delivery (`advisories`), and the dead-letter stream holds `dead_letters`.
async fn settled_with(
    sub: Option<&mut Box<dyn soorma::bus::Subscription>>,
    advisories: &mut soorma::nats::async_nats::Subscriber,
    platform: &Platform,
    dead_letters: u64,
) {
    use soorma::nats::async_nats::jetstream;

    match sub {
        Some(sub) => assert!(
            tokio::time::timeout(Duration::from_secs(3), sub.next())
                .await
                .is_err()
        ),
        None => tokio::time::sleep(Duration::from_secs(3)).await,
    }
    if let Ok(advisory) = tokio::time::timeout(Duration::ZERO, advisories.next()).await {
        panic!("a message was left unsettled on its last delivery: {advisory:?}");
    }
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let stored = match js.get_stream("SOORMA_DLQ").await {
        Ok(mut dlq) => dlq.info().await.unwrap().state.messages,
        // Created with the first dead letter.
        Err(e) if e.to_string().contains("stream not found") => 0,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(stored, dead_letters);
}

async fn batch_retrier(platform: &Platform) -> Box<dyn soorma::bus::Subscription> {
    use soorma::bus::{EventFilter, SubscriptionSpec};
    let spec = SubscriptionSpec::new(
        "batch-retrier",
        Topic::BusinessFacts,
        EventFilter::only(["job.posted"]),
    )
    .with_max_deliver(2)
    .with_prefetch(1);
    platform.bus().subscribe(spec).await.unwrap()
}

/// A batch message whose envelopes ask for a retry before and after a copy of it arrives (see
/// [`retried_before_and_after_a_copy`]): the copy is its last delivery, so the batch is not
/// retried whole. The envelope that asked on delivery 1 is handed out again as delivery 2,
/// after the retry delay it asked for (longer than `ack_wait`: the message is kept alive
/// meanwhile), so its handler decides as on any last delivery; asking for a retry again, it is
/// dead-lettered, as the second is. Before, both were dead-lettered, the first never handled on
/// its last delivery (a tool's caller got no error reply); and before that, the batch was
/// negatively acknowledged past its last delivery and the server's `MAX_DELIVERIES` advisory
/// dead-lettered both, one of them a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_out_of_deliveries_hands_out_again_what_asked_for_a_retry_before_it() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let mut advisories = max_deliveries_advisories(&platform).await;
    let mut sub = batch_retrier(&platform).await;
    let delay = Duration::from_millis(1500);
    let asked = retried_before_and_after_a_copy(&mut sub, &platform, 2, delay).await;
    let again = handed_out_again(&mut sub).await;
    assert!(
        asked.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        asked.elapsed()
    );
    let retry = soorma::bus::Settlement::Retry {
        delay: Duration::from_millis(10),
    };
    again.settle(retry).await.unwrap();
    settled_with(Some(&mut sub), &mut advisories, &platform, 2).await;
}

/// As above, with a third envelope handled on delivery 1, and the one handed out again handled
/// this time, after waiting 1.5 s for a handler (kept alive meanwhile): the message is
/// acknowledged with one dead letter (the second envelope's), and the third is not handled
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_handed_out_again_and_handled_settles_its_batch() {
    let server = NatsServer::start();
    let platform = with_ack_wait_of_1s(&server).await;
    let mut advisories = max_deliveries_advisories(&platform).await;
    let mut sub = batch_retrier(&platform).await;
    let delay = Duration::from_millis(10);
    retried_before_and_after_a_copy(&mut sub, &platform, 3, delay).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = handed_out_again(&mut sub).await;
    again.settle(soorma::bus::Settlement::Ack).await.unwrap();
    settled_with(Some(&mut sub), &mut advisories, &platform, 1).await;
}

/// An envelope ready to be handed out again, or still waiting for its retry delay, when its
/// subscription is closed (the agent stopping) or dropped, is dead-lettered as still failing;
/// its batch is settled, not left to the server's advisory (which would dead-letter its
/// handled envelopes too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_to_hand_out_again_are_dead_lettered_when_the_subscription_goes() {
    for (delay, close) in [
        (Duration::from_millis(10), true),
        (Duration::from_millis(1500), true),
        (Duration::from_millis(1500), false),
    ] {
        let server = NatsServer::start();
        let platform = with_ack_wait_of_1s(&server).await;
        let mut advisories = max_deliveries_advisories(&platform).await;
        let mut sub = batch_retrier(&platform).await;
        retried_before_and_after_a_copy(&mut sub, &platform, 3, delay).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if close {
            sub.close().await;
            assert!(
                sub.next().await.is_none(),
                "a closed subscription hands out nothing"
            );
            let js =
                soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
            let mut dlq = js.get_stream("SOORMA_DLQ").await.unwrap();
            assert_eq!(
                dlq.info().await.unwrap().state.messages,
                2,
                "settled once closed"
            );
        }
        drop(sub);
        settled_with(None, &mut advisories, &platform, 2).await;
    }
}

/// A batch received but not all handed out when its subscription is closed (an agent
/// stopping): the envelopes not handed out are settled as retries, so the batch comes back at
/// once (here to the next subscription of the consumer) instead of after `ack_wait` (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_subscription_hands_back_a_batch_it_did_not_hand_out() {
    use soorma::bus::{EventFilter, Settlement, SubscriptionSpec};

    let server = NatsServer::start();
    let platform = connect(&server).await;
    let spec = || {
        SubscriptionSpec::new(
            "batch-closer",
            Topic::BusinessFacts,
            EventFilter::only(["job.posted"]),
        )
        .with_prefetch(1)
    };
    let mut sub = platform.bus().subscribe(spec()).await.unwrap();
    publish_jobs(&platform, 3).await;
    let first = sub.next().await.unwrap();
    first.settle(Settlement::Ack).await.unwrap();
    let closed = tokio::time::Instant::now();
    sub.close().await;
    drop(sub);
    let mut next = platform.bus().subscribe(spec()).await.unwrap();
    let mut again = Vec::new();
    for _ in 0..3 {
        let delivery = tokio::time::timeout(Duration::from_secs(10), next.next())
            .await
            .expect("the batch comes back before ack_wait")
            .unwrap();
        again.push((delivery.envelope.id.clone(), delivery.attempt));
        delivery.settle(Settlement::Ack).await.unwrap();
    }
    assert!(closed.elapsed() < Duration::from_secs(10));
    // Whole, as any batch retried: at least once.
    let expected: Vec<_> = (0..3).map(|i| (format!("job-{i}"), 2)).collect();
    assert_eq!(again, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_entries_expire_when_heartbeats_stop() {
    let server = NatsServer::start();
    let config = NatsConfig::new(server.url())
        // Heartbeats every 500 ms: 5.5 s of slack for a loaded machine's pauses.
        .with_registry_ttl(Duration::from_secs(6), Duration::from_millis(500));
    let observer = soorma::nats::connect(config.clone()).await.unwrap();
    {
        let doomed = soorma::nats::connect(config.clone()).await.unwrap();
        let def = soorma::AgentDefinition::new("ghost-1", "ghost", soorma::AgentKind::Tool);
        doomed.registry().register(def).await.unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(
            observer.discovery().all().await.unwrap().len(),
            1,
            "heartbeats keep it alive past the TTL"
        );
        // `doomed` is dropped here: its heartbeat stops, as if the process had died.
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while !observer.discovery().all().await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry did not expire"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A raw subscription of `group` to `job.posted` with a byte budget of 4 KiB (two of the
/// 3 KB events from [`publish_padded`] do not fit together).
async fn on_a_4_kib_budget(
    platform: &Platform,
    group: &str,
    max_deliver: u32,
) -> Box<dyn soorma::bus::Subscription> {
    use soorma::bus::{EventFilter, SubscriptionSpec};
    let spec = SubscriptionSpec::new(
        group,
        Topic::BusinessFacts,
        EventFilter::only(["job.posted"]),
    )
    .with_max_deliver(max_deliver)
    .with_prefetch(2);
    platform.bus().subscribe(spec).await.unwrap()
}

async fn budget_of_4_kib(server: &NatsServer, ack_wait: Duration) -> Platform {
    let config = NatsConfig::new(server.url())
        .with_ack_wait(ack_wait)
        .with_max_in_flight_bytes(4096);
    soorma::nats::connect(config).await.unwrap()
}

/// Publishes `job.posted` events 0..n of about 3 KB each, one message each.
async fn publish_padded(platform: &Platform, n: i64) {
    let client = platform.client("test");
    for i in 0..n {
        client
            .publish(
                Topic::BusinessFacts,
                "job.posted",
                json!({"n": i, "padding": "x".repeat(3000)}),
            )
            .await
            .unwrap();
    }
}

/// The first delivery of `sub`, then proof that the second waits for bytes (nothing handed
/// out for `waiting`, while the first is kept alive).
async fn first_while_the_second_waits(
    sub: &mut Box<dyn soorma::bus::Subscription>,
    waiting: Duration,
) -> soorma::bus::Delivery {
    let first = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.envelope.data["n"], 0);
    // The first is kept alive meanwhile, as a handler's is.
    let second = first
        .keep_alive_while(tokio::time::timeout(waiting, sub.next()))
        .await;
    assert!(
        second.is_err(),
        "the second event does not fit the budget beside the first"
    );
    first
}

/// A message waiting for its bytes is kept alive: held for 7 s behind the first with
/// `ack_wait` 3 s (kept alive every 1 s: 2 s of slack for a loaded machine), it is handed out
/// once the first is settled, and the server never redelivered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_waiting_for_bytes_is_kept_alive() {
    use soorma::bus::Settlement;
    use soorma::nats::async_nats::jetstream;

    let server = NatsServer::start();
    let platform = budget_of_4_kib(&server, Duration::from_secs(3)).await;
    let mut sub = on_a_4_kib_budget(&platform, "waiter", 3).await;
    publish_padded(&platform, 2).await;
    let first = first_while_the_second_waits(&mut sub, Duration::from_secs(7)).await;
    first.settle(Settlement::Ack).await.unwrap();
    let second = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (second.envelope.data["n"].as_i64(), second.attempt),
        (Some(1), 1)
    );
    second.settle(Settlement::Ack).await.unwrap();
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let info = js
        .get_stream("SOORMA_BUSINESS_FACTS")
        .await
        .unwrap()
        .consumer_info("waiter__business-facts")
        .await
        .unwrap();
    // Two deliveries in all: no copy of either was sent.
    assert_eq!(info.delivered.consumer_sequence, 2, "{info:?}");
    assert_eq!(info.num_ack_pending, 0, "{info:?}");
}

/// A subscription closed while a message waits for its bytes hands that message back at once
/// (delivered again long before `ack_wait`, 30 s by default); on its last delivery, it is
/// dead-lettered instead, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_waiting_for_bytes_is_handed_back_when_its_subscription_closes() {
    use soorma::bus::Settlement;

    let server = NatsServer::start();
    let platform = budget_of_4_kib(&server, Duration::from_secs(30)).await;
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    let mut advisories = max_deliveries_advisories(&platform).await;
    let mut sub = on_a_4_kib_budget(&platform, "closer", 3).await;
    let mut last = on_a_4_kib_budget(&platform, "closer-last", 1).await;
    publish_padded(&platform, 2).await;

    let first = first_while_the_second_waits(&mut sub, Duration::from_secs(1)).await;
    sub.close().await;
    first.settle(Settlement::Ack).await.unwrap();
    let mut again = on_a_4_kib_budget(&platform, "closer", 3).await;
    let second = tokio::time::timeout(Duration::from_secs(5), again.next())
        .await
        .expect("handed back at once, not after ack_wait")
        .unwrap();
    assert_eq!(
        (second.envelope.data["n"].as_i64(), second.attempt),
        (Some(1), 2)
    );
    second.settle(Settlement::Ack).await.unwrap();

    let first = first_while_the_second_waits(&mut last, Duration::from_secs(1)).await;
    last.close().await;
    first.settle(Settlement::Ack).await.unwrap();
    settled_with(Some(&mut again), &mut advisories, &platform, 1).await;
    let notices = t.events_of_type("event.dead_lettered");
    assert_eq!(notices.len(), 1, "{notices:?}");
    let reason = notices[0].data["reason"].as_str().unwrap();
    assert!(
        reason.contains("subscription closed on its last delivery"),
        "{reason}"
    );
    assert_eq!(notices[0].data["attempt"], 1);
}

static ROLLING: std::sync::Mutex<Vec<(&str, i64)>> = std::sync::Mutex::new(Vec::new());

async fn posted_by_old(event: Event<i64>) -> Result<(), ToolError> {
    ROLLING.lock().unwrap().push(("posted by old", event.data));
    Ok(())
}

async fn posted_by_new(event: Event<i64>) -> Result<(), ToolError> {
    ROLLING.lock().unwrap().push(("posted by new", event.data));
    Ok(())
}

async fn closed_by_new(event: Event<i64>) -> Result<(), ToolError> {
    ROLLING.lock().unwrap().push(("closed", event.data));
    Ok(())
}

/// A rolling upgrade: an instance of the agent's next version, with a handler the running one
/// lacks, starts and widens the agent's consumer (one per agent and topic, shared by its
/// instances). The old instance is delivered the new kind of event too; it hands each back
/// instead of acknowledging it unhandled, so every one reaches the new instance, once, and
/// nothing is dead-lettered. (Before, the old instance acknowledged about half of them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_only_a_newer_version_handles_reach_it_during_a_rolling_upgrade() {
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    // The server hands a redelivery to the next waiting pull, the two instances' in turn: an
    // event goes to the new instance within a few deliveries, and 30 leave ample room, so a
    // dead letter here is a bug.
    let version = || {
        Agent::new("rolling")
            .use_registered_handlers(false)
            .max_deliver(30)
    };
    let old = version()
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "job.posted",
            posted_by_old,
        ))
        .start(&platform)
        .await
        .unwrap();
    let new = version()
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "job.posted",
            posted_by_new,
        ))
        .handler(Handler::on_event(
            Topic::BusinessFacts,
            "job.closed",
            closed_by_new,
        ))
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("test");
    for (kind, n) in ["job.posted", "job.closed"]
        .into_iter()
        .flat_map(|kind| (0..20_i64).map(move |n| (kind, n)))
    {
        client.publish(Topic::BusinessFacts, kind, n).await.unwrap();
    }
    let handled = |kind: &str| {
        let mut v: Vec<i64> = ROLLING
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(kind))
            .map(|(_, n)| *n)
            .collect();
        v.sort_unstable();
        v
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while handled("closed").len() < 20 || handled("posted").len() < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not all handled: closed {:?}, posted {:?}",
            handled("closed"),
            handled("posted")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Past the hand-back delay: a copy handled twice would show.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let all: Vec<i64> = (0..20).collect();
    assert_eq!(handled("closed"), all, "each new event handled once");
    assert_eq!(handled("posted"), all, "each old event handled once");
    assert!(
        !handled("posted by old").is_empty(),
        "the old instance handles what it has a handler for"
    );
    assert!(t.events_of_type("event.dead_lettered").is_empty());
    old.shutdown().await.unwrap();
    new.shutdown().await.unwrap();
}

/// A registry key written around the SDK that the KV store cannot read (a raw publish on the
/// bucket's subjects) is skipped: the other agents are still listed (it failed every listing:
/// discovery, the consumer check before a request, the MCP catalog).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_key_the_store_cannot_read_does_not_break_listings() {
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let def = soorma::AgentDefinition::new("tool-1", "tool", soorma::AgentKind::Tool);
    platform.registry().register(def).await.unwrap();
    let js = soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
    js.publish("$KV.soorma_registry.agents.a@b", "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let agents = platform.registry().agents().await.unwrap();
    let ids: Vec<&str> = agents.iter().map(|a| a.agent_id.as_str()).collect();
    assert_eq!(ids, ["tool-1"]);
}

/// A key listing whose caller goes away mid-way (its future dropped once the server has its
/// consumer) still deletes that consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_listing_dropped_mid_way_leaves_no_consumer() {
    use soorma::state::StateKey;
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let store = platform.state();
    let writes = (0..2_000).map(|i| {
        let store = store.clone();
        async move {
            let k = StateKey::new("many", "acme", format!("k{i}"));
            store.put(&k, b"{}".to_vec()).await.unwrap();
        }
    });
    futures_util::future::join_all(writes).await;
    let mut dropped = 0;
    for _ in 0..20 {
        let listing = store.keys("many", "acme");
        tokio::pin!(listing);
        let watching = async {
            while consumer_count(&platform).await == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            keys = &mut listing => assert_eq!(keys.unwrap().len(), 2_000),
            () = watching => dropped += 1,
        }
        if dropped >= 3 {
            break;
        }
    }
    assert!(dropped >= 1, "no listing was caught mid-way");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while consumer_count(&platform).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a dropped listing's consumer is still on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_keys_reads_one_tenant_and_skips_deleted_keys() {
    use soorma::state::StateKey;
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let store = platform.state();
    assert!(store.keys("notes", "acme").await.unwrap().is_empty());
    for (tenant, key) in [
        ("acme", "b"),
        ("acme", "a.with.dots"),
        ("acme", "gone"),
        ("acme", "sp ace"),
        ("acme-2", "other"),
        ("globex", "x"),
    ] {
        let k = StateKey::new("notes", tenant, key);
        store.put(&k, b"{}".to_vec()).await.unwrap();
    }
    store
        .delete(&StateKey::new("notes", "acme", "gone"))
        .await
        .unwrap();
    assert_eq!(
        store.keys("notes", "acme").await.unwrap(),
        ["a.with.dots", "b", "sp ace"]
    );
    assert_eq!(store.keys("notes", "globex").await.unwrap(), ["x"]);
    assert!(store.keys("notes", "initech").await.unwrap().is_empty());
    // Each listing deleted its consumer.
    assert_eq!(consumer_count(&platform).await, 0);

    // Keys written around the SDK under tenants that are no valid tenant ids are skipped when
    // the bucket's tenants are listed (timer recovery and the memory sweep list them, then
    // each tenant's keys: one such key stopped them for every tenant).
    let js = soorma::nats::async_nats::jetstream::new(platform.nats_client().unwrap().clone());
    let notes = js.get_key_value("soorma_notes").await.unwrap();
    for bad in ["a=b.6869", &format!("{}.6869", "t".repeat(65))] {
        notes.put(bad, "{}".into()).await.unwrap();
    }
    assert_eq!(
        store.tenants("notes").await.unwrap(),
        ["acme", "acme-2", "globex"]
    );
}

#[tokio::test]
async fn token_auth_is_required_and_used() {
    let server = NatsServer::start_with(&["-js", "--auth", "s3cret"]);
    let denied = soorma::nats::connect(NatsConfig::new(server.url()))
        .await
        .unwrap_err();
    assert!(matches!(denied, Error::Config(_)), "{denied}");
    let platform = soorma::nats::connect(
        NatsConfig::new(server.url()).with_auth(NatsAuth::Token("s3cret".into())),
    )
    .await
    .unwrap();
    assert_eq!(platform.kind(), "nats");
}

#[tokio::test]
async fn jetstream_off_and_unreachable_servers_are_clear_errors() {
    let server = NatsServer::start_with(&[]);
    let err = soorma::nats::connect(NatsConfig::new(server.url()))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("JetStream") && msg.contains("-js"), "{msg}");
    drop(server);
    let err = soorma::nats::connect(NatsConfig::new("nats://127.0.0.1:1"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot connect to NATS"), "{err}");
}

#[tokio::test]
async fn from_env_selects_nats_when_the_url_is_set() {
    let server = NatsServer::start();
    // SAFETY: no other test in this binary reads or writes these variables.
    unsafe {
        std::env::set_var("SOORMA_NATS_URL", server.url());
        std::env::set_var("SOORMA_NATS_TOKEN", "t");
        std::env::set_var("SOORMA_NATS_CREDS", "/nonexistent.creds");
    }
    let err = Platform::from_env().await.unwrap_err();
    assert!(err.to_string().contains("only one of"), "{err}");
    unsafe {
        std::env::remove_var("SOORMA_NATS_TOKEN");
        std::env::remove_var("SOORMA_NATS_CREDS");
    }
    let platform = Platform::from_env().await.unwrap();
    unsafe { std::env::remove_var("SOORMA_NATS_URL") };
    assert_eq!(platform.kind(), "nats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_survives_a_planner_restart() {
    let server = NatsServer::start();
    // The first planner process starts the plan; its search request waits for a tool.
    let first = connect(&server).await;
    let planner = agents::research_planner(false).start(&first).await.unwrap();
    // The tools ran before (their consumers exist) but are down now.
    agents::research_tools()
        .start(&first)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
    let client_platform = connect(&server).await;
    let t = TestPlatform::with_platform(client_platform.clone())
        .await
        .unwrap();
    let client = client_platform.client("test").with_timeout(WAIT * 2);
    let goal = tokio::spawn(async move {
        client
            .invoke::<serde_json::Value>("research.goal", json!({"topic": "kv"}), "research.done")
            .await
    });
    t.expect_event("search.requested", WAIT).await.unwrap();
    // The planner process goes away (its connection too)...
    planner.shutdown().await.unwrap();
    drop(first);
    // ...the tools come back, and a new planner process finishes the plan from KV.
    let second = connect(&server).await;
    let tools = agents::research_tools().start(&second).await.unwrap();
    let planner = agents::research_planner(false)
        .start(&second)
        .await
        .unwrap();
    let report = goal.await.unwrap().unwrap();
    assert_eq!(report["summary"], "2 sources about kv");
    // The observer sees the reply too (the client may have had it first).
    t.expect_event("research.done", WAIT).await.unwrap();
    assert_eq!(t.events_of_type("research.done").len(), 1);
    planner.shutdown().await.unwrap();
    tools.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_keys_sees_every_key_while_they_are_being_updated() {
    use soorma::state::StateKey;
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let store = platform.state().clone();
    let names: Vec<String> = (0..8).map(|i| format!("plan-{i}")).collect();
    for n in &names {
        store
            .put(&StateKey::new("plans-stress", "default", n), b"{}".to_vec())
            .await
            .unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (store, names, stop) = (store.clone(), names.clone(), stop.clone());
        async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = &names[(i % names.len() as u64) as usize];
                let value = format!("{{\"v\": {i}}}").into_bytes();
                store
                    .put(&StateKey::new("plans-stress", "default", n), value)
                    .await
                    .unwrap();
                i += 1;
            }
        }
    });
    for round in 0..100 {
        let keys = store.keys("plans-stress", "default").await.unwrap();
        assert_eq!(keys, names, "round {round}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
}

/// Streams and buckets an operator created beforehand, with other settings than the SDK's, are
/// used as they are: starting agents rewrites none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_streams_and_buckets_are_adopted_as_they_are() {
    use soorma::nats::async_nats::jetstream::{self, kv, stream};
    let server = NatsServer::start();
    let js = jetstream::new(
        soorma::nats::async_nats::connect(server.url())
            .await
            .unwrap(),
    );
    js.create_stream(stream::Config {
        name: "SOORMA_ACTION_REQUESTS".into(),
        subjects: vec!["soorma.*.action-requests.>".into()],
        storage: stream::StorageType::Memory,
        max_age: Duration::from_secs(3600),
        description: Some("the operator's".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let registry_bucket = kv::Config {
        bucket: "soorma_registry".into(),
        history: 5,
        max_age: Duration::from_secs(120),
        storage: stream::StorageType::Memory,
        ..Default::default()
    };
    js.create_key_value(registry_bucket).await.unwrap();

    // Configured otherwise (file storage, 24 h): what exists wins.
    let platform = connect(&server).await;
    let calc = agents::calculator().start(&platform).await.unwrap();
    let reply = platform
        .client("adopter")
        .with_timeout(WAIT)
        .request(
            "calculate.requested",
            json!({"expression": "6*7"}),
            "calc.done",
        )
        .await
        .unwrap();
    assert_eq!(
        reply.into_result::<serde_json::Value>().unwrap()["result"],
        42.0
    );
    calc.shutdown().await.unwrap();
    // Started again: still as the operator made them.
    let again = connect(&server).await;
    agents::calculator()
        .start(&again)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();

    let requests = js.get_stream("SOORMA_ACTION_REQUESTS").await.unwrap();
    let config = &requests.cached_info().config;
    assert_eq!(config.storage, stream::StorageType::Memory);
    assert_eq!(config.max_age, Duration::from_secs(3600));
    assert_eq!(config.description.as_deref(), Some("the operator's"));
    let registry = js.get_stream("KV_soorma_registry").await.unwrap();
    let config = &registry.cached_info().config;
    assert_eq!(config.max_messages_per_subject, 5);
    assert_eq!(config.max_age, Duration::from_secs(120));
    assert_eq!(config.storage, stream::StorageType::Memory);
    // What the SDK created follows its configuration.
    let results = js.get_stream("SOORMA_ACTION_RESULTS").await.unwrap();
    assert_eq!(
        results.cached_info().config.storage,
        stream::StorageType::File
    );
}

/// An existing stream or bucket the SDK cannot work with is a configuration error naming it and
/// the field (not "JetStream is not available").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_asset_the_sdk_cannot_use_is_a_named_configuration_error() {
    use soorma::nats::async_nats::jetstream::{self, kv, stream};
    let server = NatsServer::start();
    let js = jetstream::new(
        soorma::nats::async_nats::connect(server.url())
            .await
            .unwrap(),
    );

    // A registry whose entries never expire.
    js.create_key_value(kv::Config {
        bucket: "one_registry".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = soorma::nats::connect(NatsConfig::new(server.url()).with_prefix("one"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(
        msg.contains("KV bucket `one_registry`") && msg.contains("`max_age`"),
        "{msg}"
    );
    assert!(!msg.contains("JetStream is not available"), "{msg}");

    // An event stream that does not keep the SDK's subjects.
    js.create_stream(stream::Config {
        name: "TWO_ACTION_REQUESTS".into(),
        subjects: vec!["two.acme.action-requests.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let platform = soorma::nats::connect(NatsConfig::new(server.url()).with_prefix("two"))
        .await
        .unwrap();
    let err = platform
        .client("c")
        .publish(Topic::ActionRequests, "calculate.requested", json!({}))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(
        msg.contains("stream `TWO_ACTION_REQUESTS`")
            && msg.contains("`subjects`")
            && msg.contains("two.*.action-requests.>"),
        "{msg}"
    );

    // Event streams that would let a tenant purge every tenant's events, store a retried
    // publish twice, or refuse the SDK's batches: each refused at its first use, naming the
    // field.
    let unsafe_streams = [
        (
            "rollup",
            stream::Config {
                allow_rollup: true,
                ..Default::default()
            },
            "`allow_rollup_hdrs`",
        ),
        (
            "window",
            stream::Config {
                duplicate_window: Duration::from_secs(10),
                ..Default::default()
            },
            "`duplicate_window`",
        ),
        (
            "small",
            stream::Config {
                max_message_size: 64 * 1024,
                ..Default::default()
            },
            "`max_msg_size`",
        ),
    ];
    for (prefix, config, field) in unsafe_streams {
        let name = format!("{}_ACTION_REQUESTS", prefix.to_uppercase());
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("{prefix}.*.action-requests.>")],
            ..config
        })
        .await
        .unwrap();
        let platform = soorma::nats::connect(NatsConfig::new(server.url()).with_prefix(prefix))
            .await
            .unwrap();
        let err = platform
            .client("c")
            .publish(Topic::ActionRequests, "calculate.requested", json!({}))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Config(_)), "{prefix}: {err:?}");
        assert!(
            msg.contains(&format!("stream `{name}`")) && msg.contains(field),
            "{prefix}: {msg}"
        );
    }

    // More replicas than servers: the server's refusal, naming the stream.
    let platform = soorma::nats::connect(
        NatsConfig::new(server.url())
            .with_prefix("three")
            .with_replicas(3),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&platform, Error::Config(m) if m.contains("three_registry")),
        "{platform:?}"
    );
}

#[tokio::test]
async fn a_url_list_connects_and_a_bad_entry_is_named() {
    let server = NatsServer::start();
    let list = format!("nats://127.0.0.1:1, {} ", server.url());
    let platform = soorma::nats::connect(NatsConfig::new(list)).await.unwrap();
    assert_eq!(platform.kind(), "nats");
    let err = soorma::nats::connect(NatsConfig::new(format!("{},nats://h:99999", server.url())))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("`nats://h:99999`")),
        "{err:?}"
    );
}

async fn echo(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data)
}

/// 10,000 client calls (each from a fresh client for its tenant, as the gateway makes them) and
/// 1,000 registry listings and discovery queries leave the server's consumer count where it was:
/// clients wait for replies on core subscriptions and registry reads use no consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_calls_and_registry_reads_leave_no_consumer_behind() {
    let started = std::time::Instant::now();
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let tool = Tool::new("echo")
        .use_registered_handlers(false)
        .concurrency(64)
        .handler(Handler::on_invoke("echo.requested", echo))
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("soak").with_timeout(WAIT);
    // The first call creates the streams; the tool's consumer exists already.
    let one: i64 = client
        .invoke("echo.requested", 1, "echo.done")
        .await
        .unwrap();
    assert_eq!(one, 1);
    let before = consumer_count(&platform).await;
    let mut highest = before;

    for batch in 0..100_i64 {
        let calls = (0..100_i64).map(|i| {
            let n = batch * 100 + i;
            // A new client per call, as the gateway makes one per request for its tenant.
            let tenant = client.with_tenant(format!("t{}", n % 7));
            async move {
                let echoed: i64 = tenant.invoke("echo.requested", n, "echo.done").await?;
                assert_eq!(echoed, n);
                Ok::<(), soorma::Error>(())
            }
        });
        for outcome in futures_util::future::join_all(calls).await {
            outcome.unwrap();
        }
        let listings = (0..10).map(|_| async {
            let agents = platform.registry().agents().await?;
            let consumers = platform
                .discovery()
                .by_consumed_event("echo.requested")
                .await?;
            Ok::<_, soorma::Error>((agents.len(), consumers.len()))
        });
        for outcome in futures_util::future::join_all(listings).await {
            assert_eq!(outcome.unwrap(), (1, 1));
        }
        if batch % 10 == 9 {
            highest = highest.max(consumer_count(&platform).await);
        }
    }
    let after = consumer_count(&platform).await;
    assert_eq!(
        (after, highest),
        (before, before),
        "the consumer count stays flat (before, after, highest seen)"
    );
    tool.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

/// The benchmark's memory phase in small (it stalled after 2,000–4,400 tasks on a connection
/// that had served a tool and a fan-out before): thousands of tasks submitted on one connection
/// are all handled, with progress at least every 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_tasks_on_one_reused_connection_are_all_handled() {
    let server = NatsServer::start();
    let platform = connect(&server).await;
    // The connection serves a tool and a fan-out first, as in the benchmark.
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::batcher()).await.unwrap();
    t.start(agents::upper_tool()).await.unwrap();
    let client = platform.client("bench");
    for _ in 0..20 {
        let out: Vec<String> = client
            .invoke(
                "batch.requested",
                json!({"items": ["a", "b"]}),
                "batch.completed",
            )
            .await
            .unwrap();
        assert_eq!(out, ["A", "B"]);
    }
    t.shutdown().await.unwrap();
    let tasks: u32 = std::env::var("SOORMA_TEST_PARKED_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let parker = soorma_tests::agents::parker()
        .start(&platform)
        .await
        .unwrap();
    soorma_tests::agents::park_and_wait(
        &client.bus(),
        tasks,
        Duration::from_secs(20),
        Duration::from_millis(200),
        |_| {},
    )
    .await;
    parker.shutdown().await.unwrap();
}

/// How long `echo_or_linger` takes for a negative number.
const LINGER: Duration = Duration::from_secs(8);
/// How many rounds of 201 concurrent calls (one slow) the test makes.
const ROUNDS: i64 = 3;

async fn echo_or_linger(req: Invocation<i64>) -> Result<i64, ToolError> {
    if req.data < 0 {
        tokio::time::sleep(LINGER).await;
    }
    Ok(req.data)
}

/// Requests of concurrent callers published at the same moment share stored messages, and
/// each caller still gets its reply as soon as it is ready: a slow request does not hold the
/// replies of the others stored with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_share_stored_messages_but_not_their_replies_wait() {
    use soorma::nats::async_nats::jetstream;

    let server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(
        Tool::new("echo")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("echo.requested", echo_or_linger)),
    )
    .await
    .unwrap();
    let client = t.client();
    let call = |n: i64| {
        let client = client.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r: i64 = client
                .invoke("echo.requested", n, "echo.completed")
                .await
                .unwrap();
            assert_eq!(r, n);
            started.elapsed()
        })
    };
    for round in 0..ROUNDS {
        // The slow one among the fast ones: it goes in a batch with some of them.
        let mut fast: Vec<_> = (0..100).map(|n| call(round * 1000 + n)).collect();
        let slow = call(-1 - round);
        fast.extend((100..200).map(|n| call(round * 1000 + n)));
        for f in fast {
            let took = f.await.unwrap();
            // Far below the slow one's time, with room for a loaded machine's pauses.
            assert!(took < LINGER / 2, "a fast call took {took:?}");
        }
        assert!(slow.await.unwrap() >= LINGER);
    }
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let mut stream = js.get_stream("SOORMA_ACTION_REQUESTS").await.unwrap();
    let stored = stream.info().await.unwrap().state.messages;
    assert!(
        stored < ROUNDS as u64 * 201,
        "{stored} messages stored for {} requests",
        ROUNDS as u64 * 201
    );
    eprintln!(
        "{stored} messages stored for {} requests",
        ROUNDS as u64 * 201
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_watch_replays_the_bucket_then_reports_every_change_from_any_connection() {
    use soorma::state::{StateChange, StateKey};
    let server = NatsServer::start();
    let writer = connect(&server).await;
    let store = writer.state().clone();
    // Keys that are not subject tokens are stored hex-encoded; the watch decodes them.
    let odd = "7:support:3:ann:0001";
    store
        .put(&StateKey::new("watched", "acme", "a"), b"1".to_vec())
        .await
        .unwrap();
    store
        .put(&StateKey::new("watched", "globex", odd), b"2".to_vec())
        .await
        .unwrap();
    store
        .put(&StateKey::new("watched", "acme", "gone"), b"3".to_vec())
        .await
        .unwrap();
    store
        .delete(&StateKey::new("watched", "acme", "gone"))
        .await
        .unwrap();
    let reader = connect(&server).await;
    let mut watch = reader.state().watch("watched").await.unwrap();
    let mut next = async || {
        tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("a change")
            .expect("watching")
            .expect("no error")
    };
    let mut live = std::collections::BTreeMap::new();
    loop {
        match next().await {
            StateChange::Put {
                tenant, key, value, ..
            } => {
                live.insert((tenant, key), value);
            }
            StateChange::Delete { tenant, key, .. } => {
                live.remove(&(tenant, key));
            }
            StateChange::Current => break,
            other => panic!("{other:?}"),
        }
    }
    let expected: std::collections::BTreeMap<_, _> = [
        (("acme".to_owned(), "a".to_owned()), b"1".to_vec()),
        (("globex".to_owned(), odd.to_owned()), b"2".to_vec()),
    ]
    .into();
    assert_eq!(live, expected);
    let r = store
        .put(&StateKey::new("watched", "acme", "a"), b"4".to_vec())
        .await
        .unwrap();
    assert!(
        matches!(next().await, StateChange::Put { key, value, revision, .. } if key == "a" && value == b"4" && revision == r)
    );
    // A conditional delete with a stale revision changes nothing; with the right one it deletes.
    assert!(matches!(
        store
            .delete_if(&StateKey::new("watched", "acme", "a"), r - 1)
            .await,
        Err(soorma::Error::Conflict { .. })
    ));
    store
        .delete_if(&StateKey::new("watched", "acme", "a"), r)
        .await
        .unwrap();
    assert!(matches!(next().await, StateChange::Delete { key, .. } if key == "a"));
    // An empty bucket is current at once.
    let mut empty = reader.state().watch("never_written").await.unwrap();
    let first = tokio::time::timeout(WAIT, empty.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first, StateChange::Current);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_rebuilt_from_the_store_after_a_server_restart() {
    use soorma::memory::{Document, LexicalEmbedder, Memory, Query, Scope};
    let mut server = NatsServer::start();
    {
        let platform = connect(&server).await;
        let memory = Memory::builder(&platform)
            .embedder(LexicalEmbedder::new(128))
            .build()
            .await
            .unwrap();
        let acme = memory.tenant("acme").unwrap();
        for i in 0..50 {
            acme.knowledge()
                .upsert(
                    Document::new(format!("note number {i} about topic{i}")).id(format!("n{i}")),
                )
                .await
                .unwrap();
        }
        acme.working(Scope::plan("p"))
            .unwrap()
            .set("step", &3)
            .await
            .unwrap();
    }
    server.restart();
    let platform = connect(&server).await;
    let memory = Memory::builder(&platform)
        .embedder(LexicalEmbedder::new(128))
        .build()
        .await
        .unwrap();
    let acme = memory.tenant("acme").unwrap();
    let hits = acme
        .knowledge()
        .query(Query::new("topic17").k(1))
        .await
        .unwrap();
    assert_eq!(hits[0].id, "n17");
    assert_eq!(
        acme.knowledge()
            .query(Query::new("note").k(100))
            .await
            .unwrap()
            .len(),
        50
    );
    assert_eq!(
        acme.working(Scope::plan("p"))
            .unwrap()
            .get::<u32>("step")
            .await
            .unwrap(),
        Some(3)
    );
}

/// An agent named outside a subject token (`orders.v1`) had a consumer named by replacing
/// characters (`orders_v1__...`), shared with an agent named `orders_v1`. Its consumer now has
/// a name of its own; the first start after the upgrade takes over where the old consumer's
/// acknowledgements stopped (nothing published meanwhile is skipped, nothing acknowledged in
/// order before is handled again) — unless the old consumer was the namesake agent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_consumer_takes_over_where_the_old_one_stopped() {
    use soorma::EventEnvelope;
    use soorma::bus::{EventFilter, Settlement, SubscriptionSpec};
    use soorma::nats::async_nats::jetstream::{self, consumer};

    let server = NatsServer::start();
    let platform = connect(&server).await;
    let bus = platform.bus();
    let fact = |id: &str| EventEnvelope::new(id, "test", Topic::BusinessFacts, "order.placed");
    bus.publish(fact("before")).await.unwrap();

    // The older release's consumer for `orders.v1`: it handled e1, not e2.
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let stream = js.get_stream("SOORMA_BUSINESS_FACTS").await.unwrap();
    // A consumer as the older release made them, described as `group`'s.
    let old_consumer = |name: &'static str, group: &'static str| {
        stream.create_consumer(consumer::pull::Config {
            durable_name: Some(name.into()),
            description: Some(format!("soorma consumer group `{group}`")),
            filter_subject: "soorma.*.business-facts.>".into(),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy: consumer::DeliverPolicy::New,
            ..Default::default()
        })
    };
    let old: consumer::PullConsumer = old_consumer("orders_v1__business-facts", "orders.v1")
        .await
        .unwrap();
    bus.publish(fact("e1")).await.unwrap();
    bus.publish(fact("e2")).await.unwrap();
    let mut handled = old.fetch().max_messages(1).messages().await.unwrap();
    let e1 = handled.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&e1.payload).contains("\"e1\""));
    e1.double_ack().await.unwrap();
    // Published while the agent is being upgraded.
    bus.publish(fact("e3")).await.unwrap();

    let spec = || SubscriptionSpec::new("orders.v1", Topic::BusinessFacts, EventFilter::All);
    let mut sub = bus.subscribe(spec()).await.unwrap();
    for expected in ["e2", "e3"] {
        let d = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.envelope.id, expected);
        d.settle(Settlement::Ack).await.unwrap();
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sub.next())
            .await
            .is_err(),
        "e1 was handled by the old consumer"
    );
    sub.close().await;
    drop(sub);

    // Its own consumer now; once the old one is deleted (as the log says), starting again
    // keeps its place (and the agent named `orders_v1` has another consumer).
    let mut names = Vec::new();
    let mut listed = stream.consumer_names();
    while let Some(name) = listed.next().await {
        names.push(name.unwrap());
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("orders_v1-") && n.ends_with("__business-facts")),
        "{names:?}"
    );
    stream
        .delete_consumer("orders_v1__business-facts")
        .await
        .unwrap();
    let mut sub = bus.subscribe(spec()).await.unwrap();
    bus.publish(fact("e4")).await.unwrap();
    let d = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.envelope.id, "e4");
    d.settle(Settlement::Ack).await.unwrap();

    // `billing.v2`'s old name is the consumer of the agent `billing_v2` (its description
    // says so): that one is left alone, and `billing.v2` starts at new events.
    let mut namesake: consumer::PullConsumer =
        old_consumer("billing_v2__business-facts", "billing_v2")
            .await
            .unwrap();
    bus.publish(fact("e5")).await.unwrap();
    let billing = SubscriptionSpec::new("billing.v2", Topic::BusinessFacts, EventFilter::All);
    let mut sub = bus.subscribe(billing).await.unwrap();
    bus.publish(fact("e6")).await.unwrap();
    let d = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        d.envelope.id, "e6",
        "started at new events, not at billing_v2's place"
    );
    d.settle(Settlement::Ack).await.unwrap();
    let pending = namesake.info().await.unwrap().num_pending;
    assert_eq!(pending, 2, "billing_v2's own events are still its own");
}
