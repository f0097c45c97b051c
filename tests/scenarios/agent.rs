//! Any agent: building and starting one (handlers, typed state), how events reach its
//! instances and other agents, graceful shutdown, and how an event handler's errors are retried
//! or dead-lettered, and the user's tower layers around its handlers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Value, json};
use soorma::dispatch::tower::util::MapRequestLayer;
use soorma::dispatch::tower::{Layer, Service};
use soorma::dispatch::{HandlerError, HandlerRequest, HandlerResponse};
use soorma::prelude::*;
use soorma::testing::TestPlatform;
use soorma_tests::agents::calculator;

use crate::support::{Counter, wait_until};

scenario!(agent_without_handlers_fails_loudly);
async fn agent_without_handlers_fails_loudly(t: TestPlatform, _wait: Duration) {
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

scenario!(typed_state_extractor_and_misconfiguration_errors);
async fn typed_state_extractor_and_misconfiguration_errors(t: TestPlatform, _wait: Duration) {
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

async fn count_invoke(req: Invocation<u32>, State(c): State<Counter>) -> Result<u32, ToolError> {
    c.0.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Ok(req.data)
}

scenario!(instances_of_one_agent_share_work_and_different_agents_each_get_events);
async fn instances_of_one_agent_share_work_and_different_agents_each_get_events(
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

scenario!(graceful_shutdown_finishes_in_flight_handlers_then_stops_taking_events);
async fn graceful_shutdown_finishes_in_flight_handlers_then_stops_taking_events(
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

scenario!(retryable_event_handler_errors_are_redelivered_then_dead_lettered);
async fn retryable_event_handler_errors_are_redelivered_then_dead_lettered(
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

/// Rejects events of anonymous users, as an authorization layer would.
#[derive(Clone, Copy)]
struct RequireUser;

impl<S> Layer<S> for RequireUser {
    type Service = RequireUserService<S>;

    fn layer(&self, inner: S) -> RequireUserService<S> {
        RequireUserService(inner)
    }
}

/// See [`RequireUser`].
#[derive(Clone)]
struct RequireUserService<S>(S);

type Outcome = Result<HandlerResponse, HandlerError>;

impl<S> Service<HandlerRequest> for RequireUserService<S>
where
    S: Service<HandlerRequest, Response = HandlerResponse, Error = HandlerError>,
    S::Future: Send + 'static,
{
    type Response = HandlerResponse;
    type Error = HandlerError;
    type Future = Pin<Box<dyn Future<Output = Outcome> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), HandlerError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: HandlerRequest) -> Self::Future {
        if req.envelope().user_id.is_none() {
            let who = req.agent().to_owned();
            return Box::pin(
                async move { Err(HandlerError::new(format!("{who}: sign in first"))) },
            );
        }
        Box::pin(self.0.call(req))
    }
}

scenario!(user_layers_see_every_handled_event_and_rejections_settle_as_handler_failures);
async fn user_layers_see_every_handled_event_and_rejections_settle_as_handler_failures(
    mut t: TestPlatform,
    wait: Duration,
) {
    // A metrics layer (outermost: added last) sees every handled event, rejected ones too.
    /// (event type, handler attribute, attempt) of each handled event.
    type Seen = Vec<(String, &'static str, u32)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let metrics = {
        let seen = seen.clone();
        MapRequestLayer::new(move |req: HandlerRequest| {
            seen.lock().unwrap().push((
                req.envelope().event_type.clone(),
                req.handler_kind().attribute(),
                req.attempt(),
            ));
            req
        })
    };
    let entries = Arc::new(AtomicUsize::new(0));
    async fn record(_e: Event, State(n): State<Arc<AtomicUsize>>) {
        n.fetch_add(1, Ordering::SeqCst);
    }
    t.start(calculator().layer(RequireUser).layer(metrics.clone()))
        .await
        .unwrap();
    t.start(
        Agent::new("ledger")
            .use_registered_handlers(false)
            .with_state(entries.clone())
            .handler(Handler::on_event(
                Topic::BusinessFacts,
                "ledger.entry",
                record,
            ))
            .layer(RequireUser)
            .layer(metrics),
    )
    .await
    .unwrap();
    let client = t.client().with_timeout(wait);

    // A tool replies with the rejection, as with a handler error.
    let denied = client
        .invoke::<Value>(
            "calculate.requested",
            json!({"expression": "1+1"}),
            "calc.done",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&denied, soorma::Error::Remote { message, .. } if message == "calculator: sign in first"),
        "{denied}"
    );
    let ok: Value = client
        .with_user("ann")
        .invoke(
            "calculate.requested",
            json!({"expression": "1+1"}),
            "calc.done",
        )
        .await
        .unwrap();
    assert_eq!(ok["result"], 2.0);

    // An event handler's rejection (not retryable) is dead-lettered; the handler never ran.
    client
        .publish(Topic::BusinessFacts, "ledger.entry", json!({}))
        .await
        .unwrap();
    let dl = t.expect_event("event.dead_lettered", wait).await.unwrap();
    assert_eq!(dl.data["agent"], "ledger");
    assert_eq!(dl.data["reason"], "ledger: sign in first");
    assert_eq!(dl.data["attempt"], 1);
    client
        .with_user("ann")
        .publish(Topic::BusinessFacts, "ledger.entry", json!({}))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + wait;
    while entries.load(Ordering::SeqCst) < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry was not recorded"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(entries.load(Ordering::SeqCst), 1);

    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("calculate.requested".to_owned(), "on_invoke", 1),
            ("calculate.requested".to_owned(), "on_invoke", 1),
            ("ledger.entry".to_owned(), "on_event", 1),
            ("ledger.entry".to_owned(), "on_event", 1),
        ]
    );
    t.shutdown().await.unwrap();
}
