//! `soorma new`, run as the real binary: the files it writes, name validation, overwrite
//! refusal, kinds and `--soorma-path`.
//!
//! Compiling and testing the generated crates needs a nested `cargo`, which cannot run inside
//! `cargo test` (the build directory lock); `scripts/test.sh` does it right after the
//! workspace tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "soorma-cli-new-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn soorma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soorma"))
        .args(args)
        .output()
        .expect("run soorma")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// This workspace's `soorma/` crate directory.
fn soorma_crate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("soorma")
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

#[test]
fn new_tool_writes_a_standalone_crate_with_a_typed_tool_and_its_test() {
    let tmp = TempDir::new();
    let soorma_path = soorma_crate();
    let out = soorma(&[
        "new",
        "order-tool",
        "--kind",
        "tool",
        "--path",
        tmp.0.to_str().unwrap(),
        "--soorma-path",
        soorma_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Created the tool `order-tool`"), "{stdout}");
    assert!(stdout.contains("cargo test"), "{stdout}");

    let dir = tmp.0.join("order-tool");
    let manifest = read(dir.join("Cargo.toml"));
    assert!(manifest.contains("name = \"order-tool\""), "{manifest}");
    let abs = std::fs::canonicalize(&soorma_path).unwrap();
    let dependency = format!(
        "soorma = {{ path = \"{}\", features = [\"nats\"] }}",
        abs.display()
    );
    assert!(manifest.contains(&dependency), "{manifest}");
    for dep in ["serde = ", "schemars = ", "tokio = "] {
        assert!(manifest.contains(dep), "{dep} missing:\n{manifest}");
    }
    assert!(
        manifest.lines().any(|l| l.trim() == "[workspace]"),
        "its own workspace table:\n{manifest}"
    );

    let main = read(dir.join("src/main.rs"));
    assert!(
        main.contains("#[request(event = \"order-tool.requested\", reply = TextStats)]"),
        "{main}"
    );
    assert!(main.contains("#[on_invoke]\nasync fn analyze(req: Invocation<AnalyzeText>)"));
    assert!(main.contains("#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]"));
    assert!(main.contains("tracing_subscriber::"));
    assert!(main.contains("const AGENT: &str = \"order-tool\";"));
    assert!(main.contains("#[cfg(test)]") && main.contains("#[tokio::test]"));
    assert!(main.contains("Platform::embedded()"));
    assert!(!main.contains("{{"), "unrendered placeholder:\n{main}");

    let readme = read(dir.join("README.md"));
    assert!(readme.starts_with("# order-tool\n"), "{readme}");
    assert!(readme.contains("soorma dev"));
    assert_eq!(read(dir.join(".gitignore")).trim(), "/target");
}

#[test]
fn new_worker_includes_the_tool_it_delegates_to() {
    let tmp = TempDir::new();
    let out = soorma(&[
        "new",
        "reviewer",
        "--kind",
        "worker",
        "--path",
        tmp.0.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = tmp.0.join("reviewer");
    let main = read(dir.join("src/main.rs"));
    assert!(main.contains("#[request(event = \"reviewer.requested\", reply = Review)]"));
    assert!(main.contains("#[request(event = \"reviewer.count.requested\", reply = usize)]"));
    assert!(main.contains("#[on_task]") && main.contains("#[on_fan_in(CountWords)]"));
    assert!(main.contains(".worker(WORKER, handlers![review, counted])"));
    assert!(main.contains("task.delegate(CountWords"));
    assert!(main.contains("#[tokio::test]"));
}

#[test]
fn without_soorma_path_a_cli_built_from_a_checkout_depends_on_that_checkout() {
    // This binary was built from this workspace, so its `soorma/` crate is the dependency
    // (a `version = "0.1.0"` one would not resolve before soorma is published, and the printed
    // `cargo test` would fail). The registry case is unit-tested in `scaffold.rs`.
    let tmp = TempDir::new();
    let out = soorma(&[
        "new",
        "default-dep",
        "--kind",
        "tool",
        "--path",
        tmp.0.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let manifest = read(tmp.0.join("default-dep/Cargo.toml"));
    let checkout = std::fs::canonicalize(soorma_crate()).unwrap();
    let dependency = format!(
        "soorma = {{ path = \"{}\", features = [\"nats\"] }}",
        checkout.display()
    );
    assert!(manifest.contains(&dependency), "{manifest}");
    assert!(!manifest.contains("soorma = { version"), "{manifest}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("soorma from {}", checkout.display())),
        "says which soorma it uses:\n{stdout}"
    );
}

#[test]
fn the_printed_cd_line_enters_the_new_crate() {
    // `--path` relative to the working directory, with a space: the `cd` line is relative to
    // where `soorma new` ran and quoted for the shell.
    let tmp = TempDir::new();
    let out = Command::new(env!("CARGO_BIN_EXE_soorma"))
        .args(["new", "cd-check", "--kind", "tool", "--path", "my agents"])
        .current_dir(&tmp.0)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cd = stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cd "))
        .unwrap_or_else(|| panic!("no cd line:\n{stdout}"));
    let sh = Command::new("sh")
        .arg("-c")
        .arg(format!("{cd} && test -f Cargo.toml && test -f src/main.rs"))
        .current_dir(&tmp.0)
        .output()
        .unwrap();
    assert!(sh.status.success(), "`{cd}` failed: {}", stderr(&sh));
}

/// A pipe whose reading end is already closed: the first write to it fails with `EPIPE`.
fn closed_pipe() -> std::process::Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer.into()
}

/// Runs `soorma` with its stdout connected to a closed pipe.
fn soorma_into_closed_pipe(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soorma"))
        .args(args)
        .current_dir(dir)
        .stdout(closed_pipe())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run soorma")
}

#[test]
fn a_closed_stdout_ends_quietly_instead_of_panicking() {
    let tmp = TempDir::new();
    // `soorma new` prints its next steps after creating the crate; `| head -0` closes the pipe.
    let out = soorma_into_closed_pipe(
        &["new", "piped", "--kind", "planner", "--path", "."],
        &tmp.0,
    );
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
    assert!(
        tmp.0.join("piped/Cargo.toml").is_file(),
        "the crate was still created"
    );

    // clap's help and version output.
    for args in [
        &["--help"][..],
        &["--version"],
        &["new", "--help"],
        &["events", "tail", "--help"],
        &["mcp", "call", "--help"],
        &["workflow", "check", "--help"],
    ] {
        let out = soorma_into_closed_pipe(args, &tmp.0);
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// `soorma <args> --help`, which must succeed.
fn help(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--help");
    let out = soorma(&all);
    assert!(out.status.success(), "{all:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_names_every_accepted_value() {
    let kinds = ["tool", "worker", "planner"];
    let new = help(&["new"]);
    for kind in kinds {
        assert!(
            new.contains(kind),
            "`soorma new --help` omits {kind}:\n{new}"
        );
    }
    assert!(
        new.contains("Possible values:") && new.contains("- planner:"),
        "the kinds are listed as values, each with what it generates:\n{new}"
    );
    // `-h` (short help) lists them too.
    let out = soorma(&["new", "-h"]);
    let short = String::from_utf8_lossy(&out.stdout);
    assert!(
        short.contains("[possible values: tool, worker, planner]"),
        "{short}"
    );

    // The top level's summary of `new`.
    let top = help(&[]);
    let new_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("new "))
        .unwrap_or_else(|| panic!("no `new` line:\n{top}"));
    for kind in kinds {
        assert!(new_line.contains(kind), "{new_line}");
    }

    // `events tail --topic`: every topic.
    let tail = help(&["events", "tail"]);
    for topic in soorma::Topic::ALL {
        assert!(
            tail.contains(topic.as_str()),
            "`soorma events tail --help` omits {topic}:\n{tail}"
        );
    }
    let out = soorma(&["events", "tail", "--topic", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown topic `nope`; expected one of business-facts"),
        "{}",
        stderr(&out)
    );

    // Every subcommand has a help page naming its options.
    for (args, expected) in [
        (&["dev"][..], &["--port", "--store"][..]),
        (&["agents"], &["--json"]),
        (&["card"], &["--url", "--v0-3"]),
        (&["mcp", "tools"], &["--config", "--json"]),
        (&["mcp", "call"], &["--args", "--timeout-ms", "--config"]),
        (&["mcp", "bridge"], &["--config", "--name"]),
        (
            &["mcp", "serve"],
            &["--http", "--agent", "--token", "--allowed-host"],
        ),
    ] {
        let text = help(args);
        for option in expected {
            assert!(
                text.contains(option),
                "{args:?} --help omits {option}:\n{text}"
            );
        }
    }
}

#[test]
fn invalid_names_are_refused_with_the_reason_and_nothing_is_written() {
    let tmp = TempDir::new();
    let cases = [
        ("9lives", "must start with a letter"),
        ("My-Tool", "lowercase"),
        ("has space", "is not allowed"),
        ("a.b", "is not allowed"),
        ("fn", "Rust keyword"),
        ("tokio", "reserved"),
        ("test", "reserved"),
    ];
    for (name, reason) in cases {
        let out = soorma(&[
            "new",
            name,
            "--kind",
            "tool",
            "--path",
            tmp.0.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid crate name `{name}`")) && err.contains(reason),
            "{name}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&tmp.0).unwrap().count(),
        0,
        "nothing may be created for an invalid name"
    );
}

#[test]
fn an_existing_directory_is_never_overwritten() {
    let tmp = TempDir::new();
    let dir = tmp.0.join("taken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    let out = soorma(&[
        "new",
        "taken",
        "--kind",
        "tool",
        "--path",
        tmp.0.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("already exists") && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(read(dir.join("keep.txt")), "mine");
    assert!(!dir.join("Cargo.toml").exists());

    // A second `new` of a crate that was just created is refused too.
    let path = tmp.0.to_str().unwrap();
    let first = soorma(&["new", "fresh", "--kind", "worker", "--path", path]);
    assert!(first.status.success(), "{}", stderr(&first));
    let manifest = read(tmp.0.join("fresh/Cargo.toml"));
    let second = soorma(&["new", "fresh", "--kind", "tool", "--path", path]);
    assert_eq!(second.status.code(), Some(1));
    assert_eq!(read(tmp.0.join("fresh/Cargo.toml")), manifest);
}

#[test]
fn new_planner_includes_its_plan_and_the_tool_it_calls() {
    let tmp = TempDir::new();
    let out = soorma(&[
        "new",
        "planner-one",
        "--kind",
        "planner",
        "--path",
        tmp.0.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let main = std::fs::read_to_string(tmp.0.join("planner-one/src/main.rs")).unwrap();
    for expected in [
        "#[on_goal(\"planner-one.goal\", agent = \"planner-one\")]",
        "#[on_invoke(\"planner-one.count.requested\", agent = \"planner-one-words\")]",
        "Planner::new(PLANNER)",
        "with_condition(\"data.success && data.result <= 5\")",
        "{{goal.text}}",
        "async fn a_plan_round_trip()",
    ] {
        assert!(main.contains(expected), "missing {expected:?}");
    }
    assert!(
        !main.contains("{{name}}"),
        "every placeholder is substituted"
    );
    let unknown = soorma(&["new", "x", "--kind", "robot"]);
    assert_eq!(unknown.status.code(), Some(2));
    let err = stderr(&unknown);
    assert!(
        err.contains("unknown kind `robot`; available kinds: tool, worker, planner"),
        "{err}"
    );
}

#[test]
fn soorma_path_must_be_the_soorma_crate() {
    let tmp = TempDir::new();
    let path = tmp.0.to_str().unwrap();
    let workspace_root = soorma_crate().parent().unwrap().to_path_buf();
    let out = soorma(&[
        "new",
        "a",
        "--kind",
        "tool",
        "--path",
        path,
        "--soorma-path",
        workspace_root.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("looks like the workspace root"), "{err}");

    let missing = tmp.0.join("nowhere");
    let out = soorma(&[
        "new",
        "a",
        "--kind",
        "tool",
        "--path",
        path,
        "--soorma-path",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--soorma-path"), "{}", stderr(&out));
    assert!(!tmp.0.join("a").exists());
}
