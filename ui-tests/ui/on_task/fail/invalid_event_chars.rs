use soorma::prelude::*;

#[on_task("research requested")]
async fn research(task: TaskContext<String>) {
    let _ = task.data;
}

#[on_task("research.*")]
async fn any_research(task: TaskContext<String>) {
    let _ = task.data;
}

#[on_task("research..requested")]
async fn double_dot(task: TaskContext<String>) {
    let _ = task.data;
}

fn main() {}
