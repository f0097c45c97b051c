//! Publishes carried through a cluster's failover.
//!
//! When the server leading a stream goes away, the stream has no leader for a moment (until
//! the others elect one, a few seconds at most): a publish to it gets no answer ("no
//! responders", or JetStream's 503) or times out, and an acknowledgement can be lost with the
//! server. Such a publish is sent again, with the same de-duplication id — one that was stored
//! after all is not stored twice — until [`NatsConfig::failover_retry`] has passed. Other
//! failures (a message over `max_payload`, a conflicting expected sequence) are returned at
//! once.
//!
//! [`NatsConfig::failover_retry`]: super::NatsConfig::failover_retry

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::context::{PublishError, PublishErrorKind};

/// The first pause between attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether `error` (or an error it wraps) is how a publish or a JetStream API request (a
/// consumer's creation) fails while a stream or the cluster changes leader: no responders, no
/// answer in time, the connection lost, or JetStream answering 503 (unavailable).
pub(crate) fn is_failover(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{RequestError, RequestErrorKind};
    use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(e) = e.downcast_ref::<PublishError>() {
            return match e.kind() {
                PublishErrorKind::StreamNotFound
                | PublishErrorKind::TimedOut
                | PublishErrorKind::BrokenPipe => true,
                PublishErrorKind::Other => std::error::Error::source(e).is_some_and(is_unavailable),
                _ => false,
            };
        }
        if let Some(e) = e.downcast_ref::<ConsumerError>() {
            return match e.kind() {
                ConsumerErrorKind::TimedOut | ConsumerErrorKind::Request => true,
                ConsumerErrorKind::JetStream(js) => js.code() == 503,
                _ => false,
            };
        }
        if let Some(e) = e.downcast_ref::<RequestError>() {
            return matches!(
                e.kind(),
                RequestErrorKind::NoResponders | RequestErrorKind::TimedOut
            );
        }
        if is_unavailable(e) {
            return true;
        }
        current = e.source();
    }
    false
}

/// JetStream's "temporarily unavailable" answer (code 503).
fn is_unavailable(error: &(dyn std::error::Error + 'static)) -> bool {
    error
        .downcast_ref::<async_nats::jetstream::Error>()
        .is_some_and(|e| e.code() == 503)
}

/// Runs `call` until it succeeds, fails otherwise than by a failover ([`is_failover`]), or
/// `window` has passed (pausing 50 ms, doubling up to 1 s, between attempts). `call` must be
/// safe to repeat: a publish with the same de-duplication id, a put of the same value.
pub(crate) async fn retried<T, E, F, Fut>(window: Duration, what: &str, mut call: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::error::Error + 'static,
{
    let deadline = tokio::time::Instant::now() + window;
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1u32;
    loop {
        match call().await {
            Err(e) if is_failover(&e) && tokio::time::Instant::now() + pause < deadline => {
                tracing::debug!(what, attempt, error = %e, "no stream leader or no acknowledgement (a failover?); trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
                attempt += 1;
            }
            Err(e) => {
                if attempt > 1 {
                    tracing::warn!(what, attempt, error = %e, "still failing after retrying through a failover");
                }
                return Err(e);
            }
            Ok(v) => return Ok(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn failing(kind: PublishErrorKind) -> PublishError {
        PublishError::new(kind)
    }

    #[test]
    fn failovers_are_told_from_other_failures() {
        for kind in [
            PublishErrorKind::StreamNotFound,
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
        ] {
            assert!(is_failover(&failing(kind)), "{kind:?}");
        }
        for kind in [
            PublishErrorKind::MaxPayloadExceeded,
            PublishErrorKind::WrongLastSequence,
            PublishErrorKind::WrongLastMessageId,
            PublishErrorKind::Other,
        ] {
            assert!(!is_failover(&failing(kind)), "{kind:?}");
        }
        use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
        assert!(is_failover(&ConsumerError::new(
            ConsumerErrorKind::TimedOut
        )));
        assert!(!is_failover(&ConsumerError::new(
            ConsumerErrorKind::InvalidName
        )));
        // Wrapped (a KV put wraps the publish's error).
        let put = async_nats::jetstream::kv::PutError::with_source(
            async_nats::jetstream::kv::PutErrorKind::Ack,
            failing(PublishErrorKind::TimedOut),
        );
        assert!(is_failover(&put));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_is_retried_within_its_window_and_other_failures_are_not() {
        let calls = AtomicU32::new(0);
        let ok: Result<u32, PublishError> = retried(Duration::from_secs(10), "test", || async {
            match calls.fetch_add(1, Ordering::Relaxed) {
                0..=2 => Err(failing(PublishErrorKind::StreamNotFound)),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(ok.unwrap(), 3);

        let calls = AtomicU32::new(0);
        let too_big: Result<(), PublishError> =
            retried(Duration::from_secs(10), "test", || async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err(failing(PublishErrorKind::MaxPayloadExceeded))
            })
            .await;
        assert!(too_big.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        // Past the window, the last failure is returned (attempts at 0, .05, .15, .35, .75 s).
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let gone: Result<(), PublishError> = retried(Duration::from_secs(1), "test", || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(failing(PublishErrorKind::TimedOut))
        })
        .await;
        assert!(gone.is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 5);
        assert!(started.elapsed() < Duration::from_secs(1));

        // No window: one attempt.
        let calls = AtomicU32::new(0);
        let _ = retried(Duration::ZERO, "test", || async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err::<(), _>(failing(PublishErrorKind::TimedOut))
        })
        .await;
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }
}
