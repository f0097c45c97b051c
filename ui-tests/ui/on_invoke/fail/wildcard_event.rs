use soorma::prelude::*;

#[on_invoke("*")]
async fn anything(req: Invocation) -> Result<serde_json::Value, ToolError> {
    Ok(req.data)
}

fn main() {}
