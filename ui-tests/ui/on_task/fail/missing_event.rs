use soorma::prelude::*;

#[on_task]
async fn research(task: TaskContext<String>) {
    let _ = task.data;
}

#[on_task(agent = "researcher")]
async fn summarize(task: TaskContext<String>) {
    let _ = task.data;
}

fn main() {}
