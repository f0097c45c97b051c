//! A worker fans a research task out to three analyzer tools and fans their results in.
//!
//! ```text
//! cargo run -p soorma-examples --example research_fanout
//! ```
//!
//! `researcher` (a Worker) receives `research.requested`, delegates in parallel to the
//! `sentiment`, `entities` and `summarizer` tools, records each result in the task
//! (revision-checked), and completes the task once all three are in.
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use soorma::prelude::*;
use soorma_examples::text;

/// A research request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Research {
    /// What the text is about.
    topic: String,
    /// The text to analyse.
    text: String,
}

/// A text to analyse.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Text {
    text: String,
}

/// The research report.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Report {
    topic: String,
    sentiment: f64,
    entities: Vec<String>,
    summary: String,
}

/// Scores the sentiment of a text in -1..=1.
#[on_invoke("sentiment.analyze", agent = "sentiment")]
async fn analyze_sentiment(req: Invocation<Text>) -> Result<f64, ToolError> {
    Ok(text::sentiment(&req.data.text))
}

/// Extracts named entities from a text.
#[on_invoke("entities.extract", agent = "entities")]
async fn extract_entities(req: Invocation<Text>) -> Result<Vec<String>, ToolError> {
    Ok(text::entities(&req.data.text))
}

/// Summarises a text in one sentence.
#[on_invoke("summary.generate", agent = "summarizer")]
async fn summarize(req: Invocation<Text>) -> Result<String, ToolError> {
    Ok(text::summary(&req.data.text, 12))
}

/// Researches a topic by fanning out to the analyzers.
#[on_task("research.requested", agent = "researcher")]
async fn research(mut task: TaskContext<Research>) -> soorma::Result<()> {
    let text = Text {
        text: task.data.text.clone(),
    };
    let topic = task.data.topic.clone();
    task.set_state("topic", topic)?;
    task.delegate_parallel([
        Delegation::new("sentiment.analyze", &text, "sentiment.completed"),
        Delegation::new("entities.extract", &text, "entities.completed"),
        Delegation::new("summary.generate", &text, "summary.completed"),
    ])
    .await?;
    task.progress(0.1, "waiting for 3 analyzers").await
}

/// Records each analyzer's result; the last one completes the task.
#[on_result("sentiment.completed", agent = "researcher")]
#[on_result("entities.completed", agent = "researcher")]
#[on_result("summary.completed", agent = "researcher")]
async fn collect(result: ResultContext) -> soorma::Result<()> {
    let mut task = result.record_in_parent().await?;
    let Some(all) = task.group_results(result.group_id()).await? else {
        return Ok(()); // more results to come
    };
    let pick = |event: &str| -> Value {
        all.iter()
            .find(|s| s.response_event == event)
            .and_then(|s| s.result.clone())
            .unwrap_or(Value::Null)
    };
    let report = Report {
        topic: task.state_value("topic")?.unwrap_or_default(),
        sentiment: pick("sentiment.completed").as_f64().unwrap_or(0.0),
        entities: serde_json::from_value(pick("entities.completed")).unwrap_or_default(),
        summary: pick("summary.completed")
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    task.complete(report).await?;
    Ok(())
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

const AGENTS: [&str; 4] = ["sentiment", "entities", "summarizer", "researcher"];

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
            "--agent" => {
                let name = args.next().ok_or("--agent needs a name")?;
                if !AGENTS.contains(&name.as_str()) {
                    return Err(format!(
                        "unknown agent `{name}`; expected one of {AGENTS:?}"
                    ));
                }
                mode = Mode::Agent(name);
            }
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

fn agent(name: &str) -> soorma::AgentBuilder {
    match name {
        "researcher" => Worker::new("researcher").version("1.0.0"),
        tool => Tool::new(tool).version("1.0.0"),
    }
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
        Mode::Agent(name) => {
            let running = agent(&name).start(&platform).await?;
            println!(
                "`{name}` ready on the {} platform; Ctrl-C to stop",
                platform.kind()
            );
            running.shutdown_on_signal().await
        }
        Mode::Client => submit(&platform, tasks).await,
        Mode::All => {
            let mut running = Vec::new();
            for name in AGENTS {
                running.push(agent(name).start(&platform).await?);
            }
            let outcome = submit(&platform, tasks).await;
            for agent in running {
                agent.shutdown().await?;
            }
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
        async move {
            client
                .invoke::<Report>("research.requested", request, "research.completed")
                .await
        }
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
