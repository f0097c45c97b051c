//! The `soorma` command-line tool; see the `soorma_cli` library and `docs/cli.md`.

use clap::Parser;
use soorma_cli::CliError;

// Current-thread: `soorma dev` spawns nats-server from the main thread, which its Linux
// parent-death signal is tied to.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = soorma_cli::Cli::parse();
    match soorma_cli::run(cli).await {
        // The reader of stdout went away (`soorma ... | head -1`): a quiet, successful exit.
        Ok(()) | Err(CliError::StdoutClosed) => {}
        Err(e) => {
            soorma_cli::output::eprint(format_args!("error: {e}\n"));
            std::process::exit(1);
        }
    }
}
