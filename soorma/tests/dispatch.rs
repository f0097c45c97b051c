//! The agent's dispatch stack: configuration limits, user layers (errors and panics settled
//! like the handler's), back-pressure at the concurrency limit.
use std::time::Duration;

use soorma::dispatch::tower::layer::layer_fn;
use soorma::dispatch::tower::{ServiceExt, service_fn};
use soorma::dispatch::{HandlerError, HandlerRequest, HandlerResponse, HandlerService};
use soorma::prelude::*;
use soorma::{AgentBuilder, Error};

const MAX_CONCURRENCY: usize = AgentBuilder::MAX_CONCURRENCY;

async fn echo(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data)
}

fn echo_tool() -> AgentBuilder {
    Tool::new("echo")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("echo.requested", echo))
}

#[tokio::test]
async fn out_of_range_concurrency_and_max_deliver_fail_at_start_naming_the_range() {
    let platform = Platform::embedded();
    for (concurrency, max_deliver, expected) in [
        (0, 5, "concurrency(0) is out of range"),
        (
            usize::MAX,
            5,
            "is out of range: an agent handles 1 to 1048576",
        ),
        (MAX_CONCURRENCY + 1, 5, "concurrency(1048577)"),
        (4, 0, "max_deliver(0) is out of range"),
    ] {
        let err = echo_tool()
            .concurrency(concurrency)
            .max_deliver(max_deliver)
            .start(&platform)
            .await
            .unwrap_err();
        let Error::Misconfigured { agent, problems } = &err else {
            panic!("expected Misconfigured, got {err}");
        };
        assert_eq!(agent, "echo");
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{problems:?}"
        );
    }
    // The bounds themselves are fine.
    for concurrency in [1, MAX_CONCURRENCY] {
        let tool = echo_tool()
            .concurrency(concurrency)
            .max_deliver(1)
            .start(&platform)
            .await
            .unwrap();
        let out: String = platform
            .client("test")
            .invoke("echo.requested", "hi", "echo.done")
            .await
            .unwrap();
        assert_eq!(out, "hi");
        tool.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_panicking_layer_is_settled_like_a_panicking_handler() {
    let platform = Platform::embedded();
    let tool = echo_tool()
        .layer(layer_fn(|inner: HandlerService| {
            service_fn(move |req: HandlerRequest| {
                let inner = inner.clone();
                async move {
                    if req.envelope().data == "boom" {
                        panic!("layer exploded");
                    }
                    inner.oneshot(req).await
                }
            })
        }))
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("test").with_timeout(Duration::from_secs(5));
    let err = client
        .invoke::<String>("echo.requested", "boom", "echo.done")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("handler panicked: layer exploded"),
        "{err}"
    );
    // Still serving.
    let out: String = client
        .invoke("echo.requested", "hi", "echo.done")
        .await
        .unwrap();
    assert_eq!(out, "hi");
    tool.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_layer_error_from_call_is_the_handlers_failure() {
    let platform = Platform::embedded();
    let tool = echo_tool()
        .layer(layer_fn(|_inner: HandlerService| {
            service_fn(|_req: HandlerRequest| async {
                Err::<HandlerResponse, _>(HandlerError::new("closed for maintenance"))
            })
        }))
        .start(&platform)
        .await
        .unwrap();
    let err = platform
        .client("test")
        .invoke::<String>("echo.requested", "hi", "echo.done")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { message, .. } if message == "closed for maintenance"),
        "{err}"
    );
    tool.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_concurrency_limit_an_agent_takes_no_more_events_from_the_bus() {
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    async fn slow(_e: Event, State(gate): State<Arc<Semaphore>>) {
        // Each handler waits for a permit the test hands out.
        gate.acquire().await.unwrap().forget();
    }
    let platform = Platform::embedded();
    let gate = Arc::new(Semaphore::new(0));
    let agent = Agent::new("slow")
        .use_registered_handlers(false)
        .with_state(gate.clone())
        .handler(Handler::on_event(Topic::BusinessFacts, "work", slow))
        .concurrency(2)
        .start(&platform)
        .await
        .unwrap();
    let client = platform.client("test");
    for _ in 0..10 {
        client
            .publish(Topic::BusinessFacts, "work", ())
            .await
            .unwrap();
    }
    let bus = platform.embedded_bus().unwrap();
    let stats = || {
        bus.queue_stats()
            .into_iter()
            .find(|s| s.group == "slow")
            .unwrap()
    };
    // Two in flight; the third is taken from the bus and waits for a slot; the rest stay queued.
    tokio::time::timeout(Duration::from_secs(5), async {
        while stats().queued != 7 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the agent stops taking events at its limit");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((stats().queued, stats().in_use), (7, 10));
    gate.add_permits(10);
    tokio::time::timeout(Duration::from_secs(5), async {
        while stats().in_use != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every event handled once the handlers finish");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_publishing_into_each_others_full_queues_end_with_dead_letters_not_a_hang() {
    use soorma::embedded::EmbeddedConfig;

    /// Handles a hop by publishing two events of the next hop to the other agent.
    async fn bounce(event: Event<u32>) -> soorma::Result<()> {
        let next = if event.event_type() == "ping" {
            "pong"
        } else {
            "ping"
        };
        if event.data < 5 {
            for _ in 0..2 {
                event
                    .bus()
                    .publish(Topic::BusinessFacts, next, event.data + 1)
                    .await?;
            }
        }
        Ok(())
    }
    let platform = Platform::embedded_with(
        EmbeddedConfig::new()
            .with_queue_capacity(1)
            .with_publish_timeout(Duration::from_millis(50)),
    )
    .unwrap();
    let mut dead_letters = platform
        .bus()
        .observe(Some(Topic::SystemEvents))
        .await
        .unwrap();
    let agent = |name: &str, event: &str| {
        Agent::new(name)
            .use_registered_handlers(false)
            .handler(Handler::on_event(Topic::BusinessFacts, event, bounce))
            .concurrency(1)
            .max_deliver(2)
    };
    let pinger = agent("pinger", "ping").start(&platform).await.unwrap();
    let ponger = agent("ponger", "pong").start(&platform).await.unwrap();
    platform
        .client("test")
        .publish(Topic::BusinessFacts, "ping", 0)
        .await
        .unwrap();
    // Both queues fill up and each agent's handler waits to publish into the other's: the
    // publish times out, the handler fails, and after its attempts the event is dead-lettered.
    let first = tokio::time::timeout(Duration::from_secs(10), dead_letters.next())
        .await
        .expect("the cycle is broken by a dead letter")
        .unwrap();
    assert_eq!(first.envelope.event_type, "event.dead_lettered");
    assert!(
        first.envelope.data["reason"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{}",
        first.envelope.data
    );
    // And everything settles: no event holds a place any more.
    let bus = platform.embedded_bus().unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        while bus.queue_stats().iter().any(|s| s.in_use > 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the agents drain their queues");
    pinger.shutdown().await.unwrap();
    ponger.shutdown().await.unwrap();
}
