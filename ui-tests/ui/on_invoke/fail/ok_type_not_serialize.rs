use soorma::prelude::*;

// Neither `Serialize` nor `JsonSchema`.
struct Doubled {
    value: i64,
}

#[on_invoke("double.requested")]
async fn double(req: Invocation<i64>) -> Result<Doubled, ToolError> {
    Ok(Doubled { value: req.data * 2 })
}

fn main() {}
