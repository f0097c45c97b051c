// Typed fan-in: several request types, replies taken as a pattern and as
// `Result<_, SubTaskFailed>`, a fan-in that delegates more, extractors; run end to end.
use serde::{Deserialize, Serialize};
use schemars::JsonSchema;
use soorma::prelude::*;

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
struct Report {
    topic: String,
    sentiment: f64,
    summary: Option<String>,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "report.requested", reply = Report)]
struct MakeReport {
    topic: String,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "sentiment.analyze", reply = f64)]
struct AnalyzeSentiment {
    text: String,
}

#[derive(Request, Serialize, Deserialize, JsonSchema)]
#[request(event = "summary.generate", reply = String)]
struct Summarize {
    text: String,
}

#[on_invoke(agent = "analyzers")]
async fn sentiment(req: Invocation<AnalyzeSentiment>) -> Result<f64, ToolError> {
    Ok(if req.data.text.contains("good") { 1.0 } else { -1.0 })
}

#[on_invoke(agent = "analyzers")]
async fn summarize(req: Invocation<Summarize>) -> Result<String, ToolError> {
    Err(ToolError::new(format!("cannot summarize {}", req.data.text)))
}

#[derive(Default, Serialize, Deserialize)]
struct Notes {
    topic: String,
}

#[on_task(agent = "reporter")]
async fn report(mut task: TaskContext<MakeReport, Notes>) -> soorma::Result<()> {
    task.state_mut().topic = task.data.topic.clone();
    let text = format!("{} is good", task.data.topic);
    task.fan_out((AnalyzeSentiment { text: text.clone() }, Summarize { text }))
        .await?;
    Ok(())
}

/// Runs once, when both replies are in; a failed summary does not fail the report.
#[on_fan_in(AnalyzeSentiment, Summarize, agent = "reporter")]
async fn collect(
    task: TaskContext<MakeReport, Notes>,
    (sentiment, summary): (f64, Result<String, SubTaskFailed>),
    _bus: BusClient,
) -> soorma::Result<Report> {
    Ok(Report {
        topic: task.state().topic.clone(),
        sentiment,
        summary: summary.ok(),
    })
}

// A fan-in may delegate more instead of completing the task.
#[on_fan_in(Summarize, agent = "delegator")]
async fn again(mut task: TaskContext<MakeReport>, summary: String) -> Result<Delegated, ToolError> {
    Ok(task.fan_out(Summarize { text: summary }).await?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> soorma::Result<()> {
    let platform = Platform::embedded();
    let running = Agents::new()
        .tool("analyzers", soorma::handlers![sentiment, summarize])
        .worker("reporter", soorma::handlers![report, collect])
        .worker("delegator", soorma::handlers![again])
        .start(&platform)
        .await?;
    let report = platform
        .client("ui")
        .call(MakeReport { topic: "rust".into() })
        .await?;
    assert_eq!(
        report,
        Report {
            topic: "rust".into(),
            sentiment: 1.0,
            summary: None,
        }
    );
    running.shutdown().await
}
