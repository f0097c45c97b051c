//! The CLI's terminal output: everything a command prints goes through [`print()`] (stdout)
//! or [`eprint()`] (stderr), never through `print!`/`println!`, which panic when the stream is
//! closed.
//!
//! A closed stdout is normal for a command-line tool: `soorma card calc --url ... | head -1`
//! closes the pipe after one line. [`print()`] reports it as [`CliError::StdoutClosed`], which
//! ends the command through the usual error path (so it still stops what it started: a
//! nats-server, an MCP bridge, the MCP servers) and which the binary turns into a quiet exit
//! with status 0. That is what a Unix filter killed by `SIGPIPE` looks like to the pipeline
//! that closed it (which ignores its status), without the panic message or status 101.
//!
//! Inside the crate the `out!` and `outln!` macros format and call [`print()`], like
//! `print!`/`println!` but returning its `Result`; `errln!` is `eprintln!` that never panics.

use std::fmt;
use std::io::{ErrorKind, Write};

use crate::CliError;

/// Writes formatted text to stdout and flushes it.
///
/// # Errors
/// [`CliError::StdoutClosed`] when stdout is a pipe or socket whose reader has gone away
/// (`EPIPE`); [`CliError::Io`] for any other write error (a full disk behind a redirect).
pub fn print(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.flush())
        .map_err(stdout_error)
}

/// What a failed write to stdout means for the command.
///
/// ```
/// use std::io::{Error, ErrorKind};
/// use soorma_cli::{CliError, output::stdout_error};
/// assert!(matches!(stdout_error(Error::from(ErrorKind::BrokenPipe)), CliError::StdoutClosed));
/// assert!(matches!(stdout_error(Error::from(ErrorKind::StorageFull)), CliError::Io { .. }));
/// ```
pub fn stdout_error(source: std::io::Error) -> CliError {
    if source.kind() == ErrorKind::BrokenPipe {
        CliError::StdoutClosed
    } else {
        CliError::Io {
            what: "cannot write to",
            path: "stdout".into(),
            source,
        }
    }
}

/// Writes formatted text to stderr, ignoring errors: a diagnostic that cannot be shown is
/// dropped (there is nowhere left to report it), and the command goes on.
pub fn eprint(args: fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `print!` to stdout that returns a `Result` (see [`print()`]) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(::std::format_args!($($arg)*))
    };
}

/// `println!` to stdout that returns a `Result` (see [`print()`]) instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::print(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics (see [`eprint()`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::eprint(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};
