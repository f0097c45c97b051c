use soorma::prelude::*;
use std::rc::Rc;

#[on_event("business-facts", "order.placed")]
async fn on_order(event: Event) {
    let shared = Rc::new(event.data);
    event.bus().announce("order.seen", &*shared).await.ok();
}

fn main() {}
