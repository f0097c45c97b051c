//! `soorma new`: a new agent crate from the templates in `soorma-cli/templates/`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::CliError;

/// The kinds `soorma new` can generate.
pub const KINDS: &str = "tool, worker, planner";

const CARGO_TOML: &str = include_str!("../templates/Cargo.toml.template");
const TOOL_MAIN: &str = include_str!("../templates/tool.rs");
const WORKER_MAIN: &str = include_str!("../templates/worker.rs");
const PLANNER_MAIN: &str = include_str!("../templates/planner.rs");
const README: &str = include_str!("../templates/README.md");
const GITIGNORE: &str = include_str!("../templates/gitignore");

/// What kind of agent to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request → reply tool (`#[on_invoke]`).
    Tool,
    /// A worker (`#[on_task]` delegating to a tool, `#[on_result]` completing), with the tool.
    Worker,
    /// A planner (`#[on_goal]` starting a plan whose action calls a tool), with the tool.
    Planner,
}

impl Kind {
    /// Every kind, in the order `--help` lists them.
    pub const ALL: [Kind; 3] = [Kind::Tool, Kind::Worker, Kind::Planner];

    /// The kind's name on the command line: `tool`, `worker` or `planner`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Worker => "worker",
            Kind::Planner => "planner",
        }
    }

    /// What `--kind <this>` generates, in one line (for `--help`).
    pub fn about(self) -> &'static str {
        match self {
            Kind::Tool => "a typed request → reply handler (#[on_invoke])",
            Kind::Worker => {
                "a task handler (#[on_task]) that delegates to a tool and completes with its \
                 result (#[on_result]); the tool is generated too"
            }
            Kind::Planner => {
                "a goal handler (#[on_goal]) that runs a state-machine plan whose action calls a \
                 tool; the tool is generated too"
            }
        }
    }

    fn main_template(self) -> &'static str {
        match self {
            Kind::Tool => TOOL_MAIN,
            Kind::Worker => WORKER_MAIN,
            Kind::Planner => PLANNER_MAIN,
        }
    }

    fn summary(self, name: &str) -> String {
        match self {
            Kind::Tool => format!(
                "`src/main.rs` is the tool `{name}`: a typed `#[on_invoke(\"{name}.requested\")]` \
                 handler whose request and reply are Rust types (serde + JsonSchema), so the \
                 registry publishes their schemas."
            ),
            Kind::Worker => format!(
                "`src/main.rs` is the worker `{name}`: `#[on_task(\"{name}.requested\")]` delegates \
                 to the tool `{name}-words` (in the same crate) and `#[on_result]` completes the \
                 task with the tool's result."
            ),
            Kind::Planner => format!(
                "`src/main.rs` is the planner `{name}`: `#[on_goal(\"{name}.goal\")]` starts a plan \
                 whose first state asks the tool `{name}-words` (in the same crate) to count words, \
                 then follows a transition on the reply (conditions pick `short` or `long`; a tool \
                 error goes to `failed`) and replies with a result template."
            ),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;

    /// ```
    /// use soorma_cli::Kind;
    /// assert_eq!("worker".parse::<Kind>(), Ok(Kind::Worker));
    /// assert_eq!("planner".parse::<Kind>(), Ok(Kind::Planner));
    /// assert!("robot".parse::<Kind>().unwrap_err().contains("available kinds"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tool" => Ok(Kind::Tool),
            "worker" => Ok(Kind::Worker),
            "planner" => Ok(Kind::Planner),
            other => Err(format!("unknown kind `{other}`; available kinds: {KINDS}")),
        }
    }
}

/// `soorma new` settings.
#[derive(Debug, Clone)]
pub struct NewOptions {
    /// The crate's (and agent's) name.
    pub name: String,
    /// What to generate.
    pub kind: Kind,
    /// The directory the crate directory is created in.
    pub parent: PathBuf,
    /// A local `soorma/` crate directory to depend on (else [`SoormaSource::resolve`]'s
    /// default).
    pub soorma_path: Option<PathBuf>,
}

/// The `soorma/` crate directory of the checkout this CLI was built from, as it was at build
/// time. The generated crates depend on it when it still is a soorma crate at run time.
const CHECKOUT_SOORMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../soorma");

/// Where the generated crate's `soorma` dependency comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SoormaSource {
    /// `--soorma-path`: a local soorma crate directory (absolute, canonical).
    Given(PathBuf),
    /// The soorma crate of the checkout this CLI was built from (absolute, canonical): the CLI
    /// was built (or `cargo install --path`-ed) from a soorma workspace, whose soorma the
    /// registry may not have (an unreleased version) and which is what the CLI itself uses.
    Checkout(PathBuf),
    /// This CLI's soorma version from crates.io: the CLI came from the registry, or its
    /// checkout is gone.
    Registry,
}

impl SoormaSource {
    /// `--soorma-path` when given (checked: it must be a soorma crate directory), else the
    /// checkout this CLI was built from when it still exists, else the registry.
    ///
    /// # Errors
    /// [`CliError::BadSoormaPath`] when `given` is not a soorma crate directory.
    pub fn resolve(given: Option<&Path>) -> Result<Self, CliError> {
        Self::resolve_with(given, Path::new(CHECKOUT_SOORMA))
    }

    /// [`SoormaSource::resolve`] with `checkout` as the build-time checkout's crate directory.
    fn resolve_with(given: Option<&Path>, checkout: &Path) -> Result<Self, CliError> {
        if let Some(path) = given {
            return resolve_soorma_path(path).map(SoormaSource::Given);
        }
        Ok(match std::fs::canonicalize(checkout) {
            Ok(abs) if is_soorma_crate(&abs) => SoormaSource::Checkout(abs),
            _ => SoormaSource::Registry,
        })
    }

    /// The local crate directory, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            SoormaSource::Given(p) | SoormaSource::Checkout(p) => Some(p),
            SoormaSource::Registry => None,
        }
    }

    /// The `soorma = ...` line of the generated `Cargo.toml` (see [`soorma_dependency`]).
    pub fn dependency(&self) -> String {
        soorma_dependency(self.path())
    }

    /// Which soorma the crate uses, for the message `soorma new` prints.
    ///
    /// ```
    /// use soorma_cli::scaffold::SoormaSource;
    /// assert!(SoormaSource::Registry.describe().ends_with(" from crates.io"));
    /// ```
    pub fn describe(&self) -> String {
        match self {
            SoormaSource::Given(p) => format!("soorma from {} (--soorma-path)", p.display()),
            SoormaSource::Checkout(p) => format!(
                "soorma from {} (the checkout this soorma CLI was built from; --soorma-path \
                 picks another)",
                p.display()
            ),
            SoormaSource::Registry => {
                format!("soorma {} from crates.io", env!("CARGO_PKG_VERSION"))
            }
        }
    }
}

/// What [`scaffold`] created.
#[derive(Debug, Clone)]
pub struct Scaffolded {
    /// The crate directory, `<parent>/<name>`.
    pub dir: PathBuf,
    /// Where its `soorma` dependency comes from.
    pub soorma: SoormaSource,
}

const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Names cargo or the generated crate cannot use: the standard crates, cargo's build
/// directories, and the generated crate's own dependencies.
const RESERVED: &[&str] = &[
    "test",
    "std",
    "core",
    "alloc",
    "proc_macro",
    "deps",
    "examples",
    "build",
    "incremental",
    "soorma",
    "soorma_common",
    "soorma_macros",
    "serde",
    "schemars",
    "tokio",
];

/// Checks that `name` can be the generated crate's name (and its agent's and events' prefix):
/// 1 to 64 characters, lowercase ASCII letters, digits, `-` and `_`, starting with a letter;
/// not a Rust keyword, a standard crate, a cargo directory or one of its dependencies.
///
/// ```
/// use soorma_cli::scaffold::validate_name;
/// assert!(validate_name("order-tools").is_ok());
/// assert!(validate_name("1tool").unwrap_err().contains("start with a letter"));
/// assert!(validate_name("fn").unwrap_err().contains("keyword"));
/// assert!(validate_name("serde").unwrap_err().contains("reserved"));
/// ```
pub fn validate_name(name: &str) -> Result<(), String> {
    let Some(first) = name.chars().next() else {
        return Err("the name is empty".into());
    };
    if name.len() > 64 {
        return Err("use at most 64 characters".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "`{bad}` is not allowed; use lowercase ASCII letters, digits, `-` and `_`"
        ));
    }
    if !first.is_ascii_lowercase() {
        return Err("it must start with a letter".into());
    }
    let ident = name.replace('-', "_");
    if KEYWORDS.contains(&ident.as_str()) {
        return Err("it is a Rust keyword".into());
    }
    if RESERVED.contains(&ident.as_str()) {
        return Err(
            "it is reserved (a standard crate, a cargo build directory, or a dependency of the \
             generated crate)"
                .into(),
        );
    }
    Ok(())
}

/// `text` with every `{{key}}` replaced by its value.
///
/// ```
/// assert_eq!(soorma_cli::scaffold::render("hi {{name}}!", &[("name", "bob")]), "hi bob!");
/// ```
pub fn render(text: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(text.to_owned(), |out, (key, value)| {
        out.replace(&format!("{{{{{key}}}}}"), value)
    })
}

/// A TOML basic string (quoted, escaped).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The generated crate's `soorma` dependency line.
///
/// ```
/// use std::path::Path;
/// use soorma_cli::scaffold::soorma_dependency;
/// assert_eq!(
///     soorma_dependency(Some(Path::new("/src/soorma-rs/soorma"))),
///     r#"soorma = { path = "/src/soorma-rs/soorma", features = ["nats"] }"#
/// );
/// assert!(soorma_dependency(None).starts_with(r#"soorma = { version = ""#));
/// ```
pub fn soorma_dependency(path: Option<&Path>) -> String {
    match path {
        Some(p) => format!(
            "soorma = {{ path = {}, features = [\"nats\"] }}",
            toml_string(&p.to_string_lossy())
        ),
        None => format!(
            "soorma = {{ version = \"{}\", features = [\"nats\"] }}",
            env!("CARGO_PKG_VERSION")
        ),
    }
}

/// Whether `dir` holds the `Cargo.toml` of the `soorma` package.
fn is_soorma_crate(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|manifest| {
        manifest
            .lines()
            .any(|l| l.split_whitespace().collect::<String>() == "name=\"soorma\"")
    })
}

/// The absolute path of a soorma crate directory, or why `path` is not one.
fn resolve_soorma_path(path: &Path) -> Result<PathBuf, CliError> {
    let bad = |reason: String| CliError::BadSoormaPath {
        path: path.to_owned(),
        reason,
    };
    let abs = std::fs::canonicalize(path).map_err(|e| {
        bad(format!(
            "{e}; give the `soorma/` directory of a soorma checkout"
        ))
    })?;
    if is_soorma_crate(&abs) {
        return Ok(abs);
    }
    if abs.join("soorma").join("Cargo.toml").is_file() {
        return Err(bad(format!(
            "this looks like the workspace root; give its crate directory `{}`",
            abs.join("soorma").display()
        )));
    }
    Err(bad(
        "no `Cargo.toml` of the `soorma` package there; give the `soorma/` directory of a soorma \
         checkout"
            .into(),
    ))
}

/// Creates `<parent>/<name>` with `Cargo.toml`, `src/main.rs`, `README.md` and `.gitignore`.
/// Refuses (writing nothing) when the name is invalid, the directory exists or `--soorma-path`
/// is not a soorma crate.
pub fn scaffold(options: &NewOptions) -> Result<Scaffolded, CliError> {
    let name = options.name.as_str();
    validate_name(name).map_err(|reason| CliError::InvalidName {
        name: name.to_owned(),
        reason,
    })?;
    let soorma = SoormaSource::resolve(options.soorma_path.as_deref())?;
    let dir = options.parent.join(name);
    // `symlink_metadata`: a dangling symlink is in the way too.
    if dir.symlink_metadata().is_ok() {
        return Err(CliError::AlreadyExists(dir));
    }
    let io = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| CliError::Io { what, path, source }
    };
    std::fs::create_dir_all(&options.parent)
        .map_err(io("cannot create directory", &options.parent))?;
    // `create_dir` (not `_all`) fails if the directory appeared meanwhile: never overwrite.
    std::fs::create_dir(&dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CliError::AlreadyExists(dir.clone())
        } else {
            io("cannot create directory", &dir)(e)
        }
    })?;
    let dependency = soorma.dependency();
    let summary = options.kind.summary(name);
    let vars = [
        ("name", name),
        ("kind", options.kind.as_str()),
        ("soorma_dependency", dependency.as_str()),
        ("summary", summary.as_str()),
    ];
    let written = write_files(&dir, options.kind, &vars);
    if written.is_err() {
        // The directory is ours (created above): leave no half-written crate behind.
        let _ = std::fs::remove_dir_all(&dir);
    }
    written.map(|()| Scaffolded { dir, soorma })
}

fn write_files(dir: &Path, kind: Kind, vars: &[(&str, &str)]) -> Result<(), CliError> {
    let src = dir.join("src");
    std::fs::create_dir(&src).map_err(|source| CliError::Io {
        what: "cannot create directory",
        path: src.clone(),
        source,
    })?;
    let files = [
        (dir.join("Cargo.toml"), CARGO_TOML),
        (src.join("main.rs"), kind.main_template()),
        (dir.join("README.md"), README),
        (dir.join(".gitignore"), GITIGNORE),
    ];
    for (path, template) in files {
        std::fs::write(&path, render(template, vars)).map_err(|source| CliError::Io {
            what: "cannot write",
            path,
            source,
        })?;
    }
    Ok(())
}

/// What `soorma new` prints after creating the crate: the commands to run next, which work
/// as printed from the directory `soorma new` ran in (the `cd` argument is quoted for the
/// shell when it needs to be).
pub fn next_steps(options: &NewOptions, created: &Scaffolded) -> String {
    let kind = options.kind;
    format!(
        "Created the {kind} `{name}` in {dir}, using {soorma}.\n\n\
         \x20 cd {cd}\n\
         \x20 cargo test    # a round trip on the embedded platform\n\
         \x20 cargo run     # starts it on the embedded platform and sends it one request\n\n\
         With `soorma dev` running and SOORMA_NATS_URL exported, `cargo run` serves until Ctrl-C \
         and `soorma agents` lists it.\n",
        name = options.name,
        dir = created.dir.display(),
        soorma = created.soorma.describe(),
        cd = shell_word(&created.dir.to_string_lossy()),
    )
}

/// `s` as one shell word: as it is when it has only characters no shell treats specially,
/// else quoted (single quotes for POSIX shells, double quotes on Windows).
///
/// ```
/// use soorma_cli::scaffold::shell_word;
/// assert_eq!(shell_word("./agents/my-tool"), "./agents/my-tool");
/// # #[cfg(unix)]
/// assert_eq!(shell_word("my agents/it's"), r"'my agents/it'\''s'");
/// ```
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_owned();
    }
    if cfg!(windows) {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_have_no_unknown_placeholders() {
        let vars = [
            ("name", "x"),
            ("kind", "tool"),
            ("soorma_dependency", "soorma = \"1\""),
            ("summary", "s"),
        ];
        for template in [
            CARGO_TOML,
            TOOL_MAIN,
            WORKER_MAIN,
            PLANNER_MAIN,
            README,
            GITIGNORE,
        ] {
            let out = render(template, &vars);
            // What is left are the plan's own data templates (`{{goal.text}}`).
            for (i, _) in out.match_indices("{{") {
                let rest = &out[i + 2..];
                assert!(
                    rest.starts_with("goal.") || rest.starts_with("results."),
                    "placeholder left in:\n{}",
                    &out[i..(i + 40).min(out.len())]
                );
            }
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "my-tool", "my_tool2", "z-9"] {
            assert_eq!(validate_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "-x", "_x", "9x", "My", "a b", "a.b", "é", "self", "type", "test", "tokio",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_name(&"a".repeat(65)).is_err());
    }

    /// A fresh temporary directory (removed by the test).
    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("soorma-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_build_checkout_is_the_default_when_it_is_a_soorma_crate() {
        // This test binary was built from a checkout: its soorma crate is the default.
        let checkout = std::fs::canonicalize(CHECKOUT_SOORMA).unwrap();
        assert_eq!(
            SoormaSource::resolve(None).unwrap(),
            SoormaSource::Checkout(checkout.clone())
        );
        assert_eq!(
            SoormaSource::resolve(None).unwrap().dependency(),
            format!(
                "soorma = {{ path = {}, features = [\"nats\"] }}",
                toml_string(&checkout.to_string_lossy())
            )
        );

        // A CLI from the registry: `<registry>/soorma-cli-0.1.0/../soorma` does not exist, or
        // is some other crate.
        let dir = temp_dir("no-checkout");
        assert_eq!(
            SoormaSource::resolve_with(None, &dir.join("soorma")).unwrap(),
            SoormaSource::Registry
        );
        std::fs::create_dir_all(dir.join("soorma")).unwrap();
        std::fs::write(
            dir.join("soorma/Cargo.toml"),
            "[package]\nname = \"soorma-fork\"\n",
        )
        .unwrap();
        let registry = SoormaSource::resolve_with(None, &dir.join("soorma")).unwrap();
        assert_eq!(registry, SoormaSource::Registry);
        assert_eq!(
            registry.dependency(),
            format!(
                "soorma = {{ version = \"{}\", features = [\"nats\"] }}",
                env!("CARGO_PKG_VERSION")
            )
        );

        // --soorma-path overrides both, and is checked.
        let given = SoormaSource::resolve_with(Some(Path::new(CHECKOUT_SOORMA)), &dir).unwrap();
        assert_eq!(given, SoormaSource::Given(checkout));
        assert!(matches!(
            SoormaSource::resolve_with(Some(&dir.join("soorma")), Path::new(CHECKOUT_SOORMA)),
            Err(CliError::BadSoormaPath { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn toml_escaping() {
        assert_eq!(toml_string(r#"C:\a "b""#), r#""C:\\a \"b\"""#);
    }
}
