use soorma::prelude::*;

#[on_goal(agent = "planner")]
async fn research(goal: GoalContext) -> soorma::Result<()> {
    let _ = goal.plan_id();
    Ok(())
}

fn main() {}
