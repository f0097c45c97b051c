// The task of a fan-in is typed by its request: one error, at the task's payload type.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "search.requested", reply = Vec<String>)]
struct Search {
    q: String,
}

#[on_fan_in(Search)]
async fn collect(_task: TaskContext<String>, hits: Vec<String>) -> soorma::Result<usize> {
    Ok(hits.len())
}

fn main() {}
