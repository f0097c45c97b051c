// A typed task with typed state, its typed fan-out, and a string-named task with state.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "research.requested", reply = String)]
struct Research {
    topic: String,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "search.requested", reply = Vec<String>)]
struct Search {
    q: String,
}

#[derive(Default, Serialize, Deserialize)]
struct Notes {
    topic: String,
}

/// Researches a topic.
#[on_task(agent = "researcher", name = "research")]
async fn research(mut task: TaskContext<Research, Notes>) -> soorma::Result<()> {
    task.state_mut().topic = task.data.topic.clone();
    let q = task.data.topic.clone();
    task.fan_out(Search { q }).await?;
    Ok(())
}

#[on_fan_in(Search, agent = "researcher")]
async fn found(task: TaskContext<Research, Notes>, hits: Vec<String>) -> soorma::Result<String> {
    Ok(format!("{}: {}", task.state().topic, hits.join(", ")))
}

#[on_task("translate.requested", agent = "translator")]
async fn translate(task: TaskContext<String, Notes>, _bus: BusClient) {
    let _: &Notes = task.state();
}

fn main() {
    let listed = soorma::handlers![research, found, translate];
    assert_eq!(listed[0].event(), "research.requested");
    assert_eq!(listed[2].event(), "translate.requested");
}
