use soorma::prelude::*;

#[on_invoke("double.requested")]
async fn double(req: Invocation<i64>) -> i64 {
    req.data * 2
}

fn main() {}
