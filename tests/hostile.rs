//! Hostile input and tenant isolation on a real `nats-server -js` (started per test): every kind
//! of garbage ends in the dead-letter stream (or terminated) with a bounded reason and an
//! `event.dead_lettered` notice, leaves nothing pending, and the agent keeps serving; a tenant
//! whose NATS user may only publish on its own subjects cannot act, reply or write state as
//! another tenant, nor suppress another tenant's message through de-duplication.

use std::time::Duration;

use serde_json::{Value, json};
use soorma::EventEnvelope;
use soorma::bus::{EventFilter, Settlement, SubscriptionSpec};
use soorma::nats::async_nats::jetstream::{self, Context};
use soorma::nats::async_nats::{self, HeaderMap};
use soorma::nats::{NatsAuth, NatsConfig};
use soorma::prelude::*;
use soorma::state::StateKey;
use soorma::testing::TestPlatform;
use soorma_tests::agents;
use soorma_tests::nats_server::NatsServer;

const WAIT: Duration = Duration::from_secs(20);
const SUBJECT: &str = "soorma.default.action-requests.calculate.requested";
/// What a dead letter, its notice and an error reply stay within (the reason is cut to 1 KiB).
const SMALL: usize = 4 * 1024;

async fn connect(server: &NatsServer) -> Platform {
    soorma::nats::connect(NatsConfig::new(server.url()))
        .await
        .expect("connect to the test nats-server")
}

/// A server, a test platform on it serving the calculator, and a raw JetStream context.
async fn calculator_on_nats() -> (NatsServer, TestPlatform, Context) {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::calculator()).await.unwrap();
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    (server, t, js)
}

/// An id no other test run uses.
fn unique_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{nanos:x}{:x}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn publish_raw(js: &Context, subject: &str, payload: Vec<u8>) {
    js.publish(subject.to_owned(), payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// A calculator request envelope on `subject`'s tenant with this `data`, as JSON bytes.
fn request(tenant: Option<&str>, data: Value) -> Vec<u8> {
    let mut env = EventEnvelope::new(
        "hostile-1",
        "attacker",
        Topic::ActionRequests,
        "calculate.requested",
    )
    .with_data(data)
    .with_response_event("calc.done");
    env.tenant_id = tenant.map(str::to_owned);
    serde_json::to_vec(&env).unwrap()
}

/// Waits until every consumer of every stream has nothing pending or unacknowledged.
async fn assert_nothing_pending(js: &Context) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut busy = Vec::new();
        let names: Vec<String> = {
            use futures_util::TryStreamExt;
            js.stream_names().try_collect().await.unwrap()
        };
        for name in names {
            let stream = js.get_stream(&name).await.unwrap();
            let consumers: Vec<_> = {
                use futures_util::TryStreamExt;
                stream.consumers().try_collect().await.unwrap()
            };
            for c in consumers {
                if c.num_pending + c.num_ack_pending as u64 > 0 {
                    busy.push(format!(
                        "{name}/{}: {} pending, {} unacknowledged",
                        c.name, c.num_pending, c.num_ack_pending
                    ));
                }
            }
        }
        if busy.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still pending: {busy:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The dead letters stored for `subject` (their payload sizes and headers).
async fn dead_letters(js: &Context, subject: &str) -> Vec<(usize, HeaderMap)> {
    let dlq_subject = subject.replacen("soorma.", "soorma-dlq.", 1);
    stored(js, "SOORMA_DLQ", &dlq_subject).await
}

/// The messages `stream` holds on `subject` (their payload sizes and headers).
async fn stored(js: &Context, stream: &str, subject: &str) -> Vec<(usize, HeaderMap)> {
    let stream = js.get_stream(stream).await.unwrap();
    let last = stream.get_info().await.unwrap().state.last_sequence;
    let mut found = Vec::new();
    for seq in 1..=last {
        if let Ok(m) = stream.get_raw_message(seq).await
            && m.subject.as_str() == subject
        {
            found.push((m.payload.len(), m.headers));
        }
    }
    found
}

/// Sends garbage on `subject` and checks its fate: a notice (returned) under `tenant` with a
/// reason containing `reason`, one bounded dead letter, nothing pending, and the calculator
/// still serving.
async fn garbage_is_dead_lettered(
    subject: &str,
    payload: Vec<u8>,
    tenant: &str,
    reason: &str,
) -> (NatsServer, TestPlatform, Value) {
    garbage_with_headers_is_dead_lettered(subject, HeaderMap::new(), payload, tenant, reason).await
}

/// [`garbage_is_dead_lettered`], the garbage sent with these headers.
async fn garbage_with_headers_is_dead_lettered(
    subject: &str,
    headers: HeaderMap,
    payload: Vec<u8>,
    tenant: &str,
    reason: &str,
) -> (NatsServer, TestPlatform, Value) {
    let (server, t, js) = calculator_on_nats().await;
    js.publish_with_headers(subject.to_owned(), headers, payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    let text = notice.data["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains(reason), "reason: {text}");
    assert_eq!(notice.tenant(), tenant);
    assert!(
        serde_json::to_vec(&*notice).unwrap().len() < SMALL,
        "the notice is large"
    );
    // Settled means stored (a handler's notice goes out before its dead letter is stored).
    assert_nothing_pending(&js).await;
    let stored = dead_letters(&js, subject).await;
    assert_eq!(stored.len(), 1, "one dead letter");
    let reason_header = stored[0]
        .1
        .get(soorma::nats::DEAD_LETTER_REASON_HEADER)
        .unwrap()
        .to_string();
    assert!(
        reason_header.len() <= 1024,
        "reason header: {}",
        reason_header.len()
    );
    // The dead-letter stream is bounded: a flood of garbage ages out, oldest first.
    let mut dlq = js.get_stream("SOORMA_DLQ").await.unwrap();
    let config = &dlq.info().await.unwrap().config;
    assert_eq!(config.max_age, Duration::from_secs(14 * 86_400));
    assert_eq!(config.max_bytes, 1 << 30);
    assert_eq!(config.discard, jetstream::stream::DiscardPolicy::Old);
    assert_nothing_pending(&js).await;
    still_serves(&t).await;
    assert_nothing_pending(&js).await;
    let data = notice.data.clone();
    (server, t, data)
}

async fn still_serves(t: &TestPlatform) {
    let r: Value = t
        .client()
        .invoke(
            "calculate.requested",
            json!({"expression": "20+22"}),
            "calc.done",
        )
        .await
        .unwrap();
    assert_eq!(r["result"], 42.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_bytes_are_dead_lettered() {
    garbage_is_dead_lettered(
        SUBJECT,
        b"\xff\xfe{not json at all".to_vec(),
        "default",
        "undecodable",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_json_is_dead_lettered_without_overflowing_the_stack() {
    // 100,000 nested arrays in the data: serde_json's recursion limit stops the decode.
    let deep = format!(
        r#"{{"id":"d1","source":"x","type":"calculate.requested","topic":"action-requests","data":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    garbage_is_dead_lettered(SUBJECT, deep.into_bytes(), "default", "recursion limit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_payload_of_the_wrong_type_is_dead_lettered_once_with_a_small_reply() {
    // 900 KB where the calculator expects an object: serde's error quotes the whole string.
    let payload = request(None, Value::String("x".repeat(900_000)));
    let (_server, t, _) =
        garbage_is_dead_lettered(SUBJECT, payload, "default", "invalid payload").await;
    let replies = t.events_of_type("calc.done");
    let error_reply = replies
        .iter()
        .find(|r| r.correlation_id.as_deref() == Some("hostile-1"))
        .expect("an error reply to the bad request");
    assert_eq!(error_reply.data["success"], false);
    assert!(
        serde_json::to_vec(&**error_reply).unwrap().len() < SMALL,
        "the error reply is large"
    );
    // Handled once: no redelivery re-sends the reply or the notice.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(t.events_of_type("event.dead_lettered").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_at_the_servers_limit_is_dead_lettered_truncated() {
    let (server, t, js) = calculator_on_nats().await;
    let max = t
        .platform()
        .nats_client()
        .unwrap()
        .server_info()
        .max_payload;
    // An envelope as large as the server takes: with the dead-letter headers it cannot be
    // stored whole.
    let frame = request(None, Value::String(String::new())).len();
    let payload = request(None, Value::String("y".repeat(max - frame - 16)));
    assert!(payload.len() <= max && payload.len() > max - 64);
    publish_raw(&js, SUBJECT, payload.clone()).await;
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert!(serde_json::to_vec(&*notice).unwrap().len() < SMALL);
    assert_nothing_pending(&js).await;
    let stored = dead_letters(&js, SUBJECT).await;
    assert_eq!(stored.len(), 1);
    let (size, headers) = &stored[0];
    assert!(*size < payload.len());
    assert_eq!(
        headers
            .get(soorma::nats::DEAD_LETTER_TRUNCATED_HEADER)
            .map(|v| v.to_string()),
        Some(payload.len().to_string())
    );
    assert_nothing_pending(&js).await;
    still_serves(&t).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_tenant_in_the_subject_is_dead_lettered_with_a_default_tenant_notice() {
    garbage_is_dead_lettered(
        "soorma.ac@me.action-requests.calculate.requested",
        request(Some("ac@me"), json!({"expression": "1+1"})),
        "default",
        "invalid tenant in the subject",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_tenant_in_the_envelope_is_dead_lettered_under_the_subjects_tenant() {
    garbage_is_dead_lettered(
        "soorma.acme.action-requests.calculate.requested",
        request(Some("ac me\n"), json!({"expression": "1+1"})),
        "acme",
        "not its subject's tenant",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_tenant_other_than_the_subjects_is_dead_lettered() {
    garbage_is_dead_lettered(
        "soorma.acme.action-requests.calculate.requested",
        request(Some("globex"), json!({"expression": "1+1"})),
        "acme",
        "not its subject's tenant `acme`",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_of_another_topic_or_type_than_its_subject_is_dead_lettered() {
    // The calculator serves `calculate.requested`; an envelope naming another event on that
    // subject must not reach another event's handlers (NATS permissions are per subject).
    let mut env = EventEnvelope::new("h1", "attacker", Topic::ActionRequests, "admin.requested")
        .with_data(json!({"expression": "1+1"}))
        .with_response_event("calc.done");
    env.tenant_id = None;
    garbage_is_dead_lettered(
        SUBJECT,
        serde_json::to_vec(&env).unwrap(),
        "default",
        "not its subject's",
    )
    .await;
}

async fn audit(_event: Event) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_too_long_to_dead_letter_under_is_dead_lettered_once_and_the_connection_kept() {
    let (_server, mut t, js) = calculator_on_nats().await;
    // An agent taking every event of a topic takes messages on any subject under it.
    t.start(
        Agent::new("auditor")
            .use_registered_handlers(false)
            .handler(Handler::on_event(Topic::BusinessFacts, "*", audit)),
    )
    .await
    .unwrap();
    // 4,069 bytes: within the server's control-line limit (4 KiB) for a plain publish, but not
    // for a dead letter's (`soorma-dlq.` and the same tail, a reply inbox and header sizes):
    // the server would close the agent's connection, again on every retry and redelivery.
    let tokens = vec!["x"; 2_020].join(".");
    let subject = format!("soorma.default.business-facts.{tokens}");
    assert_eq!(subject.len(), 4_069);
    let started = std::time::Instant::now();
    let core = t.platform().nats_client().unwrap().clone();
    core.publish(subject, "junk".into()).await.unwrap();
    core.flush().await.unwrap();
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert!(
        notice.data["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("undecodable"),
        "{}",
        notice.data
    );
    assert_nothing_pending(&js).await;
    let stored = stored(&js, "SOORMA_DLQ", "soorma-dlq.default.subject-too-long").await;
    assert_eq!(stored.len(), 1, "one dead letter");
    let original = stored[0]
        .1
        .get("Soorma-Original-Subject")
        .unwrap()
        .to_string();
    // Cut to the longest subject soorma publishes on (about 1.1 KiB).
    assert!(original.len() <= 1_200, "{}", original.len());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let client = t.platform().nats_client().unwrap();
    assert_eq!(
        client
            .statistics()
            .connects
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the agents' connection was lost"
    );
    still_serves(&t).await;
}

/// A reply to `nobody.requested` correlated to `order-7`, of `tenant`, saying `says`.
fn reply_to_order_7(tenant: &str, says: &str) -> Vec<u8> {
    let reply = soorma::ActionReply::success("order-7", json!(says));
    let env = EventEnvelope::new(
        unique_id(),
        "nobody",
        Topic::ActionResults,
        "nobody.completed",
    )
    .with_correlation_id("order-7")
    .with_data(serde_json::to_value(reply).unwrap())
    .with_tenant_id(tenant);
    serde_json::to_vec(&env).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_tenant_takes_no_reply_of_another_tenant() {
    let (_server, t, js) = calculator_on_nats().await;
    // No tenant: it acts for the default one, with a correlation id anyone may guess.
    let client = t.client();
    let call = tokio::spawn(async move {
        client
            .request("nobody.requested", (), "nobody.completed")
            .skip_consumer_check()
            .correlation_id("order-7")
            .timeout(Duration::from_secs(10))
            .await
    });
    // Its request stored means its reply subscription is in place (subscribed first, on the
    // same connection as the replies below).
    let requests = js.get_stream("SOORMA_ACTION_REQUESTS").await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while requests
        .get_last_raw_message_by_subject("soorma.default.action-requests.nobody.requested")
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request was not stored"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let core = t.platform().nats_client().unwrap().clone();
    for (tenant, says) in [("acme", "forged"), ("default", "genuine")] {
        core.publish(
            format!("soorma.{tenant}.action-results.nobody.completed"),
            reply_to_order_7(tenant, says).into(),
        )
        .await
        .unwrap();
        core.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let reply = call.await.unwrap().unwrap();
    assert_eq!(reply.envelope.tenant(), "default");
    assert_eq!(reply.into_result::<String>().unwrap(), "genuine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_with_an_oversized_id_is_dead_lettered() {
    let mut env: Value =
        serde_json::from_slice(&request(Some("acme"), json!({"expression": "1+1"}))).unwrap();
    env["correlation_id"] = json!("c".repeat(100_000));
    garbage_is_dead_lettered(
        "soorma.acme.action-requests.calculate.requested",
        serde_json::to_vec(&env).unwrap(),
        "acme",
        "`correlation_id`: 100000 bytes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_and_nats_refuse_the_same_envelopes() {
    let server = NatsServer::start();
    let nats = connect(&server).await;
    let embedded = Platform::embedded();
    let long = "x".repeat(soorma::MAX_ID_LEN + 1);
    let base = || EventEnvelope::new(unique_id(), "t", Topic::BusinessFacts, "x.happened");
    let cases: Vec<(&str, EventEnvelope, bool)> = vec![
        ("plain", base(), true),
        (
            "event type at the limit",
            {
                let mut e = base();
                e.event_type = format!("x.{}", "y".repeat(soorma::MAX_ID_LEN - 2));
                e
            },
            true,
        ),
        (
            "long event type",
            {
                let mut e = base();
                e.event_type = format!("x.{long}");
                e
            },
            false,
        ),
        (
            "spaced event type",
            {
                let mut e = base();
                e.event_type = "x happened".into();
                e
            },
            false,
        ),
        (
            "wildcard reply event",
            base().with_response_event("x.*"),
            false,
        ),
        (
            "long correlation id",
            base().with_correlation_id(long.clone()),
            false,
        ),
        (
            "long session id",
            base().with_session_id(long.clone()),
            false,
        ),
        (
            "control character in the id",
            {
                let mut e = base();
                e.id = "a\nb".into();
                e
            },
            false,
        ),
        (
            "empty id",
            {
                let mut e = base();
                e.id = String::new();
                e
            },
            false,
        ),
    ];
    for (what, env, valid) in cases {
        assert_eq!(soorma::check_envelope(&env).is_ok(), valid, "{what}");
        for platform in [&embedded, &nats] {
            match platform.bus().publish(env.clone()).await {
                Ok(()) => assert!(valid, "{} accepted {what}", platform.kind()),
                Err(soorma::Error::InvalidArgument(reason)) => {
                    assert!(!valid, "{} refused {what}: {reason}", platform.kind())
                }
                Err(e) => panic!("{} {what}: {e}", platform.kind()),
            }
        }
    }
}

fn batch_headers(parts: usize) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(soorma::nats::BATCH_HEADER, parts.to_string().as_str());
    headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_is_no_array_of_envelopes_is_dead_lettered_whole() {
    garbage_with_headers_is_dead_lettered(
        SUBJECT,
        batch_headers(2),
        br#"{"not": "an array"}"#.to_vec(),
        "default",
        "undecodable batch of envelopes",
    )
    .await;
    // More envelopes than any batch carries: refused before any is decoded.
    let flood = format!("[{}1]", "{},".repeat(5000));
    garbage_with_headers_is_dead_lettered(
        SUBJECT,
        batch_headers(5001),
        flood.into_bytes(),
        "default",
        "more than 1024 envelopes",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bad_envelopes_of_a_batch_are_dead_lettered_alone_and_the_good_ones_served() {
    let (server, t, js) = calculator_on_nats().await;
    let good = |id: &str| {
        EventEnvelope::new(id, "client", Topic::ActionRequests, "calculate.requested")
            .with_data(json!({"expression": "1+2"}))
            .with_response_event("calc.done")
    };
    let parts = [
        serde_json::to_string(&good(&unique_id())).unwrap(),
        r#"{"not": "an envelope"}"#.to_owned(),
        serde_json::to_string(&good(&unique_id()).with_tenant_id("globex")).unwrap(),
        serde_json::to_string(&good(&unique_id())).unwrap(),
    ];
    let payload = format!("[{}]", parts.join(","));
    js.publish_with_headers(SUBJECT.to_owned(), batch_headers(4), payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("calc.done").len() < 2
        || t.events_of_type("event.dead_lettered").len() < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} replies, {} notices",
            t.events_of_type("calc.done").len(),
            t.events_of_type("event.dead_lettered").len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut reasons: Vec<String> = t
        .events_of_type("event.dead_lettered")
        .iter()
        .map(|n| n.data["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    reasons.sort();
    assert!(
        reasons[0].contains("not its subject's tenant") && reasons[1].contains("undecodable"),
        "{reasons:?}"
    );
    assert_nothing_pending(&js).await;
    // Each bad envelope is its own dead letter, stored as it was in the batch.
    let mut sizes: Vec<usize> = dead_letters(&js, SUBJECT)
        .await
        .into_iter()
        .map(|(size, _)| size)
        .collect();
    sizes.sort_unstable();
    let mut expected = vec![parts[1].len(), parts[2].len()];
    expected.sort_unstable();
    assert_eq!(sizes, expected);
    assert_eq!(t.events_of_type("calc.done").len(), 2, "each good one once");
    still_serves(&t).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_many_bad_envelopes_is_one_dead_letter_and_its_good_ones_served() {
    let (_server, t, js) = calculator_on_nats().await;
    let good = EventEnvelope::new(
        unique_id(),
        "client",
        Topic::ActionRequests,
        "calculate.requested",
    )
    .with_data(json!({"expression": "1+2"}))
    .with_response_event("calc.done");
    // 2 KiB that would otherwise be 1,000 dead letters and 1,000 notices.
    let mut parts = vec!["1"; 1000];
    let good = serde_json::to_string(&good).unwrap();
    parts.push(&good);
    let payload = format!("[{}]", parts.join(","));
    js.publish_with_headers(
        SUBJECT.to_owned(),
        batch_headers(parts.len()),
        payload.clone().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    let reason = notice.data["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("1000 of the batch's 1001 envelopes cannot be handled"),
        "{reason}"
    );
    t.expect_event("calc.done", WAIT).await.unwrap();
    assert_nothing_pending(&js).await;
    let stored = dead_letters(&js, SUBJECT).await;
    assert_eq!(stored.len(), 1, "one dead letter");
    assert_eq!(stored[0].0, payload.len(), "the whole batch");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        t.events_of_type("event.dead_lettered").len(),
        1,
        "one notice"
    );
    assert_eq!(t.events_of_type("calc.done").len(), 1, "the good one, once");
    still_serves(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_have_a_finite_max_deliver_and_the_last_failed_delivery_is_dead_lettered() {
    let (server, t, js) = calculator_on_nats().await;
    // The agent's consumer: max_deliver is the agent's (5 by default), not unlimited.
    let stream = js.get_stream("SOORMA_ACTION_REQUESTS").await.unwrap();
    let mut calc = stream
        .get_consumer::<jetstream::consumer::pull::Config>("calculator__action-requests")
        .await
        .unwrap();
    assert_eq!(calc.info().await.unwrap().config.max_deliver, 5);

    // A subscriber that asks for a retry on every delivery: the last one is dead-lettered.
    let bus = t.platform().bus();
    let spec =
        SubscriptionSpec::new("flaky", Topic::BusinessFacts, EventFilter::All).with_max_deliver(3);
    let mut sub = bus.subscribe(spec).await.unwrap();
    t.client()
        .publish(Topic::BusinessFacts, "order.placed", json!({"id": 1}))
        .await
        .unwrap();
    for attempt in 1..=3 {
        let d = tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(d.attempt, attempt);
        d.settle(Settlement::Retry {
            delay: Duration::from_millis(10),
        })
        .await
        .unwrap();
    }
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert!(
        notice.data["reason"]
            .as_str()
            .unwrap()
            .contains("max_deliver"),
        "{}",
        notice.data
    );
    assert_eq!(
        dead_letters(&js, "soorma.default.business-facts.order.placed")
            .await
            .len(),
        1
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sub.next())
            .await
            .is_err(),
        "delivered again"
    );
    assert_nothing_pending(&js).await;
    drop(sub);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_rejects_exactly_the_tenants_nats_rejects() {
    let server = NatsServer::start();
    let nats = connect(&server).await;
    let embedded = Platform::embedded();
    let long = "t".repeat(soorma::MAX_TENANT_LEN);
    let too_long = "t".repeat(soorma::MAX_TENANT_LEN + 1);
    let tenants = [
        "acme",
        "acme-eu_1",
        long.as_str(),
        "",
        "a.b",
        "a b",
        "a*",
        "a>",
        "ac@me",
        "ünï",
        "a\nb",
        too_long.as_str(),
    ];
    for tenant in tenants {
        let valid = soorma::validate_tenant(tenant).is_ok();
        for platform in [&embedded, &nats] {
            let env = EventEnvelope::new(unique_id(), "t", Topic::BusinessFacts, "x.happened")
                .with_tenant_id(tenant);
            let published = platform.bus().publish(env).await;
            let stored = platform
                .state()
                .put(&StateKey::new("notes", tenant, "k"), b"{}".to_vec())
                .await;
            let subscribed = platform
                .bus()
                .subscribe(
                    SubscriptionSpec::new("g", Topic::BusinessFacts, EventFilter::All)
                        .with_tenant(tenant)
                        .ephemeral(),
                )
                .await
                .map(drop);
            let client = platform
                .client("c")
                .with_tenant(tenant)
                .publish(Topic::BusinessFacts, "x.happened", 1)
                .await
                .map(drop);
            let agent = agents::calculator()
                .tenant(tenant)
                .start(platform)
                .await
                .map(|h| tokio::spawn(h.shutdown()));
            for (what, outcome) in [
                ("publish", published.map(drop)),
                ("state", stored.map(drop)),
                ("subscribe", subscribed),
                ("client", client),
                ("agent", agent.map(drop)),
            ] {
                match outcome {
                    Ok(()) => assert!(valid, "{} accepted {what} for {tenant:?}", platform.kind()),
                    Err(soorma::Error::InvalidArgument(_)) => {
                        assert!(!valid, "{} rejected {what} for {tenant:?}", platform.kind())
                    }
                    Err(e) => panic!("{} {what} for {tenant:?}: {e}", platform.kind()),
                }
            }
        }
    }
}

/// A server whose `operator` user may do anything and whose `acme` user may only publish on
/// acme's subjects (and receive the acknowledgements of its publishes): what an operator
/// gives a tenant that publishes its own requests.
fn server_with_tenant_users() -> NatsServer {
    let dir = std::env::temp_dir().join(format!(
        "soorma-hostile-{}-{}",
        std::process::id(),
        unique_id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("users.conf");
    std::fs::write(
        &conf,
        r#"
authorization {
  users = [
    { user: operator, password: operator-secret }
    {
      user: acme, password: acme-secret,
      permissions: {
        publish: { allow: ["soorma.acme.>"] }
        subscribe: { allow: ["_INBOX.>"] }
      }
    }
  ]
}
"#,
    )
    .unwrap();
    NatsServer::start_with(&["-js", "-c", conf.to_str().unwrap()])
}

/// A user without the JetStream API is told so at connect, not that JetStream is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_jetstream_api_is_told_what_it_may_be_missing() {
    let server = server_with_tenant_users();
    let err = soorma::nats::connect(NatsConfig::new(server.url()).with_auth(
        NatsAuth::UserPassword {
            user: "acme".into(),
            password: "acme-secret".into(),
        },
    ))
    .await
    .expect_err("acme may not use the JetStream API");
    let message = err.to_string();
    assert!(message.contains("`$JS.API.INFO`"), "{message}");
    assert!(!message.contains("start nats-server with"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_limited_to_its_subjects_cannot_act_reply_write_or_suppress_as_another() {
    soorma_tests::init_tracing();
    let server = server_with_tenant_users();
    let operator = soorma::nats::connect(NatsConfig::new(server.url()).with_auth(
        NatsAuth::UserPassword {
            user: "operator".into(),
            password: "operator-secret".into(),
        },
    ))
    .await
    .unwrap();
    let mut t = TestPlatform::with_platform(operator.clone()).await.unwrap();
    // A tool of globex only, one of acme only, and a worker (which stores task state) of
    // every tenant.
    t.start(agents::calculator().tenant("globex"))
        .await
        .unwrap();
    t.start(agents::calculator().tenant("acme")).await.unwrap();
    t.start(agents::batcher()).await.unwrap();
    t.start(agents::upper_tool()).await.unwrap();
    let acme = jetstream::new(
        async_nats::ConnectOptions::with_user_and_password("acme".into(), "acme-secret".into())
            .connect(server.url())
            .await
            .unwrap(),
    );

    // 1. On globex's subjects acme is refused by the server, so the globex tool never acts.
    let refused = acme
        .publish(
            "soorma.globex.action-requests.calculate.requested",
            request(Some("globex"), json!({"expression": "1+1"})).into(),
        )
        .await;
    let refused = match refused {
        Ok(ack) => tokio::time::timeout(Duration::from_secs(3), ack)
            .await
            .map_or(true, |r| r.is_err()),
        Err(_) => true,
    };
    assert!(refused, "acme published on globex's subjects");

    // 2. On its own subjects, claiming to be globex: dead-lettered, no reply, no state.
    publish_raw(
        &acme,
        "soorma.acme.action-requests.calculate.requested",
        request(Some("globex"), json!({"expression": "1+1"})),
    )
    .await;
    let mut batch = EventEnvelope::new(
        "hostile-batch",
        "attacker",
        Topic::ActionRequests,
        "batch.requested",
    )
    .with_data(json!({"items": ["a"]}))
    .with_response_event("batch.completed");
    batch.tenant_id = Some("globex".into());
    publish_raw(
        &acme,
        "soorma.acme.action-requests.batch.requested",
        serde_json::to_vec(&batch).unwrap(),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("event.dead_lettered").len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not dead-lettered: {:?}",
            t.events_of_type("event.dead_lettered")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for notice in t.events_of_type("event.dead_lettered") {
        assert_eq!(notice.tenant(), "acme");
        assert!(
            notice.data["reason"]
                .as_str()
                .unwrap()
                .contains("not its subject's tenant"),
            "{}",
            notice.data
        );
    }
    let js = jetstream::new(operator.nats_client().unwrap().clone());
    assert_nothing_pending(&js).await;
    let as_globex: Vec<_> = t
        .events()
        .into_iter()
        .filter(|e| e.tenant() == "globex")
        .map(|e| e.event_type.clone())
        .collect();
    assert!(as_globex.is_empty(), "acted as globex: {as_globex:?}");
    for bucket in [soorma::TASKS_BUCKET, soorma::SUBTASKS_BUCKET] {
        assert!(
            operator
                .state()
                .keys(bucket, "globex")
                .await
                .unwrap()
                .is_empty(),
            "state written under globex in {bucket}"
        );
    }

    // 3. Acme takes the de-duplication id of globex's next request first (on its own
    // subject): globex's request still gets through and is answered.
    let globex_id = unique_id();
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", globex_id.as_str());
    acme.publish_with_headers(
        "soorma.acme.action-requests.calculate.requested",
        headers,
        request(Some("acme"), json!({"expression": "6*7"})).into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let globex_request = EventEnvelope::new(
        globex_id.clone(),
        "globex-app",
        Topic::ActionRequests,
        "calculate.requested",
    )
    .with_tenant_id("globex")
    .with_data(json!({"expression": "2*21"}))
    .with_response_event("calc.done");
    operator.bus().publish(globex_request).await.unwrap();
    let reply = t
        .expect_matching(
            |e| e.event_type == "calc.done" && e.correlation_id.as_deref() == Some(&globex_id),
            WAIT,
            "globex's reply",
        )
        .await
        .unwrap();
    assert_eq!(reply.tenant(), "globex");
    assert_eq!(reply.data["result"]["result"], 42.0, "{}", reply.data);
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_claiming_another_tenant_cannot_answer_its_sub_task() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    // No tool runs: globex's task waits for its one sub-task.
    t.start(agents::batcher()).await.unwrap();
    let globex = t.client().with_tenant("globex").with_timeout(WAIT * 2);
    let call = tokio::spawn(async move {
        globex
            .invoke::<Vec<String>>(
                "batch.requested",
                json!({"items": ["a"]}),
                "batch.completed",
            )
            .await
    });
    let sub_request = t.expect_event("upper.requested", WAIT).await.unwrap();
    let sub_task_id = sub_request.correlation_id.clone().unwrap();
    // Globex's task, its sub-task's group record and every record of what it delegated (a
    // result recorded would add a chunk).
    let task_id = t.events_of_type("batch.requested")[0].id.clone();
    let task_key = StateKey::new(soorma::TASKS_BUCKET, "globex", task_id);
    let (group_id, _) = sub_task_id.rsplit_once('-').unwrap();
    let group_key = StateKey::new(soorma::SUBTASKS_BUCKET, "globex", group_id);
    let state = platform.state().clone();
    let stored = || async {
        (
            state.get(&task_key).await.unwrap().unwrap().revision,
            state.get(&group_key).await.unwrap().unwrap().revision,
            state.keys(soorma::SUBTASKS_BUCKET, "globex").await.unwrap(),
        )
    };
    let before = stored().await;

    // On acme's subject, an envelope claiming globex answers globex's sub-task.
    let mut forged = EventEnvelope::new(
        "forged-result",
        "attacker",
        Topic::ActionResults,
        "upper.completed",
    )
    .with_correlation_id(sub_task_id.clone())
    .with_data(json!({"request_id": sub_request.id, "success": true, "result": "HIJACKED"}));
    forged.tenant_id = Some("globex".into());
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    publish_raw(
        &js,
        "soorma.acme.action-results.upper.completed",
        serde_json::to_vec(&forged).unwrap(),
    )
    .await;
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert_eq!(notice.tenant(), "acme");
    assert_nothing_pending(&js).await;
    let after = stored().await;
    assert_eq!(before, after, "globex's sub-task was touched");

    // The real result still completes the task.
    let real = EventEnvelope::new(
        "real-result",
        "upper",
        Topic::ActionResults,
        "upper.completed",
    )
    .with_tenant_id("globex")
    .with_correlation_id(sub_task_id)
    .with_data(json!({"request_id": sub_request.id, "success": true, "result": "A"}));
    platform.bus().publish(real).await.unwrap();
    assert_eq!(call.await.unwrap().unwrap(), ["A"]);
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_that_cannot_be_stored_is_terminated_not_looped() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    // Another stream owns the dead-letter subjects: the DLQ stream cannot be created.
    js.create_stream(jetstream::stream::Config {
        name: "SQUATTER".into(),
        subjects: vec!["soorma-dlq.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    t.start(agents::calculator()).await.unwrap();
    publish_raw(&js, SUBJECT, b"not json".to_vec()).await;
    // The server refuses the DLQ stream (its subjects overlap another stream's): a
    // configuration error, not a passing fault, so the message is terminated at once with an
    // error log and one notice (a passing fault, e.g. no JetStream leader, is retried while
    // deliveries remain).
    let notice = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert_eq!(notice.data["attempt"], 1, "{}", notice.data);
    assert_nothing_pending(&js).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(t.events_of_type("event.dead_lettered").len(), 1);
    still_serves(&t).await;
    t.shutdown().await.unwrap();
}

/// `MAX_DELIVERIES` advisories that do not describe a message this consumer gave up on (not
/// JSON, another consumer's, not a last delivery, a message acknowledged here, one being
/// handled here) dead-letter nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_deliveries_advisories_that_do_not_fit_dead_letter_nothing() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let platform = connect(&server).await;
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    let spec = SubscriptionSpec::new("settles", Topic::BusinessFacts, EventFilter::All)
        .with_max_deliver(2);
    let mut sub = platform.bus().subscribe(spec).await.unwrap();
    // A consumer of the same stream that takes none of the messages.
    let spec = SubscriptionSpec::new(
        "idle",
        Topic::BusinessFacts,
        EventFilter::only(["order.cancelled"]),
    )
    .with_max_deliver(2);
    let mut idle = platform.bus().subscribe(spec).await.unwrap();
    for id in 1..=2 {
        t.client()
            .publish(Topic::BusinessFacts, "order.placed", json!({"id": id}))
            .await
            .unwrap();
    }
    let acked = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    acked.settle(Settlement::Ack).await.unwrap();
    // The second is held, being handled, while the advisories come.
    let handling = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    // Another connection (the platform's does not hear its own messages).
    let nats = async_nats::connect(server.url()).await.unwrap();
    // The consumers' names: `<group>__<topic>`.
    let subject = |group: &str| {
        format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.SOORMA_BUSINESS_FACTS.{group}__business-facts"
        )
    };
    let advisory = |group: &str, seq: u64, deliveries: u64| {
        json!({"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": "SOORMA_BUSINESS_FACTS",
            "consumer": format!("{group}__business-facts"), "stream_seq": seq, "deliveries": deliveries})
        .to_string()
    };
    for (to, body) in [
        ("settles", "not json".to_owned()),
        // Acknowledged here, and being handled here.
        ("settles", advisory("settles", 1, 2)),
        ("settles", advisory("settles", 2, 2)),
        // Another consumer's, not a last delivery, a message the consumer does not take.
        ("idle", advisory("another", 1, 2)),
        ("idle", advisory("idle", 1, 1)),
        ("idle", advisory("idle", 1, 2)),
    ] {
        nats.publish(subject(to), body.into()).await.unwrap();
    }
    nats.flush().await.unwrap();
    // The subscriptions read advisories while they wait for their next message.
    let (next, nothing) = tokio::join!(
        tokio::time::timeout(Duration::from_millis(1500), sub.next()),
        tokio::time::timeout(Duration::from_millis(1500), idle.next()),
    );
    assert!(next.is_err(), "nothing more to deliver: {next:?}");
    assert!(nothing.is_err(), "nothing to deliver: {nothing:?}");
    handling.settle(Settlement::Ack).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        t.events_of_type("event.dead_lettered").is_empty(),
        "{:?}",
        t.events_of_type("event.dead_lettered")
    );
    let js = jetstream::new(nats);
    // No dead-letter stream yet: nothing was dead-lettered.
    assert!(js.get_stream("SOORMA_DLQ").await.is_err());
    assert_nothing_pending(&js).await;
    t.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_last_delivery_is_never_settled_is_dead_lettered() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let config = NatsConfig::new(server.url()).with_ack_wait(Duration::from_secs(1));
    let platform = soorma::nats::connect(config).await.unwrap();
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    // Two instances of one group that take deliveries and drop them unsettled: as if the
    // process handling the event died each time. (One held unsettled is still being handled:
    // a redelivered copy of it reaching the same instance would be skipped.)
    let unsettled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut instances = Vec::new();
    for _ in 0..2 {
        let spec = SubscriptionSpec::new("stalls", Topic::BusinessFacts, EventFilter::All)
            .with_max_deliver(2);
        let mut sub = platform.bus().subscribe(spec).await.unwrap();
        let unsettled = unsettled.clone();
        instances.push(tokio::spawn(async move {
            while let Some(d) = sub.next().await {
                unsettled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(d);
            }
        }));
    }
    t.client()
        .publish(Topic::BusinessFacts, "order.placed", json!({"id": 1}))
        .await
        .unwrap();
    // And a batch of two (one stored message): each of its envelopes is dead-lettered.
    let batch = (0..2)
        .map(|_| EventEnvelope::new(unique_id(), "shop", Topic::BusinessFacts, "order.placed"))
        .collect();
    platform.bus().publish_batch(batch).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while t.events_of_type("event.dead_lettered").len() < 3 {
        assert!(tokio::time::Instant::now() < deadline, "not dead-lettered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for notice in t.events_of_type("event.dead_lettered") {
        assert!(
            notice.data["reason"]
                .as_str()
                .unwrap()
                .contains("not settled on its last delivery"),
            "{}",
            notice.data
        );
    }
    assert_eq!(
        unsettled.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "each envelope delivered twice (max_deliver)"
    );
    // Both instances got the advisories; the streams keep one dead letter and one notice for
    // each envelope.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let js = jetstream::new(platform.nats_client().unwrap().clone());
    let subject = "soorma.default.business-facts.order.placed";
    assert_eq!(dead_letters(&js, subject).await.len(), 3);
    let notices = stored(
        &js,
        "SOORMA_SYSTEM_EVENTS",
        "soorma.default.system-events.event.dead_lettered",
    )
    .await;
    assert_eq!(notices.len(), 3);
    for instance in instances {
        instance.abort();
    }
}

/// Large events wait for their bytes: a subscription holds at most
/// `max_in_flight_bytes` of received events (here 1 MiB: two requests of 400 KB at a time,
/// whatever the agent's concurrency), and every one is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_events_are_admitted_within_the_in_flight_byte_budget() {
    soorma_tests::init_tracing();
    let server = NatsServer::start();
    let config = NatsConfig::new(server.url()).with_max_in_flight_bytes(1 << 20);
    let platform = soorma::nats::connect(config).await.unwrap();
    let t = TestPlatform::with_platform(platform.clone()).await.unwrap();
    let tracked = agents::Tracked::default();
    let tool = agents::sleeper("napper", "nap.requested", &tracked)
        .start(&platform)
        .await
        .unwrap();
    let padding = "x".repeat(400_000);
    let client = t.client();
    let calls = (0..6).map(|_| {
        client.invoke(
            "nap.requested",
            json!({"nap_ms": 400, "padding": padding}),
            "nap.done",
        )
    });
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let (tracked, most) = (tracked.clone(), most.clone());
        tokio::spawn(async move {
            loop {
                let running = tracked.started() - tracked.finished() - tracked.dropped();
                most.fetch_max(running, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let replies: Vec<Value> = tokio::time::timeout(WAIT, futures_util::future::try_join_all(calls))
        .await
        .expect("every call answered")
        .unwrap();
    watch.abort();
    assert!(replies.iter().all(|r| r == "woke up"), "{replies:?}");
    assert_eq!(tracked.finished(), 6);
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=2).contains(&most),
        "{most} requests of 400 KB held at once within 1 MiB"
    );
    tool.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}
