//! `soorma workflow check` and `soorma workflow graph`: validate a workflow definition file
//! (every problem, one per line), and draw it as a Mermaid flowchart.

use std::fmt::Write as _;
use std::path::Path;

use soorma::registry::Requirements;
use soorma::workflow::{InvalidWorkflow, Workflow};

use crate::CliError;
use crate::output::{errln, out};
use crate::platform::connect;

/// Parses and validates a workflow definition: JSON when the file name ends in `.json` (or,
/// with another extension, when the text starts with `{`), YAML otherwise.
///
/// ```
/// use std::path::Path;
/// let wf = soorma_cli::workflow::parse(Path::new("wf.txt"), r#"{"goal": "g", "steps": [{"id": "a", "operator": "op"}]}"#)?;
/// assert_eq!(wf.steps().len(), 1);
/// let err = soorma_cli::workflow::parse(Path::new("wf.yaml"), "goal: g\nsteps: []\n").unwrap_err();
/// assert_eq!(err.problems().len(), 1);
/// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
/// ```
pub fn parse(path: &Path, text: &str) -> Result<Workflow, InvalidWorkflow> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let json = match extension.as_deref() {
        Some("json") => true,
        Some("yaml" | "yml") => false,
        _ => text.trim_start().starts_with('{'),
    };
    if json {
        Workflow::from_json(text)
    } else {
        Workflow::from_yaml(text)
    }
}

fn load(path: &Path) -> Result<Result<Workflow, InvalidWorkflow>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
        what: "cannot read workflow",
        path: path.to_owned(),
        source,
    })?;
    Ok(parse(path, &text))
}

/// The problems, one per line.
///
/// ```
/// let err = soorma::workflow::Workflow::from_json(r#"{"goal": "", "steps": []}"#).unwrap_err();
/// assert_eq!(soorma_cli::workflow::render_problems(&err), "`goal` is empty\nthe workflow has no steps\n");
/// ```
pub fn render_problems(invalid: &InvalidWorkflow) -> String {
    let mut out = String::new();
    for problem in invalid.problems() {
        let _ = writeln!(out, "{problem}");
    }
    out
}

fn invalid(path: &Path, problems: &InvalidWorkflow) -> CliError {
    CliError::InvalidWorkflow {
        path: path.to_owned(),
        count: problems.problems().len(),
    }
}

/// `soorma workflow check FILE [--registry]`: prints every problem of the workflow, one per
/// line (with `--registry`, also those found against the registry of the platform named by
/// `SOORMA_NATS_URL`), and fails when there is one.
pub async fn check(path: &Path, registry: bool) -> Result<(), CliError> {
    let workflow = match load(path)? {
        Ok(workflow) => workflow,
        Err(problems) => {
            out!("{}", render_problems(&problems))?;
            return Err(invalid(path, &problems));
        }
    };
    let mut against = String::new();
    if registry {
        let connected = connect("workflow check --registry").await?;
        let agents = connected
            .platform
            .discovery()
            .discover(&Requirements::new())
            .await?;
        if let Err(problems) = workflow.check_against(&agents) {
            out!("{}", render_problems(&problems))?;
            return Err(invalid(path, &problems));
        }
        against = format!(
            ", checked against {} registered agent{} on {}",
            agents.len(),
            if agents.len() == 1 { "" } else { "s" },
            connected.url
        );
    }
    let steps = workflow.steps().len();
    out!(
        "{}: valid ({steps} step{}{against})\n",
        path.display(),
        if steps == 1 { "" } else { "s" }
    )
}

/// `soorma workflow graph FILE`: prints the workflow as a Mermaid flowchart (the problems go
/// to stderr when it is invalid).
pub fn graph(path: &Path) -> Result<(), CliError> {
    match load(path)? {
        Ok(workflow) => out!("{}", workflow.to_mermaid()),
        Err(problems) => {
            errln!("{}", render_problems(&problems).trim_end());
            Err(invalid(path, &problems))
        }
    }
}
