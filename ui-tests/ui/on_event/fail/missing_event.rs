use soorma::prelude::*;

#[on_event("business-facts")]
async fn on_order(event: Event) {
    let _ = event.data;
}

fn main() {}
