//! Success and failure counts and latency per tool.

use std::sync::Mutex;
use std::time::Duration;

use super::CircuitState;

/// What the coordinator saw of one tool.
///
/// ```
/// use std::time::Duration;
/// use soorma::mcp::ToolStats;
///
/// let s = ToolStats::default();
/// assert_eq!((s.calls(), s.mean_latency()), (0, Duration::ZERO));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolStats {
    /// Calls that returned a result.
    pub successes: u64,
    /// Calls that reached the server and failed: tool errors, protocol errors, timeouts, lost
    /// connections.
    pub failures: u64,
    /// Calls refused because the circuit was open.
    pub rejected: u64,
    /// The summed latency of the calls that reached the server.
    pub total_latency: Duration,
    /// The slowest of them.
    pub max_latency: Duration,
    /// The latest of them.
    pub last_latency: Duration,
    /// The circuit's state when the stats were read.
    pub circuit: Option<CircuitState>,
}

impl ToolStats {
    /// Calls that reached the server.
    ///
    /// ```
    /// let mut s = soorma::mcp::ToolStats::default();
    /// s.successes = 3;
    /// s.failures = 1;
    /// assert_eq!(s.calls(), 4);
    /// ```
    pub fn calls(&self) -> u64 {
        self.successes + self.failures
    }

    /// The mean latency of the calls that reached the server.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let mut s = soorma::mcp::ToolStats::default();
    /// s.successes = 2;
    /// s.total_latency = Duration::from_millis(30);
    /// assert_eq!(s.mean_latency(), Duration::from_millis(15));
    /// ```
    pub fn mean_latency(&self) -> Duration {
        match u32::try_from(self.calls()) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.total_latency / n,
            Err(_) => Duration::ZERO,
        }
    }
}

/// The counters of one tool, shared by its calls.
#[derive(Debug, Default)]
pub(crate) struct StatsCell(Mutex<ToolStats>);

impl StatsCell {
    fn with(&self, f: impl FnOnce(&mut ToolStats)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub(crate) fn record(&self, success: bool, latency: Duration) {
        self.with(|s| {
            if success {
                s.successes += 1;
            } else {
                s.failures += 1;
            }
            s.total_latency += latency;
            s.max_latency = s.max_latency.max(latency);
            s.last_latency = latency;
        });
    }

    pub(crate) fn reject(&self) {
        self.with(|s| s.rejected += 1);
    }

    pub(crate) fn snapshot(&self, circuit: CircuitState) -> ToolStats {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        s.circuit = Some(circuit);
        s
    }
}
