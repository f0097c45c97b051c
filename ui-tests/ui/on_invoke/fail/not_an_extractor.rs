use soorma::prelude::*;

// `u32` is not an extractor (`FromHandlerInput`): one error, on the signature, naming `u32`.

#[on_invoke("scale.requested")]
async fn scale(req: Invocation<i64>, factor: u32) -> Result<i64, ToolError> {
    Ok(req.data * i64::from(factor))
}

fn main() {}
