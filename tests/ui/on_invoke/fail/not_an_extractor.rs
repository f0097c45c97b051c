use soorma::prelude::*;

#[on_invoke("scale.requested")]
async fn scale(req: Invocation<i64>, factor: u32) -> Result<i64, ToolError> {
    Ok(req.data * i64::from(factor))
}

fn main() {}
