//! `soorma workflow check` and `soorma workflow graph`, run as the real binary: the seed's
//! example workflow, a broken one (every problem listed, exit status 1), JSON files, and
//! `--registry` against a real `nats-server -js` with an agent registered.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use soorma::nats::{NatsConfig, connect};
use soorma::prelude::*;
use soorma_tests::nats_server::NatsServer;

/// A fresh temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "soorma-cli-workflow-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn soorma(url: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_soorma"));
    command.args(args).stdin(Stdio::null());
    for var in [
        "SOORMA_NATS_URL",
        "SOORMA_NATS_TOKEN",
        "SOORMA_NATS_USER",
        "SOORMA_NATS_PASSWORD",
        "SOORMA_NATS_CREDS",
    ] {
        command.env_remove(var);
    }
    if let Some(url) = url {
        command.env("SOORMA_NATS_URL", url);
    }
    command.output().expect("run soorma")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The seed specification's example workflow (`docs/workflows/compare_pricing.yaml`).
fn seed_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("docs/workflows/compare_pricing.yaml")
}

const BROKEN: &str = r#"
goal: ""
steps:
  - id: fetch
    operator: web.fetch
    fallback: web.fetch
    timeout: soon
  - id: summarize
    operator: summarize
    input_mapping:
      text: "{{ fetch.body"
    depends_on: [fetch, ghost]
  - id: a
    operator: x
    depends_on: [b]
  - id: b
    operator: x
    depends_on: [a]
    input_mapping: {q: "{{fetch.body}}"}
"#;

#[test]
fn check_accepts_the_seed_example() {
    let path = seed_example();
    let out = soorma(None, &["workflow", "check", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{}: valid (4 steps)\n", path.display())
    );
}

#[test]
fn check_lists_every_problem_of_a_broken_workflow_and_fails() {
    let dir = TempDir::new();
    let path = dir.write("broken.yaml", BROKEN);
    let out = soorma(None, &["workflow", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let expected = [
        "`goal` is empty",
        "step `summarize` depends on unknown step `ghost`",
        "dependency cycle: a -> b -> a (each step depends on the next)",
        "step `fetch`: the fallback `web.fetch` is the step's own operator",
        "step `fetch`: invalid timeout `soon`: ",
        "step `summarize`: the input template at `/text` is invalid: ",
        "step `b`: a template reads `steps.fetch.body`, but step `b` does not depend on `fetch`",
    ];
    assert_eq!(lines.len(), expected.len(), "{stdout}");
    for (line, start) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(start),
            "{line:?} does not start with {start:?}\n{stdout}"
        );
    }
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: `{}` is not a valid workflow: 7 problems (listed above)\n",
            path.display()
        )
    );
}

#[test]
fn check_reads_json_and_reports_where_a_file_is_not_a_workflow() {
    let dir = TempDir::new();
    let ok = dir.write(
        "ok.json",
        r#"{"goal": "g", "steps": [{"id": "a", "operator": "search", "input_mapping": {"q": "{{topic}}"}}]}"#,
    );
    let out = soorma(None, &["workflow", "check", ok.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bad = dir.write("bad.json", "{\"goal\": \"g\",\n \"steps\": [{\"id\": 7}]}");
    let out = soorma(None, &["workflow", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout)
            .starts_with("not a workflow definition: at `steps[0].id` (line 2, column "),
        "{}",
        text(&out.stdout)
    );
    let missing = dir.0.join("missing.yaml");
    let out = soorma(None, &["workflow", "check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: cannot read workflow `"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn graph_prints_the_seed_example_as_mermaid() {
    let path = seed_example();
    let out = soorma(None, &["workflow", "graph", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "flowchart TD\n    \
         s0[\"step_1: Rewrite Query<br/>query_rewriter\"]\n    \
         s1[\"step_2: Search Internal Docs<br/>rag_retriever\"]\n    \
         s0 --> s1\n    \
         s2[\"step_3: Search Web<br/>web_searcher\"]\n    \
         s0 --> s2\n    \
         s3[\"step_4: Synthesize<br/>synthesizer\"]\n    \
         s1 --> s3\n    \
         s2 --> s3\n"
    );
}

#[test]
fn graph_of_a_broken_workflow_prints_its_problems_and_fails() {
    let dir = TempDir::new();
    let path = dir.write("broken.yml", BROKEN);
    let out = soorma(None, &["workflow", "graph", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("`goal` is empty\n"), "{stderr}");
    assert!(stderr.ends_with("7 problems (listed above)\n"), "{stderr}");
}

#[test]
fn check_registry_needs_a_shared_platform() {
    let path = seed_example();
    let out = soorma(
        None,
        &["workflow", "check", path.to_str().unwrap(), "--registry"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("`soorma workflow check --registry` needs a shared platform"),
        "{}",
        text(&out.stderr)
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: f64,
    b: f64,
}

async fn add(req: Invocation<Add>) -> Result<f64, ToolError> {
    Ok(req.data.a + req.data.b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_registry_checks_capabilities_and_their_schemas() {
    let server = NatsServer::start();
    let url = server.url();
    let platform = connect(NatsConfig::new(url.clone())).await.unwrap();
    let calculator = Tool::new("calculator")
        .use_registered_handlers(false)
        .handler(Handler::on_invoke("add.requested", add).with_name("add"))
        .start(&platform)
        .await
        .unwrap();
    let dir = TempDir::new();
    let good = dir.write(
        "good.yaml",
        "goal: sums\nsteps:\n  - {id: one, operator: add, input_mapping: {a: 1, b: '{{x}}'}}\n  \
         - {id: two, operator: add.requested, depends_on: [one], input_mapping: {a: '{{one}}', b: 2}}\n",
    );
    let bad = dir.write(
        "bad.yaml",
        "goal: sums\nsteps:\n  - {id: one, operator: add, input_mapping: {a: 1, b: 'two'}}\n  \
         - {id: two, operator: multiply, depends_on: [one], input_mapping: {a: '{{one}}'}}\n",
    );
    let (good_out, bad_out) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            (
                soorma(
                    Some(&url),
                    &["workflow", "check", good.to_str().unwrap(), "--registry"],
                ),
                soorma(
                    Some(&url),
                    &["workflow", "check", bad.to_str().unwrap(), "--registry"],
                ),
            )
        }
    })
    .await
    .unwrap();
    assert!(good_out.status.success(), "{}", text(&good_out.stderr));
    assert!(
        text(&good_out.stdout).ends_with(&format!(
            ": valid (2 steps, checked against 1 registered agent on {url})\n"
        )),
        "{}",
        text(&good_out.stdout)
    );
    assert_eq!(bad_out.status.code(), Some(1));
    assert_eq!(
        text(&bad_out.stdout),
        "step `one`: its input does not match the payload schema of `add`: at `/b`: \"two\" is not of type \"number\"\n\
         step `two`: no registered capability is called `multiply` or consumes it (operator)\n"
    );
    calculator.shutdown().await.unwrap();
}
