use soorma::prelude::*;

#[on_task("research.requested")]
fn research(task: TaskContext<String>) {
    let _ = task.data;
}

fn main() {}
