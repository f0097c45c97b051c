//! Platform-independent scenarios of the runtime's robustness: user layers around the
//! handlers, and durable timers across restarts for every tenant.

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

use crate::scenarios::{approval_agents, calculator, publisher};

/// Rejects events of anonymous users, as an authorization layer would.
#[derive(Clone, Copy)]
pub struct RequireUser;

impl<S> Layer<S> for RequireUser {
    type Service = RequireUserService<S>;

    fn layer(&self, inner: S) -> RequireUserService<S> {
        RequireUserService(inner)
    }
}

/// See [`RequireUser`].
#[derive(Clone)]
pub struct RequireUserService<S>(S);

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

pub async fn user_layers_see_every_handled_event_and_rejections_settle_as_handler_failures(
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

async fn wait_for(wait: Duration, what: &str, cond: impl Fn() -> bool) {
    tokio::time::timeout(wait, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not reached in time"));
}

/// Human-input timeouts of tenant `acme`, asked by a worker and by a planner that are not
/// restricted to a tenant, fire after the platform that asked shut down: once, on the next
/// platform, even with two instances of each agent there.
///
/// `platform` makes a platform on the same storage each time (a process starting again).
pub async fn human_input_timeouts_fire_after_a_restart_for_every_tenant_exactly_once<F, Fut>(
    platform: F,
    wait: Duration,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Platform>,
{
    // The callers' platform stays up throughout.
    let t = TestPlatform::with_platform(platform().await).await.unwrap();
    let client = t.client().with_tenant("acme").with_timeout(wait * 2);
    let timeout_ms = 2_000;

    // The first process: a worker and a planner each ask a person, with a timeout.
    let first = platform().await;
    let mut agents = vec![publisher().start(&first).await.unwrap()];
    for agent in approval_agents() {
        agents.push(agent.start(&first).await.unwrap());
    }
    let task = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>(
                    "post.requested",
                    json!({"timeout_ms": timeout_ms}),
                    "post.done",
                )
                .await
        }
    });
    let goal = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke::<Value>(
                    "post.goal",
                    json!({"topic": "restarts", "timeout_ms": timeout_ms}),
                    "post.done",
                )
                .await
        }
    });
    wait_for(wait, "both questions asked", || {
        t.events_of_type("notification.human_input").len() == 2
    })
    .await;
    // It stops before the timeouts are due; its timers stay stored.
    for agent in agents {
        agent.shutdown().await.unwrap();
    }
    first.shutdown().await.unwrap();
    let stored = t
        .platform()
        .state()
        .keys(soorma::planner::TIMERS_BUCKET, "acme")
        .await
        .unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(t.events_of_type(soorma::TASK_TIMEOUT_EVENT).is_empty());
    assert!(t.events_of_type("plan.timeout").is_empty());

    // The next process runs two instances of each agent.
    let next = platform().await;
    let mut agents = Vec::new();
    for _ in 0..2 {
        agents.push(publisher().start(&next).await.unwrap());
        for agent in approval_agents() {
            agents.push(agent.start(&next).await.unwrap());
        }
    }
    let err = task.await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("no answer to \"Publish this post?\" within 2 s"),
        "{err}"
    );
    let err = goal.await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("nobody approved \"Publish this draft?\" in time"),
        "{err}"
    );
    // Exactly once each.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(t.events_of_type(soorma::TASK_TIMEOUT_EVENT).len(), 1);
    assert_eq!(t.events_of_type("plan.timeout").len(), 1);
    assert_eq!(t.events_of_type("post.done").len(), 2);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = t
            .platform()
            .state()
            .keys(soorma::planner::TIMERS_BUCKET, "acme")
            .await
            .unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timers left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for agent in agents {
        agent.shutdown().await.unwrap();
    }
    next.shutdown().await.unwrap();
    t.shutdown().await.unwrap();
}

/// Invokes `$m!(scenario, ...)` with every robustness scenario taking a [`TestPlatform`].
#[macro_export]
macro_rules! for_each_robustness_scenario {
    ($m:ident) => {
        $m!(user_layers_see_every_handled_event_and_rejections_settle_as_handler_failures);
    };
}
