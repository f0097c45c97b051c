use soorma::prelude::*;

#[on_invoke("double.requested", agent = "doubler", agent = "multiplier")]
async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data * 2)
}

#[on_invoke("triple.requested", event = "triple.requested")]
async fn triple(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data * 3)
}

fn main() {}
