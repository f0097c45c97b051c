use soorma::prelude::*;

#[on_goal("research.goal")]
async fn research(task: TaskContext<String>) -> soorma::Result<()> {
    let _ = task.data;
    Ok(())
}

fn main() {}
