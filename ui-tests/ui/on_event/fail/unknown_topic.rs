use soorma::prelude::*;

#[on_event(topic = "business_facts", event = "order.placed")]
async fn on_order(event: Event) {
    let _ = event.data;
}

#[on_event("orders", "order.placed")]
async fn on_order_positional(event: Event) {
    let _ = event.data;
}

fn main() {}
