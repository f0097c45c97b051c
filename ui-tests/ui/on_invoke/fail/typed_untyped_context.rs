// Without an event name, the payload type names the event: `Invocation` (raw JSON) cannot.
use soorma::prelude::*;

#[on_invoke(agent = "echo")]
async fn echo(req: Invocation) -> Result<serde_json::Value, ToolError> {
    Ok(req.data)
}

fn main() {}
