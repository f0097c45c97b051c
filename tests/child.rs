//! Agents in child processes for the fault tests: the test binary runs itself again, as one
//! test (the child's entry point, which does nothing without its role variable), with its
//! standard output read line by line; the child is SIGKILLed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// A child process of the running test binary.
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
}

impl ChildProcess {
    /// Runs the test `entry` of this test binary in a child process with the variables `env`,
    /// and waits (up to a minute) until it prints `READY `.
    pub fn spawn(entry: &str, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(std::env::current_exe().expect("test binary"));
        command
            .args(["--exact", entry, "--nocapture", "--test-threads=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn the child process");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let process = Self { child, lines };
        process
            .line_with("READY ", Duration::from_secs(60))
            .expect("the child process starts (prints `READY `)");
        process
    }

    /// The next line of the process's standard output containing `text`, waiting up to
    /// `within` for it.
    pub fn line_with(&self, text: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether the process has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// SIGKILL: no shutdown, no acks, no deregistration.
    pub fn kill(self) {}
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
