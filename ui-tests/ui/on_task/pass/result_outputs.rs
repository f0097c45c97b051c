// Handlers other than `#[on_invoke]` may return `Result<T, E>` for any `T` (the value is
// ignored) and any error that converts into `Box<dyn Error + Send + Sync>`.
use soorma::prelude::*;

/// Ends with the call that finishes the task: its `soorma::Result<bool>` is the handler's.
#[on_task("count.requested")]
async fn count(mut task: TaskContext<Vec<String>>) -> soorma::Result<bool> {
    let n = task.data.len();
    task.complete(n).await
}

/// `?` on an I/O error in a handler returning `std::io::Error`.
#[on_task("read.requested", agent = "reader")]
async fn read(_task: TaskContext<String>) -> Result<usize, std::io::Error> {
    Ok(std::fs::read_to_string("/dev/null")?.len())
}

/// A `&'static str` error.
#[on_result("count.completed")]
async fn counted(result: ResultContext<usize>) -> Result<usize, &'static str> {
    result.data.ok_or("the count failed")
}

/// Your own error type.
#[derive(Debug)]
struct FilingFailed(soorma::Error);

impl std::fmt::Display for FilingFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("could not file the report")
    }
}

impl std::error::Error for FilingFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[on_event("business-facts", "report.ready")]
async fn file(event: Event<String>) -> Result<String, FilingFailed> {
    event
        .bus()
        .announce("report.filed", event.data.clone())
        .await
        .map_err(FilingFailed)
}

/// Goals may return the running plan.
#[on_goal("quick.goal", agent = "planner")]
async fn quick(goal: GoalContext, plan: State<std::sync::Arc<Plan>>) -> soorma::Result<PlanContext> {
    goal.start(&plan).await
}

fn main() {
    let _ = (count, read, counted, file, quick);
}
