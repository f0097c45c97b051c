// Without an event name the payload must be a request type: one error, at the payload type.
use soorma::prelude::*;

#[on_invoke]
async fn shout(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data.to_uppercase())
}

fn main() {}
