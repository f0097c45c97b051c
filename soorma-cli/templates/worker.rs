//! `{{name}}`: a soorma worker that reviews a document by delegating to a tool.
//!
//! The worker `{{name}}` takes a review task, delegates the word count to the tool
//! `{{name}}-words` (in this crate too, so everything runs end to end), and completes the task
//! with a report when the tool's reply arrives.
//!
//! `cargo run` starts both agents on the embedded (in-process) platform, submits one task and
//! prints the report. With `SOORMA_NATS_URL` set (see `soorma dev`) they serve tasks from other
//! processes until Ctrl-C. `cargo test` checks the round trip. `RUST_LOG=info cargo run` shows
//! what the SDK does (dead letters and rejected payloads are logged as warnings).

use soorma::prelude::*;

/// The worker's name in the registry.
const WORKER: &str = "{{name}}";
/// The tool's name in the registry.
const TOOL: &str = "{{name}}-words";

/// A document to review: the worker's request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "{{name}}.requested", reply = Review)]
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

/// A text to count: the tool's request.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "{{name}}.count.requested", reply = usize)]
struct CountWords {
    /// The text.
    text: String,
}

/// Counts the words of a text.
#[on_invoke]
async fn count_words(req: Invocation<CountWords>) -> Result<usize, ToolError> {
    match req.data.text.split_whitespace().count() {
        0 => Err(ToolError::new("the text has no words")),
        n => Ok(n),
    }
}

/// What the worker keeps in the task between the delegation and the reply.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Notes {
    title: String,
}

/// Reviews a document: delegates the word count (the task and its state are saved before the
/// request is published).
#[on_task]
async fn review(mut task: TaskContext<Document, Notes>) -> soorma::Result<Delegated> {
    task.state_mut().title = task.data.title.clone();
    let text = task.data.text.clone();
    task.delegate(CountWords { text }).await
}

/// Completes the review with the tool's reply; a failed count fails the task with its error.
#[on_fan_in(CountWords)]
async fn counted(task: TaskContext<Document, Notes>, words: usize) -> soorma::Result<Review> {
    Ok(Review {
        title: task.state().title.clone(),
        words,
        short: words <= 50,
    })
}

/// The worker and the tool it delegates to, each with its handlers; the group checks the
/// wiring (every request has a consumer, every reply a handler) before anything starts.
fn agents() -> Agents {
    Agents::new()
        .worker(WORKER, handlers![review, counted])
        .tool(TOOL, handlers![count_words])
}

/// Logs to stderr, filtered by `RUST_LOG` (default: warnings).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    init_tracing();
    let platform = Platform::from_env().await?;
    let running = agents().start(&platform).await?;
    if platform.kind() != "embedded" {
        println!(
            "`{WORKER}` serves `{}` on the {} platform; Ctrl-C to stop",
            Document::EVENT,
            platform.kind()
        );
        // Ctrl-C or SIGTERM: the agents stop taking work and finish their handlers.
        return running.shutdown_on_signal().await;
    }
    // Nothing outside this process can reach the embedded platform: show one task.
    let document = Document {
        title: "Hello".into(),
        text: "agents talk to each other through events".into(),
    };
    let review = platform.client("{{name}}-demo").call(document).await?;
    println!("{WORKER} reviewed a document: {review:?}");
    println!("set SOORMA_NATS_URL (see `soorma dev`) to serve other processes");
    running.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_review_round_trip() -> soorma::Result<()> {
        let platform = Platform::embedded();
        let running = agents().start(&platform).await?;
        let client = platform.client("test");

        let review = client
            .call(Document {
                title: "Notes".into(),
                text: "the worker delegates and the tool counts".into(),
            })
            .await?;
        assert_eq!(
            review,
            Review {
                title: "Notes".into(),
                words: 7,
                short: true
            }
        );

        // The tool's error fails the task, and the caller gets the reason.
        let error = client
            .call(Document {
                title: "Empty".into(),
                text: String::new(),
            })
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("the text has no words"), "{error}");

        running.shutdown().await
    }
}
