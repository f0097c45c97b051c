use soorma::prelude::*;
use std::rc::Rc;

// Handlers run on a multi-threaded runtime: their futures must be `Send`; the error's note
// says so (rustc does not name the `Rc` through the trait bound).
#[on_event("business-facts", "order.placed")]
async fn on_order(event: Event) {
    let shared = Rc::new(event.data.clone());
    event.bus().announce("order.seen", &*shared).await.ok();
}

fn main() {}
