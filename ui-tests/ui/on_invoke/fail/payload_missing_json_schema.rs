// The payload derives `Deserialize` but not `JsonSchema`: one error, at the payload type.
use serde::Deserialize;
use soorma::prelude::*;

#[derive(Deserialize)]
struct Calculate {
    a: i64,
    b: i64,
}

#[on_invoke("add.requested")]
async fn add(req: Invocation<Calculate>) -> Result<i64, ToolError> {
    Ok(req.data.a + req.data.b)
}

fn main() {}
