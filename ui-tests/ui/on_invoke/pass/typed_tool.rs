// A typed tool: doc comment as description, an agent, and the optional arguments.
use soorma::prelude::*;

/// Doubles a number.
#[on_invoke("double.requested", agent = "doubler")]
async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
    req.data
        .checked_mul(2)
        .ok_or_else(|| ToolError::new("overflow"))
}

// Every argument by name; `description` overrides the doc comment.
/// Ignored: `description` wins.
#[on_invoke(
    event = "greet.requested",
    agent = "greeter",
    description = "Greets someone by name.",
    name = "greet"
)]
async fn greet(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(format!("Hello, {}!", req.data))
}

// Raw JSON in and out (`Invocation` defaults to `Invocation<serde_json::Value>`), context
// accessors, and any error that converts into `Box<dyn Error + Send + Sync>` (here `String`).
#[on_invoke("echo.requested")]
async fn echo(req: Invocation) -> Result<serde_json::Value, String> {
    let _: Option<&str> = req.response_event();
    let _: &str = req.request_id();
    let _: &str = req.tenant();
    Ok(serde_json::json!({ "echo": req.data, "agent": req.agent() }))
}

// Raw identifiers are fine.
#[on_invoke("type.requested")]
async fn r#type(req: Invocation<f64>) -> Result<Vec<f64>, ToolError> {
    Ok(vec![req.data])
}

fn main() {
    let _ = (double, greet, echo, r#type);
}
