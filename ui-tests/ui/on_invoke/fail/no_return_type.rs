use soorma::prelude::*;

#[on_invoke("log.requested")]
async fn log(req: Invocation<String>) {
    println!("{}", req.data);
}

fn main() {}
