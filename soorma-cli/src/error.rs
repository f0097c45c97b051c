//! The CLI's errors: each says what went wrong and what to do about it.

use std::path::PathBuf;

/// Why a `soorma` command failed. The binary prints it as `error: <message>` and exits with 1,
/// except for [`CliError::StdoutClosed`], which ends the command quietly with status 0.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Stdout was closed by its reader (`soorma card ... | head -1`): there is nobody left to
    /// print to. Not a failure: the binary exits with 0 and prints nothing (see
    /// [`crate::output`]).
    #[error("stdout was closed")]
    StdoutClosed,
    /// `soorma new`: the name is not a usable crate name.
    #[error("invalid crate name `{name}`: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `soorma new`: the target directory exists already.
    #[error(
        "`{}` already exists; nothing was written (pick another name or --path, or remove it first)",
        .0.display()
    )]
    AlreadyExists(PathBuf),
    /// `soorma new --soorma-path`: not a soorma crate directory.
    #[error("--soorma-path `{}`: {reason}", .path.display())]
    BadSoormaPath {
        /// The path given.
        path: PathBuf,
        /// What is wrong, and what was expected.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{what} `{}`: {source}", .path.display())]
    Io {
        /// What was being done (`cannot create directory`).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `soorma dev`: no usable nats-server binary, or it failed to start.
    #[error("{0}")]
    NatsServer(String),
    /// A command that needs a shared platform ran without `SOORMA_NATS_URL`.
    #[error(
        "`soorma {command}` needs a shared platform, but SOORMA_NATS_URL is not set. Without it \
         soorma uses the embedded platform, whose registry and bus are per process: agents \
         running in other processes cannot be seen from here.\n\
         Start a local platform with `soorma dev`, then `export SOORMA_NATS_URL=nats://127.0.0.1:4222` \
         (the line it prints) in this shell and in your agents' shells."
    )]
    NoSharedPlatform {
        /// The subcommand (`agents`, `card`, `events tail`).
        command: &'static str,
    },
    /// The platform named by `SOORMA_NATS_URL` could not be used.
    #[error(
        "cannot use the platform at SOORMA_NATS_URL={url}: {source}\n\
         Is a nats-server with JetStream running there? Start a local one with `soorma dev` and \
         export the SOORMA_NATS_URL it prints, or correct SOORMA_NATS_URL."
    )]
    Unreachable {
        /// The URL(s) from `SOORMA_NATS_URL`.
        url: String,
        /// The connection error.
        source: soorma::Error,
    },
    /// `soorma card`: no registered agent has that name.
    #[error("{}", unknown_agent(.name, .registered, .url))]
    UnknownAgent {
        /// The name asked for.
        name: String,
        /// The names of the registered agents.
        registered: Vec<String>,
        /// The platform URL.
        url: String,
    },
    /// `soorma card`: the card could not be built.
    #[error("{0}")]
    Card(String),
    /// `soorma card --url`: not an absolute http(s) URL.
    #[error(
        "--url `{0}` is not an http:// or https:// URL; give the URL where the A2A gateway serves this agent"
    )]
    BadUrl(String),
    /// `soorma events tail`: the platform closed the event stream.
    #[error("the event stream from {0} ended (the connection to the platform was closed)")]
    StreamEnded(String),
    /// Something could not be rendered as JSON.
    #[error("cannot serialize {what} as JSON: {source}")]
    Json {
        /// What (`the agent definitions`).
        what: &'static str,
        /// The serde error.
        source: serde_json::Error,
    },
    /// An error from the platform.
    #[error(transparent)]
    Platform(#[from] soorma::Error),
    /// An MCP configuration, server or call failed.
    #[error(transparent)]
    Mcp(#[from] soorma::mcp::McpError),
    /// `soorma agents --check`: registered agents request events no agent consumes.
    #[error("{count} request{} that no registered agent consumes (listed above)", if *.count == 1 { "" } else { "s" })]
    Unwired {
        /// How many.
        count: usize,
    },
    /// `soorma workflow check|graph`: the workflow has problems.
    #[error("`{}` is not a valid workflow: {count} problem{} (listed above)", .path.display(), if *.count == 1 { "" } else { "s" })]
    InvalidWorkflow {
        /// The file.
        path: PathBuf,
        /// How many problems.
        count: usize,
    },
}

fn unknown_agent(name: &str, registered: &[String], url: &str) -> String {
    if registered.is_empty() {
        format!(
            "no agent named `{name}` is registered on {url}; no agents are registered at all \
             (start yours with SOORMA_NATS_URL={url} set)"
        )
    } else {
        format!(
            "no agent named `{name}` is registered on {url}; registered agents: {}",
            registered.join(", ")
        )
    }
}
