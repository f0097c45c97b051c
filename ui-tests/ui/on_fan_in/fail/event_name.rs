// `#[on_fan_in]` names request types, not events.
use soorma::prelude::*;

#[on_fan_in("search.completed")]
async fn collect(_task: TaskContext<String>, hits: Vec<String>) -> soorma::Result<usize> {
    Ok(hits.len())
}

fn main() {}
