// Stacked attributes on one function make one handler set; `handlers![..]` lists functions by
// path (in modules too), and a failed expansion elsewhere does not matter here.
use soorma::prelude::*;

mod results {
    use soorma::prelude::*;

    /// Collects two kinds of results.
    #[on_result("search.completed", agent = "researcher")]
    #[inline]
    #[soorma::on_result(event = "summary.completed", agent = "researcher")]
    pub async fn collect(result: ResultContext) -> soorma::Result<()> {
        let _ = result.record_in_parent().await?;
        Ok(())
    }
}

#[on_task("research.requested", agent = "researcher")]
async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    let q = task.data.clone();
    task.delegate_with(Delegation::new("search.requested", &q, "search.completed"))
        .await?;
    Ok(())
}

// Two string-named tools on one function.
#[on_invoke("upper.requested")]
#[on_invoke("shout.requested", name = "shout")]
async fn upper(req: Invocation<String>) -> Result<String, ToolError> {
    Ok(req.data.to_uppercase())
}

fn main() {
    let listed = soorma::handlers![results::collect, research, upper,];
    let events: Vec<&str> = listed.iter().map(Handler::event).collect();
    assert_eq!(
        events,
        [
            "search.completed",
            "summary.completed",
            "research.requested",
            "upper.requested",
            "shout.requested",
        ]
    );
    let none: Vec<Handler> = soorma::handlers![];
    assert!(none.is_empty());
    let _group = Agents::new()
        .worker("researcher", soorma::handlers![research, results::collect])
        .tool("shouter", soorma::handlers![upper]);
}
