//! Tools (`on_invoke`): a request gets exactly one reply on the caller's response event, success
//! or error, whatever the handler or the payload does.

use std::time::Duration;

use serde_json::{Value, json};
use soorma::EventEnvelope;
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::agents::{Calculated, calculator};

use crate::support::{reply_of, wait_until};

scenario!(tool_replies_on_the_callers_response_event_with_success_and_error);
async fn tool_replies_on_the_callers_response_event_with_success_and_error(
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

scenario!(tool_replies_on_a_custom_response_topic);
async fn tool_replies_on_a_custom_response_topic(mut t: TestPlatform, _wait: Duration) {
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

scenario!(panicking_tool_replies_with_an_error_and_keeps_serving);
async fn panicking_tool_replies_with_an_error_and_keeps_serving(
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

scenario!(malformed_payload_gets_a_typed_error_reply_naming_event_type_and_path);
async fn malformed_payload_gets_a_typed_error_reply_naming_event_type_and_path(
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

scenario!(request_without_response_event_is_handled_without_reply_or_crash);
async fn request_without_response_event_is_handled_without_reply_or_crash(
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
