//! The `soorma` command-line tool; see the `soorma_cli` library and `docs/cli.md`.

use clap::Parser;

// Current-thread: `soorma dev` spawns nats-server from the main thread, which its Linux
// parent-death signal is tied to.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = soorma_cli::Cli::parse();
    if let Err(e) = soorma_cli::run(cli).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
