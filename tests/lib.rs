//! Test support for the soorma workspace: the agents the tests start, a real `nats-server` per
//! test, the MCP servers the MCP tests talk to, and the examples' binaries. Which kind of test
//! goes where: `README.md`.

pub mod agents;
pub mod child;
pub mod mcp_peers;
pub mod nats_server;
pub mod raw_http;
pub mod restarts;
pub mod slow_bus;

/// This process's resident memory (`VmRSS`), in KiB: the benches' memory figures.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// A KiB figure of this process's /proc/self/status (`field` is the line's start, `VmHWM:`
/// for instance); 0 where it cannot be read.
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=soorma=debug`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The command line of a `harness = false` test target (`libtest-mimic`), running `--test-threads`
/// trials at once, else `RUST_TEST_THREADS` (as the built-in harness does), else twice as many as
/// there are CPUs: trials mostly wait (on timers, their nats-server, child processes), so that is
/// faster even on 2 cores.
pub fn trial_arguments() -> libtest_mimic::Arguments {
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = args.test_threads.or_else(|| {
        let from_env = std::env::var("RUST_TEST_THREADS").ok();
        from_env.and_then(|n| n.parse().ok()).or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() * 2)
        })
    });
    args
}

/// `target/<profile>/examples/<name>`, next to the running test binary; built by
/// `cargo test --workspace`.
///
/// # Panics
/// When the example was not built, with the command that builds it.
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} is missing: build the examples first (`cargo test --workspace` does, or \
         `cargo build -p soorma-examples --examples`)",
        bin.display()
    );
    bin
}
