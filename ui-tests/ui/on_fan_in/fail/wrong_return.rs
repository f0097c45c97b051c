// A fan-in returns its task's reply type (or `Delegated`): one error, at the return type.
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

#[on_fan_in(Search)]
async fn collect(_task: TaskContext<Research>, hits: Vec<String>) -> soorma::Result<String> {
    Ok(hits.join(", "))
}

fn main() {}
