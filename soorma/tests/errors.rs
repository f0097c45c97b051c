//! Handler outputs and errors through the public API, on the embedded platform: handlers return
//! `Result<T, E>` for any `T` and any error, a handler's own error type is retried when it wraps
//! a transient soorma error, and `?` converts I/O and JSON errors into `ToolError`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use soorma::error::{EngineError, EngineErrorKind};
use soorma::prelude::*;
use soorma::testing::TestPlatform;

const WAIT: Duration = Duration::from_secs(5);

/// Counts calls.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

impl Calls {
    fn next(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }

    fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

async fn wait_for_calls(calls: &Calls, n: u32) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while calls.get() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} calls after {WAIT:?}, expected {n}",
            calls.get()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A handler's own error type, wrapping the soorma error that caused it.
#[derive(Debug, thiserror::Error)]
#[error("could not save the report")]
struct SaveFailed(#[source] soorma::Error);

#[tokio::test]
async fn a_handler_can_return_what_completing_its_task_returns() {
    async fn count(mut task: TaskContext<Vec<String>>) -> soorma::Result<bool> {
        let n = task.data.len();
        task.complete(n).await
    }
    let mut t = TestPlatform::new();
    t.start(
        Worker::new("counter")
            .use_registered_handlers(false)
            .handler(Handler::on_task("count.requested", count)),
    )
    .await
    .unwrap();
    let n: usize = t
        .client()
        .invoke("count.requested", json!(["a", "b", "c"]), "count.done")
        .await
        .unwrap();
    assert_eq!(n, 3);
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_handler_error_wrapping_a_transient_error_is_redelivered_and_a_permanent_one_is_not() {
    async fn transient(_e: Event, State(calls): State<Calls>) -> Result<(), SaveFailed> {
        if calls.next() < 2 {
            let lost = EngineError::new(EngineErrorKind::StateWrite, "write `reports/r-1`");
            Err(SaveFailed(lost.into()))
        } else {
            Ok(())
        }
    }
    async fn permanent(_e: Event) -> Result<(), SaveFailed> {
        Err(SaveFailed(soorma::Error::InvalidArgument(
            "the report has no title".into(),
        )))
    }
    let calls = Calls::default();
    let mut t = TestPlatform::new();
    t.start(
        Agent::new("reporter")
            .use_registered_handlers(false)
            .with_state(calls.clone())
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "report.transient",
                transient,
            ))
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "report.permanent",
                permanent,
            )),
    )
    .await
    .unwrap();
    let bus = t.client().bus();
    bus.announce("report.permanent", json!({})).await.unwrap();
    bus.announce("report.transient", json!({})).await.unwrap();
    let dead = t.expect_event("event.dead_lettered", WAIT).await.unwrap();
    assert_eq!(dead.data["event_type"], "report.permanent");
    assert_eq!(dead.data["attempt"], 1, "a permanent cause is not retried");
    assert!(
        dead.data["reason"]
            .as_str()
            .is_some_and(|r| r.contains("could not save the report")),
        "{}",
        dead.data
    );
    // Two transient failures, then the third delivery succeeds.
    wait_for_calls(&calls, 3).await;
    assert_eq!(t.events_of_type("event.dead_lettered").len(), 1);
    t.shutdown().await.unwrap();
    assert_eq!(calls.get(), 3, "a success is not redelivered");
}

#[tokio::test]
async fn io_and_json_errors_convert_into_tool_errors() {
    async fn load(req: Invocation<String>) -> Result<serde_json::Value, ToolError> {
        let text = std::fs::read_to_string(&req.data)?;
        Ok(serde_json::from_str(&text)?)
    }
    let dir = std::env::temp_dir().join(format!("soorma-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    let bad = dir.join("bad.json");
    std::fs::write(&good, r#"{"ok": true}"#).unwrap();
    std::fs::write(&bad, "not json").unwrap();

    let mut t = TestPlatform::new();
    t.start(
        Tool::new("loader")
            .use_registered_handlers(false)
            .handler(Handler::on_invoke("load.requested", load)),
    )
    .await
    .unwrap();
    let client = t.client();
    let call = |path: &std::path::Path| {
        let client = client.clone();
        let path = path.display().to_string();
        async move {
            client
                .invoke::<serde_json::Value>("load.requested", path, "load.done")
                .await
        }
    };
    assert_eq!(call(&good).await.unwrap(), json!({"ok": true}));
    let missing = call(&dir.join("missing.json")).await.unwrap_err();
    assert!(
        matches!(&missing, soorma::Error::Remote { message, .. } if message.contains("No such file")),
        "{missing}"
    );
    let invalid = call(&bad).await.unwrap_err();
    assert!(
        matches!(&invalid, soorma::Error::Remote { message, .. } if message.contains("expected ident")),
        "{invalid}"
    );
    t.shutdown().await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    // The conversion keeps the error and its retryability.
    let timed_out = ToolError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
    assert!(timed_out.is_retryable());
    assert!(
        timed_out
            .source()
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
    );
    assert!(!ToolError::from(std::io::Error::from(std::io::ErrorKind::NotFound)).is_retryable());
}
