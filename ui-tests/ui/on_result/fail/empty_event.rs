use soorma::prelude::*;

#[on_result("")]
async fn collect(result: ResultContext) {
    let _ = result.data;
}

fn main() {}
