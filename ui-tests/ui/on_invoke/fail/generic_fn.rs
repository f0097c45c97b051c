use soorma::prelude::*;

#[on_invoke("echo.requested")]
async fn echo<T>(req: Invocation<T>) -> Result<i64, ToolError> {
    let _ = req.data;
    Ok(0)
}

fn main() {}
