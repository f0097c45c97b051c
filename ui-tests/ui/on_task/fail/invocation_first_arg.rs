use soorma::prelude::*;

#[on_task("research.requested")]
async fn research(req: Invocation<String>) -> soorma::Result<()> {
    let _ = req.data;
    Ok(())
}

fn main() {}
