//! The workflow as a Mermaid flowchart.

use std::fmt::Write as _;

use super::{StepKind, Workflow};

impl Workflow {
    /// The workflow as a Mermaid `flowchart TD`: one node per step (its id and name, and what
    /// it calls), an edge from each dependency to its dependent; human-input steps are
    /// parallelograms, sub-workflow steps subroutines, and a fallback is a dashed edge to a
    /// rounded node. Labels are escaped, so any name is safe.
    ///
    /// ```
    /// let wf = soorma::workflow::Workflow::from_json(r#"{"goal": "g", "steps": [
    ///   {"id": "a", "name": "Search \"docs\" [fast]", "operator": "search", "fallback": "search.backup"},
    ///   {"id": "b", "human_input": {"question": "Good?"}, "depends_on": ["a"]}
    /// ]}"#)?;
    /// assert_eq!(wf.to_mermaid(), "\
    /// flowchart TD
    ///     s0[\"a: Search #quot;docs#quot; [fast]<br/>search\"]
    ///     s0f([\"fallback: search.backup\"])
    ///     s0 -. fallback .-> s0f
    ///     s1[/\"b<br/>asks: Good?\"/]
    ///     s0 --> s1
    /// ");
    /// # Ok::<(), soorma::workflow::InvalidWorkflow>(())
    /// ```
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        for (i, step) in self.steps.iter().enumerate() {
            let mut label = if step.name.trim().is_empty() || step.name == step.id {
                escape(&step.id)
            } else {
                format!("{}: {}", escape(&step.id), escape(&step.name))
            };
            let (open, close) = match &step.kind {
                StepKind::Operator { operator, .. } => {
                    let _ = write!(label, "<br/>{}", escape(operator));
                    ("[\"", "\"]")
                }
                StepKind::HumanInput(ask) => {
                    let _ = write!(label, "<br/>asks: {}", escape(&ask.question));
                    ("[/\"", "\"/]")
                }
                StepKind::SubWorkflow(inner) => {
                    let _ = write!(
                        label,
                        "<br/>sub-workflow: {} ({} steps)",
                        escape(&inner.definition.goal),
                        inner.steps.len()
                    );
                    ("[[\"", "\"]]")
                }
            };
            let _ = writeln!(out, "    s{i}{open}{label}{close}");
            if let StepKind::Operator {
                fallback: Some(fallback),
                ..
            } = &step.kind
            {
                let _ = writeln!(out, "    s{i}f([\"fallback: {}\"])", escape(fallback));
                let _ = writeln!(out, "    s{i} -. fallback .-> s{i}f");
            }
            for dep in &step.dependencies {
                if let Some(d) = self.index.get(dep) {
                    let _ = writeln!(out, "    s{d} --> s{i}");
                }
            }
        }
        out
    }
}

/// Text safe inside a quoted Mermaid label: `#`, quotes and angle brackets as entity codes,
/// line breaks as spaces.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '#' => out.push_str("#35;"),
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
