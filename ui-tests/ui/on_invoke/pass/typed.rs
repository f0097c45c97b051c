// Typed tools: the event comes from the payload's request type; extractors, `name`, `agent`,
// a typed caller.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Serialize, Deserialize, JsonSchema)]
struct Calculated {
    value: i64,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "double.requested", reply = Calculated)]
struct Double {
    value: i64,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "scale.requested", reply = i64)]
struct Scale {
    value: i64,
}

/// Doubles a number.
#[on_invoke(agent = "typed-calculator")]
async fn double(req: Invocation<Double>) -> Result<Calculated, ToolError> {
    Ok(Calculated {
        value: req.data.value * 2,
    })
}

#[derive(Clone)]
struct Factor(i64);

// `soorma::Result` (any `E: Display`), an extractor, and the optional arguments.
#[soorma::on_invoke(agent = "typed-calculator", name = "scale", description = "Scales.")]
pub async fn scale(req: Invocation<Scale>, State(Factor(f)): State<Factor>) -> soorma::Result<i64> {
    Ok(req.data.value * f)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> soorma::Result<()> {
    let listed = soorma::handlers![double, scale];
    assert_eq!(listed[0].event(), "double.requested");
    assert_eq!(listed[1].event(), "scale.requested");

    let platform = Platform::embedded();
    let tool = Tool::new("typed-calculator")
        .with_state(Factor(3))
        .start(&platform)
        .await?;
    let client = platform.client("ui");
    let doubled: Calculated = client.call(Double { value: 21 }).await?;
    assert_eq!(doubled.value, 42);
    let scaled: i64 = client.call(Scale { value: 2 }).await?;
    assert_eq!(scaled, 6);
    tool.shutdown().await
}
