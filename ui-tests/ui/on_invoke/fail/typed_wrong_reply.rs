// A typed tool returns its request's reply type: one error, at the return type, naming it.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "shout.requested", reply = String)]
struct Shout {
    text: String,
}

#[on_invoke]
async fn shout(req: Invocation<Shout>) -> Result<usize, ToolError> {
    Ok(req.data.text.len())
}

fn main() {}
