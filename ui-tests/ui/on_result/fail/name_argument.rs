use soorma::prelude::*;

#[on_result("search.completed", name = "collect")]
async fn collect(result: ResultContext) {
    let _ = result.data;
}

fn main() {}
