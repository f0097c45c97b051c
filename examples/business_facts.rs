//! Raw pub/sub with `#[on_event]`: a shipping agent reacts to `order.placed` facts and announces
//! `order.shipped`; an audit agent sees every business fact.
//!
//! ```text
//! cargo run -p soorma-examples --example business_facts
//! ```
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;
use tokio::sync::mpsc;

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct OrderPlaced {
    order_id: String,
    items: u32,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct OrderShipped {
    order_id: String,
    parcels: u32,
}

/// Ships placed orders: one parcel per three items.
#[on_event(topic = "business-facts", event = "order.placed", agent = "shipping")]
async fn ship(event: Event<OrderPlaced>) -> soorma::Result<()> {
    let shipped = OrderShipped {
        order_id: event.data.order_id.clone(),
        parcels: event.data.items.div_ceil(3),
    };
    event.bus().announce("order.shipped", shipped).await?;
    Ok(())
}

/// The audit log's sink.
#[derive(Clone)]
struct AuditLog(Arc<mpsc::UnboundedSender<String>>);

/// Records every business fact.
#[on_event(topic = "business-facts", event = "*", agent = "audit")]
async fn audit(event: Event, State(log): State<AuditLog>) {
    let line = format!(
        "[audit] {} from {}: {}",
        event.event_type(),
        event.envelope().source,
        event.data
    );
    let _ = log.0.send(line);
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let platform = Platform::from_env().await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let shipping = Agent::new("shipping").start(&platform).await?;
    let audit = Agent::new("audit")
        .with_state(AuditLog(Arc::new(tx)))
        .start(&platform)
        .await?;

    let shop = platform.client("shop");
    for (id, items) in [("A-100", 2), ("A-101", 7)] {
        shop.bus()
            .announce(
                "order.placed",
                OrderPlaced {
                    order_id: id.into(),
                    items,
                },
            )
            .await?;
    }
    // Two placed + two shipped facts reach the audit agent.
    for _ in 0..4 {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(line)) => println!("{line}"),
            _ => {
                return Err(Error::Handler(
                    "audit log did not receive every fact".into(),
                ));
            }
        }
    }
    shipping.shutdown().await?;
    audit.shutdown().await
}
