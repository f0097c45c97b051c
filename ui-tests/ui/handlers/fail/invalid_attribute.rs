// An attribute with an error still defines the function and its (empty) handler set, so the
// one error is the attribute's: no "cannot find" at the function's uses.
use soorma::prelude::*;

#[on_invoke("ping requested")]
async fn ping(_: Invocation) -> Result<String, ToolError> {
    Ok("pong".into())
}

fn main() {
    let _ = soorma::handlers![ping];
    let _ = ping;
}
