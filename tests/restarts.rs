//! Scenarios that restart the platform ("process") under running agents, for every platform
//! that can: each takes a function that makes a platform on the same storage.

use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};
use soorma::prelude::*;
use soorma::testing::TestPlatform;

use crate::agents;

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
    // Long enough that a loaded machine stops the first process before the timers are due.
    let timeout_ms = 6_000;
    let client = t
        .client()
        .with_tenant("acme")
        .with_timeout(wait * 2 + Duration::from_millis(timeout_ms));

    // The first process: a worker and a planner each ask a person, with a timeout.
    let first = platform().await;
    let mut agents = vec![agents::publisher().start(&first).await.unwrap()];
    for agent in agents::approval_agents() {
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
        agents.push(agents::publisher().start(&next).await.unwrap());
        for agent in agents::approval_agents() {
            agents.push(agent.start(&next).await.unwrap());
        }
    }
    let err = task.await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("no answer to \"Publish this post?\" within 6 s"),
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
