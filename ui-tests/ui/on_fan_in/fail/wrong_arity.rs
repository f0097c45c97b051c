// Two request types, three replies: one error, at the replies' type.
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

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "score.requested", reply = f64)]
struct Score {
    text: String,
}

#[on_fan_in(Search, Score)]
async fn collect(
    _task: TaskContext<Research>,
    (hits, score, extra): (Vec<String>, f64, f64),
) -> soorma::Result<usize> {
    Ok(hits.len() + (score + extra) as usize)
}

fn main() {}
