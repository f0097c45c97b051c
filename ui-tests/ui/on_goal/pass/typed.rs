// A typed goal handler: the goal's event comes from its request type.
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "trip.goal", reply = serde_json::Value)]
struct Trip {
    to: String,
}

/// Plans a trip.
#[on_goal(agent = "trip-planner", name = "trip")]
async fn plan_trip(goal: GoalContext<Trip>, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    let _: &str = &goal.data.to;
    goal.start(&plan).await?;
    Ok(())
}

fn main() {
    let listed = soorma::handlers![plan_trip];
    assert_eq!(listed[0].event(), "trip.goal");
}
