// Fan-in: one function stacked for two result events.
use soorma::prelude::*;

/// Collects the summaries and completes the research task once all are in.
#[on_result("summary.completed", agent = "researcher")]
#[on_result(event = "search.completed", agent = "researcher")]
async fn collect(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        let results: Vec<_> = all.into_iter().map(|s| s.result).collect();
        task.complete(results).await?;
    }
    Ok(())
}

/// Typed results, a failed sub-task, the whole task's results (`None` group) and a `()` return.
#[on_result("count.completed", description = "Sums counts.")]
async fn sum_counts(result: ResultContext<u64>, _bus: BusClient) {
    if !result.is_success() {
        let _: Option<&String> = result.error.as_ref();
        return;
    }
    let _: Option<u64> = result.data;
    let _: Option<&str> = result.sub_task_id();
    if let Ok(mut task) = result.record_in_parent().await {
        if let Ok(Some(all)) = task.group_results(None).await {
            let _ = task.complete(all.len()).await;
        }
        let _: soorma::Result<Vec<soorma::SubTaskInfo>> = task.sub_tasks().await;
    }
}

/// Looks at the parent task without recording; any error that converts into `Box<dyn Error + Send + Sync>` works.
#[on_result("peek.completed")]
async fn peek(result: ResultContext<String>) -> Result<(), ToolError> {
    let parent = result.parent().await?;
    let _: &str = parent.task_id();
    Ok(())
}

fn main() {
    let _ = (collect, sum_counts, peek);
}
