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
