//! The MCP servers the MCP tests talk to: the published reference server
//! `@modelcontextprotocol/server-everything` (installed from npm by `scripts/test.sh`) and the
//! in-repo fault server (`tests/bin/mcp_fault_server.rs`).

use std::path::PathBuf;

/// The npm package and version `scripts/test.sh` installs into `target/mcp-peers`.
pub const EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The `mcp-server-everything` executable: `$SOORMA_MCP_EVERYTHING`, or the one
/// `scripts/test.sh` installed under `target/mcp-peers`.
///
/// # Panics
/// When it is not installed, with the command that installs it.
pub fn everything_server() -> PathBuf {
    locate_everything().unwrap_or_else(|| {
        panic!(
            "{} is missing: run `bash scripts/test.sh`, or `npm install --prefix target/mcp-peers {EVERYTHING_PACKAGE}` in the workspace",
            default_everything_server().display()
        )
    })
}

/// The `mcp-server-everything` executable: `$SOORMA_MCP_EVERYTHING` when set (whether or not it
/// exists: a wrong setting is a failure, not a skip), else the one `scripts/test.sh` installed
/// under `target/mcp-peers` if it is there; `None` otherwise.
pub fn locate_everything() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOORMA_MCP_EVERYTHING") {
        return Some(PathBuf::from(p));
    }
    Some(default_everything_server()).filter(|bin| bin.exists())
}

fn default_everything_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package is in the workspace")
        .join("target/mcp-peers/node_modules/.bin/mcp-server-everything")
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Whether a process is alive (signal 0).
pub fn process_alive(pid: u32) -> bool {
    // `kill -0` through /proc: a zombie is not alive.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
