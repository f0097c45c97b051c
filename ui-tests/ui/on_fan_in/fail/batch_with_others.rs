// A batch is fanned in alone, not in a list with other request types.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "square.requested", reply = i64)]
struct Square(i64);

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "sum.requested", reply = i64)]
struct Sum(Vec<i64>);

#[on_fan_in(Vec<Square>, Sum)]
async fn squared(_task: TaskContext<Sum>, all: (Vec<i64>, i64)) -> soorma::Result<i64> {
    Ok(all.1)
}

fn main() {}
