// A worker task: state, sequential delegation, fan-out and completion.
use soorma::prelude::*;

/// Researches a topic by asking a searcher and two summarizers.
#[on_task("research.requested", agent = "researcher", name = "research")]
async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    let topic = task.data.clone();
    task.set_state("topic", &topic)?;
    let _: Option<String> = task.state_value("topic")?;
    task.save().await?;

    let _sub_task_id: String = task
        .delegate_with(Delegation::new("search.requested", &topic, "search.completed"))
        .await?;

    let text = serde_json::json!({ "text": topic });
    let _group_id: String = task
        .delegate_parallel([
            Delegation::new("summary.short", &text, "summary.completed"),
            Delegation::new("summary.long", &text, "summary.completed"),
        ])
        .await?;

    task.progress(0.5, "delegated").await?;
    Ok(())
}

/// Completes (or fails) immediately; returns `()`, with extractors.
#[on_task(event = "quick.requested", agent = "researcher")]
async fn quick(mut task: TaskContext, _bus: BusClient, _platform: Platform) {
    let outcome = if task.data.is_null() {
        task.fail("no input").await
    } else {
        task.complete(serde_json::json!({ "done": true })).await
    };
    let _: Result<bool, soorma::Error> = outcome;
}

#[derive(Clone)]
struct Limits {
    max_sub_tasks: usize,
}

/// Fans out to at most `max_sub_tasks` workers; any error that converts into `Box<dyn Error + Send + Sync>` works.
#[on_task("fanout.requested")]
async fn fanout(mut task: TaskContext<Vec<String>>, limits: State<Limits>) -> Result<(), ToolError> {
    let delegations: Vec<Delegation> = task
        .data
        .iter()
        .take(limits.max_sub_tasks)
        .map(|item| Delegation::new("item.process", item, "item.processed"))
        .collect();
    task.delegate_parallel(delegations).await?;
    Ok(())
}

fn main() {
    let _worker = Worker::new("researcher").with_state(Limits { max_sub_tasks: 4 });
    let _ = (research, quick, fanout);
}
