use soorma::prelude::*;

#[on_invoke("ping.requested")]
async fn ping() -> Result<String, ToolError> {
    Ok("pong".to_owned())
}

fn main() {}
