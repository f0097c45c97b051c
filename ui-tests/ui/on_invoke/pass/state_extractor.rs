// Extractors after the invocation: `State<S>`, `BusClient` and `Platform`.
use soorma::prelude::*;

#[derive(Clone)]
struct Rates {
    vat: f64,
}

/// Adds VAT to a net price.
#[on_invoke("price.gross", agent = "pricing")]
async fn gross(req: Invocation<f64>, State(rates): State<Rates>) -> Result<f64, ToolError> {
    Ok(req.data * (1.0 + rates.vat))
}

/// Adds VAT and announces the price.
#[on_invoke("price.announce", agent = "pricing")]
async fn announce(
    req: Invocation<f64>,
    rates: State<Rates>,
    bus: BusClient,
    _platform: Platform,
) -> Result<f64, ToolError> {
    let gross = req.data * (1.0 + rates.vat);
    bus.announce("price.announced", serde_json::json!({ "gross": gross }))
        .await?;
    Ok(gross)
}

fn main() {
    let _pricing = Tool::new("pricing").with_state(Rates { vat: 0.2 });
}
