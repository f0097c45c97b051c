//! `{{name}}`: a soorma worker that reviews a document by delegating to a tool.
//!
//! The worker `{{name}}` takes a review task, delegates the word count to the tool
//! `{{name}}-words` (in this crate too, so everything runs end to end), and completes the task
//! with a report when the tool's result arrives.
//!
//! `cargo run` starts both agents on the embedded (in-process) platform, submits one task and
//! prints the report. With `SOORMA_NATS_URL` set (see `soorma dev`) they serve tasks from other
//! processes until Ctrl-C. `cargo test` checks the round trip.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use soorma::prelude::*;

/// The worker's name in the registry.
const WORKER: &str = "{{name}}";
/// The tool's name in the registry.
const TOOL: &str = "{{name}}-words";
/// The event that starts a review task (the worker's capability).
const TASK_EVENT: &str = "{{name}}.requested";
/// The event this crate's own requests ask the report on (every caller picks its own).
const REPORT_EVENT: &str = "{{name}}.completed";
/// The event that invokes the tool, and the event its result comes back on.
const COUNT_EVENT: &str = "{{name}}.count.requested";
const COUNTED_EVENT: &str = "{{name}}.count.completed";

/// A document to review.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Document {
    /// Its title.
    title: String,
    /// Its text.
    text: String,
}

/// The review.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Review {
    /// The document's title.
    title: String,
    /// How many words it has.
    words: usize,
    /// Whether it fits on a slide (at most 50 words).
    short: bool,
}

/// A text to count.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct CountWords {
    /// The text.
    text: String,
}

/// Counts the words of a text.
#[on_invoke("{{name}}.count.requested", agent = "{{name}}-words")]
async fn count_words(req: Invocation<CountWords>) -> Result<usize, ToolError> {
    match req.data.text.split_whitespace().count() {
        0 => Err(ToolError::new("the text has no words")),
        n => Ok(n),
    }
}

/// Reviews a document: delegates the word count, completes when it arrives.
#[on_task("{{name}}.requested", agent = "{{name}}")]
async fn review(mut task: TaskContext<Document>) -> soorma::Result<()> {
    // Task state is persisted before the delegation is published.
    let title = task.data.title.clone();
    task.set_state("title", title)?;
    let text = CountWords {
        text: task.data.text.clone(),
    };
    task.delegate_with(Delegation::new(COUNT_EVENT, &text, COUNTED_EVENT)).await?;
    Ok(())
}

/// Completes the review with the tool's result (or fails it with the tool's error).
#[on_result("{{name}}.count.completed", agent = "{{name}}")]
async fn counted(result: ResultContext<usize>) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    let Some(words) = result.data else {
        let error = result.error.unwrap_or_default();
        task.fail(format!("cannot count the words: {error}"))
            .await?;
        return Ok(());
    };
    let review = Review {
        title: task.state_value("title")?.unwrap_or_default(),
        words,
        short: words <= 50,
    };
    task.complete(review).await?;
    Ok(())
}

/// The worker: the `#[on_task]` / `#[on_result]` handlers named `{{name}}`.
fn worker() -> AgentBuilder {
    Worker::new(WORKER)
        .version(env!("CARGO_PKG_VERSION"))
        .description("Reviews documents.")
}

/// The tool the worker delegates to.
fn tool() -> AgentBuilder {
    Tool::new(TOOL)
        .version(env!("CARGO_PKG_VERSION"))
        .description("Counts words.")
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    let platform = Platform::from_env().await?;
    let tool = tool().start(&platform).await?;
    let worker = worker().start(&platform).await?;
    if platform.kind() != "embedded" {
        println!(
            "`{WORKER}` serves `{TASK_EVENT}` on the {} platform; Ctrl-C to stop",
            platform.kind()
        );
        // Ctrl-C or SIGTERM: the worker stops taking tasks and finishes its handlers.
        worker.shutdown_on_signal().await?;
        return tool.shutdown().await;
    }
    // Nothing outside this process can reach the embedded platform: show one task.
    let document = Document {
        title: "Hello".into(),
        text: "agents talk to each other through events".into(),
    };
    let review: Review = platform
        .client("{{name}}-demo")
        .invoke(TASK_EVENT, document, REPORT_EVENT)
        .await?;
    println!("{WORKER} reviewed a document: {review:?}");
    println!("set SOORMA_NATS_URL (see `soorma dev`) to serve other processes");
    worker.shutdown().await?;
    tool.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_review_round_trip() -> soorma::Result<()> {
        let platform = Platform::embedded();
        let tool = tool().start(&platform).await?;
        let worker = worker().start(&platform).await?;
        let client = platform.client("test");

        let document = Document {
            title: "Notes".into(),
            text: "the worker delegates and the tool counts".into(),
        };
        let review: Review = client.invoke(TASK_EVENT, document, REPORT_EVENT).await?;
        assert_eq!(
            review,
            Review {
                title: "Notes".into(),
                words: 7,
                short: true
            }
        );

        // The tool's error fails the task, and the caller gets the reason.
        let empty = Document {
            title: "Empty".into(),
            text: String::new(),
        };
        let outcome = client
            .invoke::<Review>(TASK_EVENT, empty, REPORT_EVENT)
            .await;
        let error = outcome.unwrap_err().to_string();
        assert!(error.contains("the text has no words"), "{error}");

        worker.shutdown().await?;
        tool.shutdown().await
    }
}
