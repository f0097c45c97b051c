use soorma::prelude::*;

#[on_event(event = "order.placed")]
async fn on_order(event: Event) {
    let _ = event.data;
}

fn main() {}
