use soorma::prelude::*;
use std::rc::Rc;

// Handlers run on a multi-threaded runtime: their futures must be `Send`. The error is on the
// handler's signature and names the value held across the `.await` (the `Rc`).
#[on_event("business-facts", "order.placed")]
async fn on_order(event: Event) {
    let shared = Rc::new(event.data.clone());
    event.bus().announce("order.seen", &*shared).await.ok();
}

fn main() {}
