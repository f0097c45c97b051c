//! Test support for the soorma workspace: platform-independent product scenarios and a real
//! `nats-server` per test.

pub mod calculators;
pub mod mcp_peers;
pub mod nats_server;
pub mod scenarios;

/// Logs to the test output when `RUST_LOG` is set (e.g. `RUST_LOG=soorma=debug`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}
