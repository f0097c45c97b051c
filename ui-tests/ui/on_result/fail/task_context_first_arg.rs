use soorma::prelude::*;

#[on_result("search.completed")]
async fn collect(task: TaskContext<String>) -> soorma::Result<()> {
    let _ = task.data;
    Ok(())
}

fn main() {}
