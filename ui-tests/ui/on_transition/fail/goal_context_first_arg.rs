use soorma::prelude::*;

#[on_transition]
async fn advance(goal: GoalContext) -> soorma::Result<()> {
    let _ = goal.plan_id();
    Ok(())
}

fn main() {}
