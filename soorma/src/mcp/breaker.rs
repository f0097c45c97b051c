//! A circuit breaker per tool: opens after repeated failures, probes after a cool-down.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BreakerConfig;

/// The state of a tool's circuit.
///
/// ```
/// use soorma::mcp::CircuitState;
///
/// assert_eq!(CircuitState::Closed.to_string(), "closed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls go through.
    Closed,
    /// Calls fail fast with `CircuitOpen` until the cool-down ends.
    Open,
    /// The cool-down ended: one probe call goes through; its outcome closes or reopens it.
    HalfOpen,
}

impl std::fmt::Display for CircuitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half-open",
        })
    }
}

#[derive(Debug)]
enum State {
    Closed { failures: VecDeque<Instant> },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

/// One tool's breaker.
#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    config: BreakerConfig,
    state: Mutex<State>,
}

/// Permission to make a call; report its outcome with [`CircuitBreaker::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Permit {
    probe: bool,
}

/// An admitted call in progress: [`finish`](Self::finish) records its outcome; dropped
/// unfinished (the caller went away, the call never reached the server), it gives the permit
/// back so that an abandoned probe does not hold the circuit half-open.
pub(crate) struct Admitted {
    breaker: Arc<CircuitBreaker>,
    permit: Option<Permit>,
}

impl Admitted {
    pub(crate) fn finish(mut self, success: bool) {
        if let Some(permit) = self.permit.take() {
            self.breaker.record(permit, success);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.breaker.release(permit);
        }
    }
}

impl CircuitBreaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: Mutex::new(State::Closed {
                failures: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets a call through, or says how long until the next probe.
    pub(crate) fn admit(self: &Arc<Self>) -> Result<Admitted, Duration> {
        self.admit_at(Instant::now()).map(|permit| Admitted {
            breaker: self.clone(),
            permit: Some(permit),
        })
    }

    fn admit_at(&self, now: Instant) -> Result<Permit, Duration> {
        let mut state = self.lock();
        match &mut *state {
            State::Closed { .. } => Ok(Permit { probe: false }),
            State::Open { until } if now < *until => Err(*until - now),
            State::Open { .. } => {
                *state = State::HalfOpen { probing: true };
                Ok(Permit { probe: true })
            }
            State::HalfOpen { probing: true } => Err(Duration::ZERO),
            State::HalfOpen { probing } => {
                *probing = true;
                Ok(Permit { probe: true })
            }
        }
    }

    /// Records the outcome of an admitted call that reached the server.
    fn record(&self, permit: Permit, success: bool) {
        self.record_at(permit, success, Instant::now());
    }

    fn record_at(&self, permit: Permit, success: bool, now: Instant) {
        let mut state = self.lock();
        match (&mut *state, success) {
            (State::Closed { failures }, false) => {
                failures.push_back(now);
                while failures
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > self.config.window)
                {
                    failures.pop_front();
                }
                if failures.len() >= self.config.failures as usize {
                    tracing::warn!(failures = failures.len(), window = ?self.config.window, "MCP tool circuit opened");
                    *state = State::Open {
                        until: now + self.config.cool_down,
                    };
                }
            }
            (State::Closed { .. }, true) => {}
            (State::HalfOpen { .. }, true) if permit.probe => {
                tracing::info!("MCP tool circuit closed after a successful probe");
                *state = State::Closed {
                    failures: VecDeque::new(),
                };
            }
            (State::HalfOpen { .. }, false) if permit.probe => {
                tracing::warn!("MCP tool probe failed; circuit reopened");
                *state = State::Open {
                    until: now + self.config.cool_down,
                };
            }
            // A late outcome of a call admitted before the circuit opened.
            _ => {}
        }
    }

    /// Gives back a permit whose call never reached the server or was abandoned: a probe
    /// makes room for the next one.
    fn release(&self, permit: Permit) {
        if permit.probe {
            let mut state = self.lock();
            if let State::HalfOpen { probing } = &mut *state {
                *probing = false;
            }
        }
    }

    pub(crate) fn state(&self) -> CircuitState {
        match &*self.lock() {
            State::Closed { .. } => CircuitState::Closed,
            State::Open { until } if Instant::now() < *until => CircuitState::Open,
            State::Open { .. } | State::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig::new(
            3,
            Duration::from_secs(10),
            Duration::from_secs(5),
        ))
    }

    #[test]
    fn opens_after_failures_in_the_window_and_probes_after_the_cool_down() {
        let b = breaker();
        let t0 = Instant::now();
        for i in 0..3 {
            let p = b.admit_at(t0).unwrap();
            b.record_at(p, false, t0 + Duration::from_secs(i));
        }
        assert_eq!(
            b.admit_at(t0 + Duration::from_secs(3)),
            Err(Duration::from_secs(4))
        );
        // Cool-down over: exactly one probe.
        let probe = b.admit_at(t0 + Duration::from_secs(8)).unwrap();
        assert!(probe.probe);
        assert_eq!(b.admit_at(t0 + Duration::from_secs(8)), Err(Duration::ZERO));
        // A failed probe reopens for another cool-down.
        b.record_at(probe, false, t0 + Duration::from_secs(9));
        assert_eq!(
            b.admit_at(t0 + Duration::from_secs(10)),
            Err(Duration::from_secs(4))
        );
        let probe = b.admit_at(t0 + Duration::from_secs(14)).unwrap();
        b.record_at(probe, true, t0 + Duration::from_secs(14));
        assert_eq!(b.state(), CircuitState::Closed);
        assert!(!b.admit_at(t0 + Duration::from_secs(14)).unwrap().probe);
    }

    #[test]
    fn failures_outside_the_window_do_not_count() {
        let b = breaker();
        let t0 = Instant::now();
        for i in [0, 11, 22] {
            let p = b.admit_at(t0).unwrap();
            b.record_at(p, false, t0 + Duration::from_secs(i));
        }
        assert!(b.admit_at(t0 + Duration::from_secs(22)).is_ok());
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_call_probe() {
        let b = Arc::new(CircuitBreaker::new(BreakerConfig::new(
            1,
            Duration::from_secs(10),
            Duration::from_millis(1),
        )));
        b.admit().unwrap().finish(false);
        std::thread::sleep(Duration::from_millis(5));
        let probe = b.admit().unwrap();
        assert_eq!(b.admit().err(), Some(Duration::ZERO));
        drop(probe);
        b.admit().unwrap().finish(true);
        assert_eq!(b.state(), CircuitState::Closed);
    }

    #[test]
    fn a_released_probe_lets_the_next_call_probe() {
        let b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            let p = b.admit_at(t0).unwrap();
            b.record_at(p, false, t0);
        }
        let probe = b.admit_at(t0 + Duration::from_secs(6)).unwrap();
        b.release(probe);
        assert!(b.admit_at(t0 + Duration::from_secs(6)).unwrap().probe);
    }
}
