use soorma::prelude::*;

#[on_task("research.requested")]
async fn research(task: TaskContext<String>) -> usize {
    task.data.len()
}

fn main() {}
