use soorma::prelude::*;

#[on_invoke("double.requested")]
fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data * 2)
}

fn main() {}
