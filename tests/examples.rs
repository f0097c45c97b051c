//! The examples, run as their users run them: each binary (`target/<profile>/examples/<name>`,
//! built by `cargo test --workspace`) on the embedded platform, within a time limit, must exit
//! with success and print what it prints when it works.
//!
//! To add an example: a row in [`EXAMPLES`]. `mcp_bridge` needs the reference MCP server (see
//! `soorma_tests::mcp_peers`); without it, its trial is reported as ignored, with the reason.
//! Other examples are run elsewhere as well: `research_fanout` and `a2a_gateway` as processes
//! on NATS (`multiprocess.rs`), `mcp_server` by an MCP client (`mcp_server.rs`).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use libtest_mimic::{Completion, Failed, Trial};
use soorma_tests::{example_binary, mcp_peers};

/// How long an example may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Variables that would make an example leave the embedded platform or the scripted model.
const ENV_REMOVED: &[&str] = &[
    "SOORMA_NATS_URL",
    "SOORMA_NATS_TOKEN",
    "SOORMA_NATS_CREDS",
    "SOORMA_NATS_USER",
    "SOORMA_NATS_PASSWORD",
    "SOORMA_LLM_MODEL",
    "SOORMA_LLM_BASE_URL",
    "SOORMA_LLM_API_KEY",
];

/// An example and what it prints when it works.
struct Example {
    name: &'static str,
    needs: Needs,
    /// Each of these is in its standard output (in any order: agents run concurrently).
    prints: &'static [&'static str],
}

/// What an example needs besides its binary.
enum Needs {
    Nothing,
    /// The reference MCP server, and `--config` with `examples/mcp.json` pointing at it.
    McpServer,
}

const EXAMPLES: &[Example] = &[
    Example {
        name: "hello_tool",
        needs: Needs::Nothing,
        prints: &[
            "registered `calculator` v1.0.0 with capability `calculate.requested`: Evaluates an arithmetic expression.",
            "1 + 2 * 3 = 7",
            "(10 - 4) / 4 = 1.5",
            "2 / (1 - 1) -> error: `calculate.completed` failed: division by zero",
        ],
    },
    Example {
        name: "business_facts",
        needs: Needs::Nothing,
        prints: &[
            r#"[audit] order.placed from shop: {"items":2,"order_id":"A-100"}"#,
            r#"[audit] order.shipped from shipping: {"order_id":"A-100","parcels":1}"#,
            r#"[audit] order.placed from shop: {"items":7,"order_id":"A-101"}"#,
            r#"[audit] order.shipped from shipping: {"order_id":"A-101","parcels":3}"#,
        ],
    },
    Example {
        name: "research_fanout",
        needs: Needs::Nothing,
        prints: &[
            r#"rust     sentiment +1.00  entities ["Mozilla", "Amazon"]  summary "Rust is fast and reliable.""#,
            r#"outages  sentiment -1.00  entities ["Frankfurt"]  summary "The outage was bad.""#,
            r#"agents   sentiment +0.00  entities ["Tools", "Workers"]  summary "Agents coordinate through events.""#,
            "3 research tasks fanned out and in (9 sub-tasks) on the embedded platform in ",
        ],
    },
    Example {
        name: "rag_agent",
        needs: Needs::Nothing,
        prints: &[
            "handbook: 5 documents in semantic memory",
            "Q: How many vacation days do I get?",
            "   cites: [1] Annual leave (leave)",
            "Q: Can I do my job from home on some days?",
            "   cites: [1] Working from home (remote)",
            "Q: Someone took my computer, what do I do?",
            "   cites: [1] Laptop security (security)",
            "Q: What is the recipe for apple pie?",
            "A: The handbook does not say.",
        ],
    },
    Example {
        name: "research_workflow",
        needs: Needs::Nothing,
        prints: &[
            "web              retrying  attempt 2 calls web.cache after: search quota exhausted (HTTP 429)",
            "partner          failed    after 2 attempts: partner API returned 503",
            "done before the slow archive search: internal_digest, web_digest",
            "report: How does our pricing compare with competitors?",
            "  - internal docs, 2 hits: Pricing: the Pro plan costs $49 per seat per month.",
            "  - cached web index, 2 hits: Acme lists its Team plan at $59 per seat per month.",
            "  - archive, 1 hit: Pricing review 2023: we sat 10% under our competitors.",
            "  gap: the partner feed did not answer",
            "  partner          failed     attempts 2  partner API returned 503\n",
            "  synthesize       completed  attempts 1\n",
            "  web              completed  attempts 2\n",
            "9 steps in ",
        ],
    },
    Example {
        name: "planner_state_machine",
        needs: Needs::Nothing,
        prints: &[
            r#"event sourcing   -> {"reviewed":0,"searches":2,"summary":"event sourcing: 3 sources agree"}"#,
            r#"reviewer asked: "The analysis is unsure. Publish it anyway?""#,
            r#"is rust fast?    -> {"reviewed":1,"searches":1,"summary":"is rust fast?: 3 sources agree"}"#,
        ],
    },
    Example {
        name: "human_approval",
        needs: Needs::Nothing,
        prints: &[
            r#"editor was asked: "Publish the post about event sourcing?""#,
            r#"published: {"approved_by":"the editor","post":"Why event sourcing matters, in 3 paragraphs."}"#,
            "editor is away; nobody answers",
            "not published: `post.done` failed: nobody approved the post about late in time",
        ],
    },
    Example {
        name: "llm_planner",
        needs: Needs::Nothing,
        prints: &[
            "model: scripted",
            r#""plan_type": "report""#,
            r#"report -> {"people":["Ferris","Ada"],"score":66.66666666666666,"summary":"The new release felt fast and reliable to Ferris."}"#,
            r#"assistant: {"action":"publish","event_type":"calculate.requested","data":{"expression":"3 * 19.5 + 4"},"response_event":"calculate.completed"}"#,
            r#"answer -> {"currency":"EUR","total":62.5}"#,
        ],
    },
    Example {
        name: "mcp_bridge",
        needs: Needs::McpServer,
        prints: &[
            "mcp.everything.get-sum ",
            r#"calling everything:get-sum {"a":2,"b":3} through the `mcp-caller` worker"#,
            "text: The sum of 2 and 3 is 5.",
            "everything:get-sum: 1 call(s), 0 failed",
        ],
    },
];

fn main() {
    let args = soorma_tests::trial_arguments();
    let trials = EXAMPLES
        .iter()
        .map(|example| Trial::ignorable_test(example.name, move || run(example)))
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

fn run(example: &Example) -> Result<Completion, Failed> {
    let (args, config) = match example.needs {
        Needs::Nothing => (Vec::new(), None),
        Needs::McpServer => {
            let Some(server) = mcp_peers::locate_everything() else {
                return Ok(Completion::ignored_with(
                    "no reference MCP server: set SOORMA_MCP_EVERYTHING or run scripts/test.sh",
                ));
            };
            let config = mcp_config(&server)?;
            let args = vec!["--config".to_owned(), config.display().to_string()];
            (args, Some(config))
        }
    };
    let outcome = run_binary(example, &args);
    if let Some(config) = config {
        let _ = std::fs::remove_file(config);
    }
    outcome.map(|()| Completion::Completed)
}

/// `examples/mcp.json` with its server command pointing at this reference MCP server, in a
/// temporary file.
fn mcp_config(server: &std::path::Path) -> Result<PathBuf, Failed> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mcp.json");
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let servers = config["servers"]
        .as_array_mut()
        .ok_or_else(|| format!("{path}: no `servers`"))?;
    for server_config in servers {
        server_config["stdio"]["command"] = server.display().to_string().into();
    }
    let out = std::env::temp_dir().join(format!("soorma-examples-mcp-{}.json", std::process::id()));
    std::fs::write(&out, config.to_string()).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

/// Runs the example's binary to completion (killed after [`TIMEOUT`]) and checks its exit
/// status and output.
fn run_binary(example: &Example, args: &[String]) -> Result<(), Failed> {
    let mut command = Command::new(example_binary(example.name));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in ENV_REMOVED {
        command.env_remove(var);
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", example.name))?;
    let stdout = read_in_background(child.stdout.take());
    let stderr = read_in_background(child.stderr.take());
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => return Err(format!("waiting for `{}`: {e}", example.name).into()),
        }
    };
    // Grandchildren (an MCP server) may hold the pipes open a little longer.
    let output = |rx: mpsc::Receiver<String>| {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| "(not closed)".into())
    };
    let (stdout, stderr) = (output(stdout), output(stderr));
    let show = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    match status {
        None => return Err(format!("did not finish within {TIMEOUT:?}\n{show}").into()),
        Some(status) if !status.success() => return Err(format!("{status}\n{show}").into()),
        Some(_) => {}
    }
    let missing: Vec<&str> = example
        .prints
        .iter()
        .copied()
        .filter(|line| !stdout.contains(line))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("missing from the output: {missing:#?}\n{show}").into())
    }
}

/// Reads a pipe to its end on a thread of its own.
fn read_in_background(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        let _ = tx.send(text);
    });
    rx
}
