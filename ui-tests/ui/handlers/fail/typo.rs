// A typo in `handlers![..]` is a compile error at the name.
use soorma::prelude::*;

#[on_invoke("ping.requested")]
async fn ping(_: Invocation) -> Result<String, ToolError> {
    Ok("pong".into())
}

fn main() {
    let _ = soorma::handlers![pign];
}
