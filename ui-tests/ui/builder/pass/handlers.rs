// Run-time registration with the builder API (no attribute macros).
use soorma::prelude::*;

async fn double(req: Invocation<i64>) -> Result<i64, ToolError> {
    Ok(req.data * 2)
}

#[derive(Clone)]
struct Rates {
    vat: f64,
}

async fn gross(req: Invocation<f64>, rates: State<Rates>) -> soorma::Result<f64> {
    Ok(req.data * (1.0 + rates.vat))
}

async fn research(mut task: TaskContext<String>) -> soorma::Result<()> {
    let topic = task.data.clone();
    task.delegate_with(Delegation::new("search.requested", &topic, "search.completed"))
        .await?;
    Ok(())
}

async fn collect(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    if let Some(all) = task.group_results(result.group_id()).await? {
        task.complete(all.len()).await?;
    }
    Ok(())
}

async fn on_order(_event: Event, _bus: BusClient) {}

fn main() {
    let tool = Tool::new("x").handler(Handler::on_invoke("e", double));
    let _ = tool.definition();

    let _pricing = Tool::new("pricing")
        .with_state(Rates { vat: 0.2 })
        .use_registered_handlers(false)
        .handler(
            Handler::on_invoke("price.gross", gross)
                .with_description("Adds VAT.")
                .with_name("gross"),
        );

    let _worker = Worker::new("researcher")
        .handler(Handler::on_task("research.requested", research))
        .handler(Handler::on_result("search.completed", collect));

    let handler = Handler::on_event(Topic::BusinessFacts, "*", on_order);
    assert_eq!(handler.event(), "*");
    assert_eq!(handler.topic(), Topic::BusinessFacts);
    let _agent = Agent::new("shipping").handler(handler);
}
