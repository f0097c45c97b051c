use soorma::prelude::*;

struct Calculator;

impl Calculator {
    #[on_invoke("double.requested")]
    async fn double(&self, req: Invocation<i64>) -> Result<i64, ToolError> {
        Ok(req.data * 2)
    }
}

fn main() {}
