//! The `soorma` command-line tool.
//!
//! ```text
//! soorma new <name> --kind tool|worker|planner [--path DIR] [--soorma-path PATH]
//! soorma dev [--port N] [--store DIR]
//! soorma agents [--json] [--check]
//! soorma card <agent> --url <gateway-url> [--v0-3]
//! soorma events tail [--topic T] [--event E]... [--correlation ID] [--json]
//! soorma mcp tools --config mcp.json [--json]
//! soorma mcp call <server:tool> [--args JSON] [--timeout-ms N] --config mcp.json
//! soorma mcp bridge --config mcp.json [--name N]
//! soorma mcp serve [--http ADDR [--token TOKEN] [--allowed-host HOST]...] [--agent NAME]...
//! soorma workflow check <FILE> [--registry]
//! soorma workflow graph <FILE>
//! ```
//!
//! `new` scaffolds an agent crate; `dev` runs a local `nats-server -js`; `agents`, `card` and
//! `events tail` work on the shared platform named by `SOORMA_NATS_URL` (the embedded platform
//! lives inside one process, so there is nothing for them to see there). `mcp tools` and
//! `mcp call` talk to the MCP servers of an `mcp.json`; `mcp bridge` puts their tools on the
//! shared platform and `mcp serve` offers its agents to MCP clients. `workflow check` validates a
//! workflow definition (and, with `--registry`, against the shared platform's registry);
//! `workflow graph` draws it as a Mermaid flowchart. See `docs/cli.md`.
//!
//! This library holds the commands so they can be documented and unit-tested; the `soorma`
//! binary parses the command line with [`Cli`] and calls [`run`].
#![warn(missing_docs)]

pub mod agents;
pub mod dev;
mod error;
pub mod events;
pub mod mcp;
pub mod output;
pub mod platform;
pub mod scaffold;
pub mod workflow;

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use soorma::Topic;

use crate::output::out;

pub use error::CliError;
pub use scaffold::Kind;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "soorma",
    version,
    about = "soorma agent SDK: scaffold agents, run a local NATS platform, inspect agents and events",
    after_help = "Commands other than `new` and `dev` use the platform named by SOORMA_NATS_URL \
                  (start one with `soorma dev`)."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a new agent crate (a tool, a worker or a planner) with a working agent and its
    /// test.
    New(NewArgs),
    /// Run a local nats-server with JetStream and print the SOORMA_NATS_URL to export.
    Dev(DevArgs),
    /// List the agents registered on the platform.
    Agents(AgentsArgs),
    /// Print the A2A agent card of a registered agent.
    Card(CardArgs),
    /// Watch the platform's events.
    Events {
        /// What to do with events.
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// MCP: list and call the tools of MCP servers, bridge them onto the platform, serve the
    /// platform's agents to MCP clients.
    Mcp {
        /// What to do.
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Workflows: validate a definition file, draw it as a Mermaid flowchart.
    Workflow {
        /// What to do.
        #[command(subcommand)]
        command: WorkflowCommand,
    },
}

/// `soorma workflow ...`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Validate a workflow definition (YAML or JSON): print every problem, one per line, and
    /// exit with status 1 if there is one.
    Check {
        /// The workflow file (`.yaml`, `.yml` or `.json`).
        file: PathBuf,
        /// Also check it against the registry of the platform named by SOORMA_NATS_URL:
        /// capabilities exist, inputs match their schemas, reply fields exist.
        #[arg(long)]
        registry: bool,
    },
    /// Print a workflow definition as a Mermaid flowchart.
    Graph {
        /// The workflow file (`.yaml`, `.yml` or `.json`).
        file: PathBuf,
    },
}

/// `soorma mcp ...`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// List the tools of the servers of an mcp.json.
    Tools {
        /// The mcp.json naming the servers.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Print each tool with its schemas as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool and print its output as JSON.
    Call {
        /// The tool: `server:tool`, or a tool name only one server has.
        tool: String,
        /// The tool's arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// The call's timeout in milliseconds (default: the server's `call_ms`).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// The mcp.json naming the servers.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Bridge the servers' tools onto the platform (SOORMA_NATS_URL) until Ctrl-C.
    Bridge {
        /// The mcp.json naming the servers.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The bridge agent's name (default `mcp-bridge`).
        #[arg(long)]
        name: Option<String>,
    },
    /// Serve the platform's (SOORMA_NATS_URL) tools and workers to MCP clients: over
    /// stdin/stdout, or streamable HTTP with --http.
    Serve {
        /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8000).
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Only this agent (repeat for several; default: every tool and worker).
        #[arg(long = "agent", value_name = "NAME")]
        agents: Vec<String>,
        /// With --http: require `Authorization: Bearer TOKEN` on every request (needed when
        /// ADDR is not a loopback address).
        #[arg(long, value_name = "TOKEN", requires = "http")]
        token: Option<String>,
        /// With --http: accept requests for this Host (a name or name:port; repeat for several;
        /// default: loopback names when ADDR is loopback, any host otherwise).
        #[arg(long = "allowed-host", value_name = "HOST", requires = "http")]
        allowed_hosts: Vec<String>,
    },
}

/// `soorma new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The crate's name (also the agent's name): lowercase letters, digits, `-` and `_`, starting with a
    /// letter.
    pub name: String,
    /// What to generate.
    #[arg(long, value_parser = kind_parser())]
    pub kind: Kind,
    /// The directory to create the crate in (the crate goes into `<DIR>/<name>`).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub path: PathBuf,
    /// Depend on a local soorma checkout: the path of its `soorma/` crate directory.
    /// Default: the checkout this CLI was built from, when it was built from one that still
    /// exists; else this CLI's soorma version from crates.io.
    #[arg(long, value_name = "PATH")]
    pub soorma_path: Option<PathBuf>,
}

/// A value parser that names the values it accepts (in `--help`, `-h` and completions) and
/// parses with `parse`, whose error message clap shows as it is.
#[derive(Clone)]
struct Listed<T> {
    values: fn() -> Vec<PossibleValue>,
    parse: fn(&str) -> Result<T, String>,
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Listed<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        self.parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new((self.values)().into_iter()))
    }
}

/// `--kind`: every [`Kind`], each with what it generates.
fn kind_parser() -> Listed<Kind> {
    Listed {
        values: || {
            Kind::ALL
                .iter()
                .map(|k| PossibleValue::new(k.as_str()).help(k.about()))
                .collect()
        },
        parse: str::parse,
    }
}

/// `--topic`: every [`Topic`].
fn topic_parser() -> Listed<Topic> {
    Listed {
        values: || {
            Topic::ALL
                .iter()
                .map(|t| PossibleValue::new(t.as_str()))
                .collect()
        },
        parse: |s| s.parse::<Topic>().map_err(|e| e.to_string()),
    }
}

/// `soorma dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// The port nats-server listens on (127.0.0.1 only).
    #[arg(long, default_value_t = 4222, value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Where JetStream keeps streams and KV buckets (default: `soorma-dev-<port>` in the
    /// temporary directory, kept between runs).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
}

/// `soorma agents`.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Print the agents' registry definitions as JSON.
    #[arg(long)]
    pub json: bool,
    /// Compare what the agents request with what they consume: list every request event no
    /// registered agent consumes, and exit with status 1 if there is one.
    #[arg(long)]
    pub check: bool,
}

/// `soorma card`.
#[derive(Debug, Args)]
pub struct CardArgs {
    /// The registered agent's name.
    pub agent: String,
    /// The URL where the A2A gateway serves this agent (`https://...`).
    #[arg(long, value_name = "GATEWAY_URL")]
    pub url: String,
    /// Print the A2A v0.3.0 rendering instead of v1.0.
    #[arg(long = "v0-3")]
    pub v0_3: bool,
}

/// `soorma events ...`.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Print live events as they are published, until Ctrl-C. An event seen again (same id)
    /// or redelivered is marked `(redelivered ×N)` (`"redelivered": N` with --json).
    Tail(TailArgs),
}

/// `soorma events tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Only this topic.
    #[arg(long, value_parser = topic_parser())]
    pub topic: Option<Topic>,
    /// Only events of this type (repeat for several).
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Only events with this correlation id.
    #[arg(long, value_name = "ID")]
    pub correlation: Option<String>,
    /// Print each event's envelope as one line of JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::New(args) => {
            let options = scaffold::NewOptions {
                name: args.name,
                kind: args.kind,
                parent: args.path,
                soorma_path: args.soorma_path,
            };
            let created = scaffold::scaffold(&options)?;
            out!("{}", scaffold::next_steps(&options, &created))
        }
        Command::Dev(args) => {
            dev::run(dev::DevOptions {
                port: args.port,
                store: args.store,
            })
            .await
        }
        Command::Agents(args) if args.check => agents::check(args.json).await,
        Command::Agents(args) => agents::list(args.json).await,
        Command::Card(args) => agents::card(&args.agent, &args.url, args.v0_3).await,
        Command::Events {
            command: EventsCommand::Tail(args),
        } => {
            events::tail(events::TailOptions {
                topic: args.topic,
                events: args.events,
                correlation: args.correlation,
                json: args.json,
            })
            .await
        }
        Command::Mcp { command } => match command {
            McpCommand::Tools { config, json } => mcp::tools(&config, json).await,
            McpCommand::Call {
                tool,
                args,
                timeout_ms,
                config,
            } => {
                mcp::call(
                    &config,
                    &tool,
                    &args,
                    timeout_ms.map(std::time::Duration::from_millis),
                )
                .await
            }
            McpCommand::Bridge { config, name } => mcp::bridge(&config, name).await,
            McpCommand::Serve {
                http,
                agents,
                token,
                allowed_hosts,
            } => {
                let http = http.map(|addr| mcp::HttpServe {
                    addr,
                    token,
                    allowed_hosts,
                });
                mcp::serve(http, agents).await
            }
        },
        Command::Workflow { command } => match command {
            WorkflowCommand::Check { file, registry } => workflow::check(&file, registry).await,
            WorkflowCommand::Graph { file } => workflow::graph(&file),
        },
    }
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
