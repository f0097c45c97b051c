//! A worker fans a research task out to three analyzer tools and fans their results in.
//!
//! ```text
//! cargo run -p soorma-examples --example research_fanout
//! ```
//!
//! `researcher` (a Worker) receives a `Research` request, fans it out to the `sentiment`,
//! `entities` and `summarizer` tools, and its fan-in handler completes the task with a `Report`
//! once all three replies are in (recorded revision-checked; it runs exactly once). Each
//! request type names its event and its reply type once; nothing is a `serde_json::Value`.
//!
//! With `SOORMA_NATS_URL` set, each agent can run as its own process (`--agent researcher`,
//! ...) and `--client` submits the tasks.
use std::time::Instant;

use soorma::prelude::*;
use soorma_examples::text;

// ---- requests: each names its event and its reply type once ---------------------------------

/// Scores the sentiment of a text in -1..=1.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "sentiment.analyze", reply = Sentiment)]
struct AnalyzeSentiment {
    text: String,
}

/// Extracts the named entities of a text.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "entities.extract", reply = Entities)]
struct ExtractEntities {
    text: String,
}

/// Summarises a text in one sentence.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "summary.generate", reply = Summary)]
struct Summarize {
    text: String,
}

/// Researches a text: what the three analyzers make of it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "research.requested", reply = Report)]
struct Research {
    /// What the text is about.
    topic: String,
    /// The text to analyse.
    text: String,
}

/// A sentiment score in -1..=1.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Sentiment(f64);

/// Named entities.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Entities(Vec<String>);

/// A one-sentence summary.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Summary(String);

/// The research report.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Report {
    topic: String,
    sentiment: f64,
    entities: Vec<String>,
    summary: String,
}

// ---- tools: the event comes from the payload type -------------------------------------------

/// Scores the sentiment of a text.
#[on_invoke]
async fn sentiment(req: Invocation<AnalyzeSentiment>) -> Result<Sentiment, ToolError> {
    Ok(Sentiment(text::sentiment(&req.data.text)))
}

/// Extracts named entities from a text.
#[on_invoke]
async fn entities(req: Invocation<ExtractEntities>) -> Result<Entities, ToolError> {
    Ok(Entities(text::entities(&req.data.text)))
}

/// Summarises a text in one sentence.
#[on_invoke]
async fn summarize(req: Invocation<Summarize>) -> Result<Summary, ToolError> {
    Ok(Summary(text::summary(&req.data.text, 12)))
}

// ---- the worker: typed state, typed fan-out, typed fan-in -----------------------------------

/// What the researcher keeps in its task between the fan-out and the fan-in.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Notes {
    topic: String,
}

/// Researches a topic by fanning out to the analyzers.
#[on_task]
async fn research(mut task: TaskContext<Research, Notes>) -> soorma::Result<Delegated> {
    task.state_mut().topic = task.data.topic.clone();
    let text = task.data.text.clone();
    task.fan_out((
        AnalyzeSentiment { text: text.clone() },
        ExtractEntities { text: text.clone() },
        Summarize { text },
    ))
    .await
}

/// Runs once, when all three replies are in; its value completes the task.
#[on_fan_in(AnalyzeSentiment, ExtractEntities, Summarize)]
async fn collect(
    task: TaskContext<Research, Notes>,
    (sentiment, entities, summary): (Sentiment, Entities, Summary),
) -> soorma::Result<Report> {
    Ok(Report {
        topic: task.state().topic.clone(),
        sentiment: sentiment.0,
        entities: entities.0,
        summary: summary.0,
    })
}

/// The agents of this binary, each with its handlers; the group checks the wiring at start.
fn agents() -> Agents {
    Agents::new()
        .tool("sentiment", handlers![sentiment])
        .tool("entities", handlers![entities])
        .tool("summarizer", handlers![summarize])
        .worker("researcher", handlers![research, collect])
}

const CORPUS: &[(&str, &str)] = &[
    (
        "rust",
        "Rust is fast and reliable. Teams at Mozilla and Amazon love it for safe systems code.",
    ),
    (
        "outages",
        "The outage was bad. A slow database and a crash in Frankfurt made users sad.",
    ),
    (
        "agents",
        "Agents coordinate through events. Soorma moves them between Tools and Workers.",
    ),
];

const USAGE: &str = "\
usage: research_fanout [--agent NAME | --client] [--tasks N]

  (no flag)      run the four agents and a client in one process
  --agent NAME   run one agent (sentiment, entities, summarizer, researcher) until Ctrl-C;
                 with SOORMA_NATS_URL set, each agent can run as its own process
  --client       submit research tasks to running agents and wait for every report
  --tasks N      how many research tasks to submit (default 3)";

enum Mode {
    All,
    Agent(String),
    Client,
}

fn parse_args() -> Result<(Mode, usize), String> {
    let mut mode = Mode::All;
    let mut tasks = CORPUS.len();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--agent" => mode = Mode::Agent(args.next().ok_or("--agent needs a name")?),
            "--client" => mode = Mode::Client,
            "--tasks" => {
                let n = args.next().ok_or("--tasks needs a number")?;
                tasks = n
                    .parse()
                    .map_err(|_| format!("--tasks: `{n}` is not a number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok((mode, tasks))
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let (mode, tasks) = match parse_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("error: {message}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let platform = Platform::from_env().await?;
    match mode {
        // An unknown name is an error naming the agents there are.
        Mode::Agent(name) => {
            let running = agents().start_only(&platform, &[&name]).await?;
            println!(
                "`{name}` ready on the {} platform; Ctrl-C to stop",
                platform.kind()
            );
            running.shutdown_on_signal().await
        }
        Mode::Client => submit(&platform, tasks).await,
        Mode::All => {
            let running = agents().start(&platform).await?;
            let outcome = submit(&platform, tasks).await;
            running.shutdown().await?;
            outcome
        }
    }
}

/// Submits `tasks` research requests concurrently and prints every report.
async fn submit(platform: &Platform, tasks: usize) -> soorma::Result<()> {
    let client = platform.client("research-client");
    let started = Instant::now();
    let calls = (0..tasks).map(|i| {
        let (topic, text) = CORPUS[i % CORPUS.len()];
        let request = Research {
            topic: topic.into(),
            text: text.into(),
        };
        let client = client.clone();
        async move { client.call(request).await }
    });
    let reports = futures_join_all(calls).await;
    let mut done = 0;
    for (i, report) in reports.into_iter().enumerate() {
        let r = report?;
        if i < CORPUS.len() {
            println!(
                "{:<8} sentiment {:+.2}  entities {:?}  summary {:?}",
                r.topic, r.sentiment, r.entities, r.summary
            );
        }
        done += 1;
    }
    println!(
        "{done} research tasks fanned out and in ({} sub-tasks) on the {} platform in {:?}",
        done * 3,
        platform.kind(),
        started.elapsed()
    );
    Ok(())
}
/// Awaits every future concurrently, keeping their order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("request task panicked"));
    }
    out
}
