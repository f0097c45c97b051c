// `handlers![..]` lists annotated functions: a plain function is an error at its name.
use soorma::prelude::*;

async fn ping(_: Invocation) -> Result<String, ToolError> {
    Ok("pong".into())
}

fn main() {
    let _ = soorma::handlers![ping];
}
