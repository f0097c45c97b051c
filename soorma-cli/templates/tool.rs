//! `{{name}}`: a soorma tool that analyses a text.
//!
//! `cargo run` starts the tool on the embedded (in-process) platform, sends it one request and
//! prints the reply. With `SOORMA_NATS_URL` set (see `soorma dev`) it serves requests from other
//! processes until Ctrl-C. `cargo test` checks a round trip. `RUST_LOG=info cargo run` shows
//! what the SDK does (dead letters and rejected payloads are logged as warnings).

use soorma::prelude::*;

/// The agent's name in the registry.
const AGENT: &str = "{{name}}";

/// A text to analyse: the tool's request. Its event and its reply type are named once, here.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "{{name}}.requested", reply = TextStats)]
struct AnalyzeText {
    /// The text.
    text: String,
}

/// What the tool found.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct TextStats {
    /// How many whitespace-separated words the text has.
    words: usize,
    /// The first of its longest words.
    longest_word: String,
}

/// Counts the words of a text and finds its longest word.
#[on_invoke]
async fn analyze(req: Invocation<AnalyzeText>) -> Result<TextStats, ToolError> {
    let words: Vec<&str> = req.data.text.split_whitespace().collect();
    let mut longest_word = "";
    for word in &words {
        if word.chars().count() > longest_word.chars().count() {
            longest_word = word;
        }
    }
    if words.is_empty() {
        // Becomes an error reply to the caller; the tool keeps serving.
        return Err(ToolError::new("the text has no words"));
    }
    Ok(TextStats {
        words: words.len(),
        longest_word: longest_word.to_owned(),
    })
}

/// The tool: every `#[on_invoke]` handler of this crate, under the name [`AGENT`]. (With
/// several agents in one binary, group them: `Agents::new().tool(AGENT, handlers![analyze])`.)
fn tool() -> AgentBuilder {
    Tool::new(AGENT)
        .version(env!("CARGO_PKG_VERSION"))
        .description("Counts the words of a text and finds its longest word.")
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
    let running = tool().start(&platform).await?;
    if platform.kind() == "embedded" {
        // Nothing outside this process can reach the embedded platform: show one round trip.
        let text = "agents talk to each other through events";
        let stats = platform
            .client("{{name}}-demo")
            .call(AnalyzeText { text: text.into() })
            .await?;
        println!("{AGENT} analysed {text:?}: {stats:?}");
        println!("set SOORMA_NATS_URL (see `soorma dev`) to serve other processes");
        return running.shutdown().await;
    }
    println!(
        "`{AGENT}` serves `{}` on the {} platform; Ctrl-C to stop",
        AnalyzeText::EVENT,
        platform.kind()
    );
    running.shutdown_on_signal().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn replies_with_the_stats_or_an_error() -> soorma::Result<()> {
        let platform = Platform::embedded();
        let running = tool().start(&platform).await?;
        let client = platform.client("test");

        let stats = client
            .call(AnalyzeText {
                text: "agents talk through events".into(),
            })
            .await?;
        assert_eq!(
            stats,
            TextStats {
                words: 4,
                longest_word: "through".into()
            }
        );

        let error = client
            .call(AnalyzeText { text: "   ".into() })
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("the text has no words"), "{error}");

        // The registry describes the capability with the request and reply schemas.
        let found = platform
            .discovery()
            .by_consumed_event(AnalyzeText::EVENT)
            .await?;
        assert_eq!(found[0].name, AGENT);
        assert!(
            found[0].capabilities[0]
                .consumed_event
                .payload_schema
                .is_some()
        );
        running.shutdown().await
    }
}
