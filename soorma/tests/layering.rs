//! The layering of `soorma/src`: every module imports only from its own layer or lower ones,
//! sibling layers (`layers/*`, `engine/*`) never import each other, and there is no cycle
//! between folders. Reads the `crate::`, `super::` and `$crate::` paths of every source file
//! (comments stripped); `lib.rs`, the public API that re-exports from the layers, is exempt.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first; a unit is a top-level module, or a folder of `layers/` or
/// `engine/` (whose siblings must not import each other).
const LAYERS: &[(&str, &[&str])] = &[
    ("L0 error, util", &["error", "util"]),
    ("L1 engine SPI", &["spi"]),
    ("L2 engines", &["engine", "engine/embedded", "engine/nats"]),
    ("L3 platform services, protocol", &["platform", "protocol"]),
    ("L4 runtime", &["runtime"]),
    (
        "L5 layers",
        &[
            "layers",
            "layers/event",
            "layers/tool",
            "layers/worker",
            "layers/planner",
        ],
    ),
    ("L6 client, testing", &["client", "testing"]),
    (
        "L7 gateway, mcp, llm, memory",
        &["gateway", "mcp", "llm", "memory", "http", "tls"],
    ),
];

/// Units that are siblings: neither may import the other.
const SIBLING_GROUPS: &[&str] = &["layers/", "engine/"];

fn layer_of(unit: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, units)| units.contains(&unit))
}

/// The module path of a source file (`layers/worker/task.rs` → `["layers", "worker", "task"]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The unit a module path belongs to: `layers/worker` for `layers::worker::task`, `engine`
/// for `engine::EngineParts`.
fn unit_of(path: &[String]) -> Option<String> {
    let first = path.first()?;
    match path.get(1) {
        Some(second) if SIBLING_GROUPS.contains(&format!("{first}/").as_str()) => {
            let candidate = format!("{first}/{second}");
            if layer_of(&candidate).is_some() {
                Some(candidate)
            } else {
                Some(first.clone())
            }
        }
        _ => Some(first.clone()),
    }
}

/// The source with comments removed (line, block and doc comments), keeping line breaks and
/// string literals.
fn strip_comments(src: &str) -> String {
    let bytes = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut in_str = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_str {
            out.push(c as char);
            if c == b'\\' && i + 1 < bytes.len() {
                out.push(bytes[i + 1] as char);
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i] == b'/' && bytes.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if bytes[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'\'' {
            // A char literal ('"' must not start a string) or a lifetime.
            if bytes.get(i + 2) == Some(&b'\'') {
                out.push_str("' '");
                i += 3;
            } else if bytes.get(i + 1) == Some(&b'\\') && bytes.get(i + 3) == Some(&b'\'') {
                out.push_str("' '");
                i += 4;
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            if c == b'"' {
                in_str = true;
            }
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// Every path a file refers to, resolved to a module path, with its line: `crate::a::b`,
/// `$crate::a::b`, `super::x` (relative to the file's module), including the paths inside
/// `use crate::{a::b, c}` groups.
fn referenced_paths(module: &[String], code: &str) -> Vec<(usize, Vec<String>)> {
    referenced_paths_with_origin(module, code)
        .into_iter()
        .map(|(line, path, _)| (line, path))
        .collect()
}

/// [`referenced_paths`], each with whether it was written `$crate::` (in a macro: exported
/// macros name the public API, which is allowed).
fn referenced_paths_with_origin(module: &[String], code: &str) -> Vec<(usize, Vec<String>, bool)> {
    let mut out = Vec::new();
    // The leading `a::b::c` of `s`, up to the first character that ends the path.
    let idents = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        for seg in s.split("::") {
            let ident: String = seg
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() {
                break;
            }
            let ends_here = ident.len() < seg.len();
            out.push(ident);
            if ends_here {
                break;
            }
        }
        out
    };
    for (n, line) in code.lines().enumerate() {
        let line_no = n + 1;
        let mut rest = line;
        while let Some(pos) = find_path_start(rest) {
            let tail = &rest[pos..];
            let dollar = tail.starts_with("$crate::");
            let (base, after): (Vec<String>, &str) = if let Some(t) = tail.strip_prefix("$crate::")
            {
                (Vec::new(), t)
            } else if let Some(t) = tail.strip_prefix("crate::") {
                (Vec::new(), t)
            } else {
                // super::super::x
                let mut base = module.to_vec();
                let mut t = tail;
                while let Some(next) = t.strip_prefix("super::") {
                    base.pop();
                    t = next;
                }
                (base, t)
            };
            if let Some(group) = after.strip_prefix('{') {
                // `use crate::{a::b, c::{d, e}}`: each top-level member of the group.
                for member in top_level_members(group) {
                    let mut p = base.clone();
                    p.extend(idents(member.trim()));
                    if p.len() > base.len() {
                        out.push((line_no, p, dollar));
                    }
                }
            } else {
                let mut p = base.clone();
                p.extend(idents(after));
                if !p.is_empty() {
                    out.push((line_no, p, dollar));
                }
            }
            // Past the `crate::` / `super::super::` just read, so no part of it is read again.
            rest = &rest[pos + (tail.len() - after.len())..];
        }
    }
    out
}

/// The members of a `{...}` use group (the text after its `{`), split at its own commas.
fn top_level_members(group: &str) -> Vec<&str> {
    let mut members = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..i]);
                return members;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    members.push(&group[start..]);
    members
}

/// The position of the next `crate::`, `$crate::` or `super::` that starts a path.
fn find_path_start(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut best: Option<usize> = None;
    for pat in ["$crate::", "crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = s[from..].find(pat) {
            let at = from + found;
            let prev = at.checked_sub(1).map(|p| bytes[p]);
            let starts_word =
                prev.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$'));
            // `super::` right after `::` continues a `super::super::` chain already taken.
            let continues_chain = pat == "super::" && at >= 2 && &s[at - 2..at] == "::";
            if starts_word && !continues_chain {
                best = Some(best.map_or(at, |b: usize| b.min(at)));
                break;
            }
            from = at + 1;
        }
    }
    best
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn modules_import_only_from_their_layer_or_lower_and_folders_have_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut seen_units = BTreeSet::new();
    for file in &files {
        let module = module_path(&src, file);
        if module == ["lib"] {
            continue; // the public API
        }
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .display()
            .to_string();
        let Some(unit) = unit_of(&module) else {
            continue;
        };
        seen_units.insert(unit.clone());
        let Some(layer) = layer_of(&unit) else {
            problems.push(format!(
                "{rel}: folder `{unit}` is in no layer; add it to LAYERS"
            ));
            continue;
        };
        let code = std::fs::read_to_string(file).expect("read source");
        for (line, path, dollar) in referenced_paths_with_origin(&module, &strip_comments(&code)) {
            let Some(target) = unit_of(&path) else {
                continue;
            };
            if target == unit {
                continue;
            }
            let Some(target_layer) = layer_of(&target) else {
                if dollar {
                    continue; // an exported macro naming the public API
                }
                problems.push(format!(
                    "{rel}:{line}: `crate::{}` goes through the crate root's re-exports; import it from the module that defines it",
                    path.join("::")
                ));
                continue;
            };
            if target_layer > layer {
                problems.push(format!(
                    "{rel}:{line}: `{}` imports `{}` from a higher layer ({} imports {})",
                    unit,
                    path.join("::"),
                    LAYERS[layer].0,
                    LAYERS[target_layer].0
                ));
            }
            let siblings = SIBLING_GROUPS
                .iter()
                .any(|g| unit.starts_with(g) && target.starts_with(g));
            if siblings {
                problems.push(format!(
                    "{rel}:{line}: `{unit}` imports its sibling `{target}` (`{}`)",
                    path.join("::")
                ));
            }
            edges.entry(unit.clone()).or_default().insert(target);
        }
    }
    // Cycles between folders (same-layer folders may import each other one way only).
    for cycle in cycles(&edges) {
        problems.push(format!(
            "import cycle between folders: {}",
            cycle.join(" -> ")
        ));
    }
    for (_, units) in LAYERS {
        for unit in *units {
            if !seen_units.contains(*unit) && !["layers", "engine"].contains(unit) {
                problems.push(format!(
                    "LAYERS names `{unit}`, which is not a folder of src/"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "layering violations:\n  - {}",
        problems.join("\n  - ")
    );
}

/// Every elementary cycle found by a depth-first search (each reported once, from its
/// smallest unit).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut c = path.clone();
                    c.push(start.clone());
                    found.push(c);
                } else if next > start && !path.contains(next) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found
}

#[test]
fn the_checker_sees_upward_imports_groups_and_super_paths() {
    let module: Vec<String> = ["layers", "worker", "task"].map(String::from).to_vec();
    let code = strip_comments(
        "use crate::{spi::state::{self, Change}, runtime::handler::Handler};\n\
         // use crate::client::Client;\n\
         let x = '\"'; use super::super::planner::Plan;\n\
         fn f() -> crate::error::Result<()> { $crate::util::x() }\n",
    );
    let paths: Vec<String> = referenced_paths(&module, &code)
        .into_iter()
        .map(|(line, p)| format!("{line}:{}", p.join("::")))
        .collect();
    assert_eq!(
        paths,
        [
            "1:spi::state",
            "1:runtime::handler::Handler",
            "3:layers::planner::Plan",
            "4:error::Result",
            "4:util::x",
        ]
    );
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    edges.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(cycles(&edges), vec![vec!["a", "b", "a"]]);
}
