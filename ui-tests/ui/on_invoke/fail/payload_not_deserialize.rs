use soorma::prelude::*;

// Neither `Deserialize` nor `JsonSchema`.
struct Calculate {
    a: i64,
    b: i64,
}

#[on_invoke("add.requested")]
async fn add(req: Invocation<Calculate>) -> Result<i64, ToolError> {
    Ok(req.data.a + req.data.b)
}

fn main() {}
