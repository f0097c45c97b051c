// A planner transition: pause for a person, else follow the plan's transitions.
use soorma::prelude::*;

/// Advances the research plans.
#[on_transition(agent = "research-planner")]
async fn advance(mut plan: PlanContext, _bus: BusClient) -> soorma::Result<()> {
    if plan.trigger().is_some_and(|e| e.event_type == "review.needed") {
        return plan
            .request_human_input("Publish the report?", "review.answered")
            .await;
    }
    plan.execute_next().await
}

/// Without arguments too.
#[on_transition]
async fn log_only(plan: PlanContext) {
    let _ = plan.plan_id();
}

fn main() {
    let _ = (advance, log_only);
}
