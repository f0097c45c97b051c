// A batch fan-out (`Vec<R>`, any size) fanned in as the `Vec` of its replies, in order.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "square.requested", reply = i64)]
struct Square(i64);

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "squares.requested", reply = Vec<i64>)]
struct Squares(Vec<i64>);

#[on_invoke(agent = "squarer")]
async fn square(req: Invocation<Square>) -> Result<i64, ToolError> {
    Ok(req.data.0 * req.data.0)
}

#[on_task(agent = "squares")]
async fn squares(mut task: TaskContext<Squares>) -> soorma::Result<Delegated> {
    let batch: Vec<Square> = task.data.0.iter().map(|n| Square(*n)).collect();
    task.fan_out(batch).await
}

#[on_fan_in(Vec<Square>, agent = "squares")]
async fn squared(_task: TaskContext<Squares>, all: Vec<i64>) -> soorma::Result<Vec<i64>> {
    Ok(all)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let platform = Platform::embedded();
    let running = Agents::new()
        .tool("squarer", handlers![square])
        .worker("squares", handlers![squares, squared])
        .start(&platform)
        .await
        .unwrap();
    let all = platform.client("ui").call(Squares(vec![1, 2, 3])).await.unwrap();
    assert_eq!(all, [1, 4, 9]);
    running.shutdown().await.unwrap();
}
