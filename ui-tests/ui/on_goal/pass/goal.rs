// A planner goal: typed payload, a `State` extractor holding the plan, starting it.
use std::sync::Arc;

use soorma::prelude::*;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Research {
    topic: String,
}

/// Researches a topic with the research plan.
#[on_goal("research.goal", agent = "research-planner", name = "research")]
async fn research(goal: GoalContext<Research>, plan: State<Arc<Plan>>) -> soorma::Result<()> {
    let _topic: &str = &goal.data.topic;
    let running: PlanContext = goal.start(&plan).await?;
    let _ = running.current_state();
    Ok(())
}

/// Untyped goals work too; any error that converts into `Box<dyn Error + Send + Sync>` is fine.
#[on_goal(event = "quick.goal", agent = "research-planner")]
async fn quick(goal: GoalContext) -> Result<(), ToolError> {
    let _ = goal.plan_id();
    Ok(())
}

fn main() {
    let _ = (research, quick);
}
