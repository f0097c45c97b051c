//! A calculator tool: a request type that names its event and reply once, an `#[on_invoke]`
//! handler that takes it, and a client that calls it.
//!
//! ```text
//! cargo run -p soorma-examples --example hello_tool
//! ```
use soorma::prelude::*;
use soorma_examples::calc;

/// A calculation request.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "calculate.requested", reply = Calculated)]
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
#[on_invoke]
async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
    // Any error converts into a `ToolError`, which the caller gets as an error reply.
    let result = calc::eval(&req.data.expression)?;
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
        let call = client.call(Calculate {
            expression: expression.into(),
        });
        match call.await {
            Ok(c) => println!("{} = {}", c.expression, c.result),
            Err(e) => println!("{expression} -> error: {e}"),
        }
    }
    tool.shutdown().await
}
