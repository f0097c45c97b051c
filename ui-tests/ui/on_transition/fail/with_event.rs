use soorma::prelude::*;

#[on_transition("search.completed", agent = "planner")]
async fn advance(mut plan: PlanContext) -> soorma::Result<()> {
    plan.execute_next().await
}

fn main() {}
