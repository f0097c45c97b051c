//! A research workflow, defined in YAML, run by a worker: each step starts as soon as its own
//! dependencies are done, so the fast sources' follow-up steps finish while a slow source is
//! still searching.
//!
//! ```text
//! cargo run -p soorma-examples --example research_workflow
//! ```
//!
//! `researcher` (a Worker) runs [`WORKFLOW`] for each [`Research`] request: rewrite the
//! question, search four sources in parallel and digest what each found, then synthesize a
//! report. The live web search's quota is exhausted, so its `fallback` (a cached index)
//! answers; the archive takes about a second; the partner feed is down: retried once, it fails,
//! and `on_failure: continue` lets the synthesis go on without it (`| default: null`). The
//! client prints the `workflow.step.*` progress events as they arrive on `system-events`, then
//! the report and each step's outcome. With `SOORMA_NATS_URL` set, it all runs on NATS.
use std::collections::HashSet;
use std::time::{Duration, Instant};

use soorma::common::{StepStatus, WorkflowOutput, WorkflowStepProgress};
use soorma::prelude::*;
use soorma::workflow::Workflow;
use soorma_examples::text;

/// The workflow: operators are the events the tools below consume.
const WORKFLOW: &str = r#"
goal: Answer a research question from every source we have
input_schema: {type: object, properties: {question: {type: string}}, required: [question]}
steps:
  - {id: rewrite, operator: query.rewrite, input_mapping: {question: "{{question}}"}}
  - {id: internal, operator: docs.search, depends_on: [rewrite],
     input_mapping: {query: "{{rewrite.internal}}"}}
  - {id: web, operator: web.search, fallback: web.cache, depends_on: [rewrite],
     input_mapping: {query: "{{rewrite.external}}"}}
  - {id: archive, operator: archive.search, timeout: 10s, depends_on: [rewrite],
     input_mapping: {query: "{{rewrite.internal}}"}}
  - {id: partner, operator: partner.search, retries: 1, on_failure: continue,
     depends_on: [rewrite], input_mapping: {query: "{{rewrite.external}}"}}
  - {id: internal_digest, operator: hits.digest, depends_on: [internal],
     input_mapping: {found: "{{internal}}"}}
  - {id: web_digest, operator: hits.digest, depends_on: [web], input_mapping: {found: "{{web}}"}}
  - {id: archive_digest, operator: hits.digest, depends_on: [archive],
     input_mapping: {found: "{{archive}}"}}
  - id: synthesize
    operator: report.synthesize
    depends_on: [internal_digest, web_digest, archive_digest, partner]
    input_mapping:
      question: "{{question}}"
      digests: ["{{internal_digest}}", "{{web_digest}}", "{{archive_digest}}"]
      partner: "{{ partner | default: null }}"
"#;

/// The workflow's input (and the rewriter's); the task replies with every step's outcome.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "research.requested", reply = WorkflowOutput)]
struct Research {
    question: String,
}

/// The question as keywords: for our documents and for the web.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Rewritten {
    internal: String,
    external: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Query {
    query: String,
}

/// What a source found.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Found {
    source: String,
    hits: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct DigestRequest {
    found: Found,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Synthesis {
    question: String,
    /// One line per source.
    digests: Vec<String>,
    /// `null` when the partner feed failed.
    partner: Option<Found>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Report {
    question: String,
    findings: Vec<String>,
    gaps: Vec<String>,
}

const DOCS: &[&str] = &[
    "Pricing: the Pro plan costs $49 per seat per month.",
    "Onboarding: every new team gets a kickoff call.",
    "Competitors: Acme and Globex target the same mid-size teams.",
];
const WEB: &[&str] = &[
    "Acme lists its Team plan at $59 per seat per month.",
    "Globex cut its pricing to $39 per seat this spring.",
];
const ARCHIVE: &[&str] = &["Pricing review 2023: we sat 10% under our competitors."];

/// The lines of `corpus` that mention a word of `query`.
fn search(source: &str, corpus: &[&str], query: &str) -> Found {
    let hits = corpus.iter().filter(|line| {
        let line = line.to_lowercase();
        query.split_whitespace().any(|w| line.contains(w))
    });
    let hits = hits.map(|line| (*line).to_owned()).collect();
    let source = source.into();
    Found { source, hits }
}

/// Keeps the question's keywords.
#[on_invoke("query.rewrite")]
async fn rewrite(req: Invocation<Research>) -> Result<Rewritten, ToolError> {
    const STOP: &[&str] = &["how", "does", "our", "compare", "with", "what", "the"];
    let keywords: Vec<String> = req
        .data
        .question
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.len() > 3 && !STOP.contains(&w.as_str()))
        .collect();
    Ok(Rewritten {
        internal: keywords.join(" "),
        external: format!("{} per seat", keywords.join(" ")),
    })
}

#[on_invoke("docs.search")]
async fn docs(req: Invocation<Query>) -> Result<Found, ToolError> {
    Ok(search("internal docs", DOCS, &req.data.query))
}

#[on_invoke("web.search")]
async fn web(_req: Invocation<Query>) -> Result<Found, ToolError> {
    Err(ToolError::new("search quota exhausted (HTTP 429)"))
}

#[on_invoke("web.cache")]
async fn web_cache(req: Invocation<Query>) -> Result<Found, ToolError> {
    Ok(search("cached web index", WEB, &req.data.query))
}

/// The slow source.
#[on_invoke("archive.search")]
async fn archive(req: Invocation<Query>) -> Result<Found, ToolError> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(search("archive", ARCHIVE, &req.data.query))
}

#[on_invoke("partner.search")]
async fn partner(_req: Invocation<Query>) -> Result<Found, ToolError> {
    Err(ToolError::new("partner API returned 503"))
}

#[on_invoke("hits.digest")]
async fn digest(req: Invocation<DigestRequest>) -> Result<String, ToolError> {
    let Found { source, hits } = &req.data.found;
    let top = hits
        .first()
        .map_or("nothing".into(), |h| text::summary(h, 12));
    let n = hits.len();
    Ok(format!(
        "{source}, {n} hit{}: {top}",
        if n == 1 { "" } else { "s" }
    ))
}

#[on_invoke("report.synthesize")]
async fn synthesize(req: Invocation<Synthesis>) -> Result<Report, ToolError> {
    let mut gaps = Vec::new();
    if req.data.partner.is_none() {
        gaps.push("the partner feed did not answer".to_owned());
    }
    let (question, findings) = (req.data.question, req.data.digests);
    Ok(Report {
        question,
        findings,
        gaps,
    })
}

fn agents(workflow: Workflow) -> Agents {
    Agents::new()
        .tool("query-rewriter", handlers![rewrite])
        .tool(
            "searchers",
            handlers![docs, web, web_cache, archive, partner],
        )
        .tool("analyst", handlers![digest, synthesize])
        .worker(
            "researcher",
            vec![Handler::workflow(Research::EVENT, workflow)],
        )
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let workflow = Workflow::from_yaml(WORKFLOW)?;
    let steps = workflow.steps().len();
    let platform = Platform::from_env().await?;
    let running = agents(workflow).start(&platform).await?;
    let outcome = research(&platform, steps).await;
    running.shutdown().await?;
    outcome
}

async fn research(platform: &Platform, steps: usize) -> soorma::Result<()> {
    let question = "How does our pricing compare with competitors?".to_owned();
    let call = platform
        .client("research-client")
        .call(Research { question });
    // Progress is on `system-events`; observing is live before the request goes out.
    let events = platform.bus().observe(Some(Topic::SystemEvents)).await?;
    let started = Instant::now();
    let progress = tokio::spawn(print_progress(events, call.envelope()?.id.clone(), steps));
    let out = call.timeout(Duration::from_secs(30)).await?;
    let ended = tokio::time::timeout(Duration::from_secs(5), progress)
        .await
        .map_err(|_| Error::Handler("not every step's progress arrived".into()))?
        .map_err(|e| Error::Handler(e.to_string()))?;

    // Readiness, not levels: the fast sources' follow-ups did not wait for the slow one.
    let slow = ended.iter().position(|s| s == "archive").unwrap_or(0);
    let mut before: Vec<&str> = ended[..slow].iter().map(String::as_str).collect();
    before.retain(|s| s.ends_with("_digest"));
    before.sort_unstable();
    println!("done before the slow archive search: {}", before.join(", "));

    let synthesis = out.output("synthesize").cloned().unwrap_or_default();
    let report: Report = serde_json::from_value(synthesis)
        .map_err(|e| Error::Handler(format!("the synthesis: {e}")))?;
    println!("report: {}", report.question);
    for line in &report.findings {
        println!("  - {line}");
    }
    for gap in &report.gaps {
        println!("  gap: {gap}");
    }
    let secs = started.elapsed().as_secs_f64();
    let (n, kind) = (out.steps.len(), platform.kind());
    println!("{n} steps in {secs:.1}s on the {kind} platform:");
    for (id, step) in &out.steps {
        let status = format!("{:?}", step.status).to_lowercase();
        let error = step.error.as_deref().unwrap_or_default();
        let line = format!(
            "  {id:<16} {status:<10} attempts {}  {error}",
            step.attempts
        );
        println!("{}", line.trim_end());
    }
    Ok(())
}

/// Prints the progress of task `task_id` as it arrives, until each of its `steps` has ended
/// (and each that ran has been seen starting); returns the steps in the order they ended.
async fn print_progress(
    mut events: Box<dyn soorma::bus::Subscription>,
    task_id: String,
    steps: usize,
) -> Vec<String> {
    let started = Instant::now();
    let (mut ran, mut ended) = (HashSet::new(), Vec::new());
    let done = |ran: &HashSet<String>, ended: &[(String, bool)]| {
        ended.len() == steps && ended.iter().all(|(s, skipped)| *skipped || ran.contains(s))
    };
    while !done(&ran, &ended) {
        let Some(delivery) = events.next().await else {
            break;
        };
        let env = &delivery.envelope;
        let (Some(what), Ok(p)) = (
            env.event_type.strip_prefix("workflow.step."),
            serde_json::from_value::<WorkflowStepProgress>(env.data.clone()),
        ) else {
            continue;
        };
        if p.task_id != task_id {
            continue;
        }
        let calls = p.calls.unwrap_or_default();
        let error = p.error.unwrap_or_default();
        let detail = match what {
            "started" => format!("calls {calls}"),
            "retrying" => format!("attempt {} calls {calls} after: {error}", p.attempt),
            "failed" => format!("after {} attempts: {error}", p.attempt),
            _ => error,
        };
        let t = started.elapsed().as_secs_f64();
        let line = format!("[{t:5.2}s] {:<16} {what:<9} {detail}", p.step);
        println!("{}", line.trim_end());
        match p.status {
            StepStatus::Running => drop(ran.insert(p.step)),
            status if status.is_terminal() => ended.push((p.step, status == StepStatus::Skipped)),
            _ => {}
        }
    }
    ended.into_iter().map(|(s, _)| s).collect()
}
