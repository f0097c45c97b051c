//! Helpers shared by the soorma examples (and their tests).

pub mod calc;
pub mod calculator;
pub mod text;

/// Installs a `tracing` subscriber printing to stderr, filtered by `RUST_LOG` (default `warn`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
