// A renamed dependency: every attribute and the derive take `crate = "sdk"`, and the generated
// code goes through `sdk::__private`. (Cargo does not let one crate depend on `soorma` twice,
// as `soorma` and as `sdk = { package = "soorma", .. }`, so the rename is an `extern crate`
// alias, which puts `sdk` in the extern prelude exactly as the Cargo rename would.)
extern crate soorma as sdk;

use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use sdk::prelude::{Invocation, ResultContext, TaskContext, ToolError, Event, GoalContext, PlanContext, State};

#[derive(sdk::Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "shout.requested", reply = String, crate = "sdk")]
struct Shout {
    text: String,
}

#[derive(sdk::Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "count.requested", reply = usize, crate = "sdk")]
struct Count {
    text: String,
}

#[sdk::on_invoke(crate = "sdk")]
async fn shout(req: Invocation<Shout>) -> Result<String, ToolError> {
    Ok(req.data.text.to_uppercase())
}

#[sdk::on_invoke("echo.requested", crate = "sdk")]
async fn echo(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data)
}

#[sdk::on_task(crate = "sdk", agent = "counter")]
async fn count(mut task: TaskContext<Count>) -> sdk::Result<()> {
    let text = task.data.text.clone();
    task.fan_out(Shout { text }).await?;
    Ok(())
}

#[sdk::on_fan_in(Shout, crate = "sdk", agent = "counter")]
async fn counted(_task: TaskContext<Count>, loud: String) -> sdk::Result<usize> {
    Ok(loud.len())
}

#[sdk::on_result("other.completed", crate = "sdk", agent = "counter")]
#[sdk::on_result("more.completed", crate = "sdk", agent = "counter")]
async fn other(_result: ResultContext) {}

#[sdk::on_event("business-facts", "order.placed", crate = "sdk")]
async fn placed(_event: Event) {}

#[sdk::on_goal("trip.goal", crate = "sdk", agent = "planner")]
async fn trip(_goal: GoalContext, _s: State<u8>) {}

#[sdk::on_transition(crate = "sdk", agent = "planner")]
async fn advance(mut plan: PlanContext) -> sdk::Result<()> {
    plan.execute_next().await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> sdk::Result<()> {
    let listed = sdk::handlers![shout, echo, count, counted, other, placed, trip, advance];
    assert_eq!(listed.len(), 9);
    let platform = sdk::Platform::embedded();
    let tool = sdk::Tool::new("shouter")
        .use_registered_handlers(false)
        .handlers(sdk::handlers![shout])
        .start(&platform)
        .await?;
    let loud = platform.client("ui").call(Shout { text: "hi".into() }).await?;
    assert_eq!(loud, "HI");
    tool.shutdown().await
}
