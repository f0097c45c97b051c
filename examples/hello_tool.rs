//! A calculator tool: `#[on_invoke]` with typed request and reply.
//!
//! ```text
//! cargo run -p soorma-examples --example hello_tool
//! ```
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;
use soorma_examples::calc;

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculate {
    /// An arithmetic expression: numbers, `+ - * /`, parentheses.
    expression: String,
}

/// A calculation result.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Calculated {
    expression: String,
    result: f64,
}

/// Evaluates an arithmetic expression.
#[on_invoke("calculate.requested")]
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    let result = calc::eval(&req.data.expression).map_err(|e| ToolError::new(e.to_string()))?;
    Ok(Calculated {
        expression: req.data.expression,
        result,
    })
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let platform = Platform::from_env().await?;
    let tool = Tool::new("calculator")
        .version("1.0.0")
        .description("A calculator.")
        .start(&platform)
        .await?;

    let def = tool.definition();
    println!(
        "registered `{}` v{} with capability `{}`: {}",
        def.name, def.version, def.capabilities[0].task_name, def.capabilities[0].description
    );

    let client = platform.client("hello-client");
    for expression in ["1 + 2 * 3", "(10 - 4) / 4", "2 / (1 - 1)"] {
        let reply = client
            .request(
                "calculate.requested",
                Calculate {
                    expression: expression.into(),
                },
                "calculate.completed",
            )
            .await?;
        match reply.into_result::<Calculated>() {
            Ok(c) => println!("{} = {}", c.expression, c.result),
            Err(e) => println!("{expression} -> error: {e}"),
        }
    }
    tool.shutdown().await
}
