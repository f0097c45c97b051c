// Every type `#[on_fan_in]` names is a request type: one error, at the one that is not.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "research.requested", reply = usize)]
struct Research {
    topic: String,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "search.requested", reply = Vec<String>)]
struct Search {
    q: String,
}

#[on_fan_in(Search, String)]
async fn collect(
    _task: TaskContext<Research>,
    (hits, text): (Vec<String>, String),
) -> soorma::Result<usize> {
    Ok(hits.len() + text.len())
}

fn main() {}
