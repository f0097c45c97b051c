//! Requests of one subject published at the same moment, stored together.
//!
//! A request of a subject nobody is publishing on goes out at once, alone. While it is on its
//! way (until JetStream acknowledges it), the next requests of that subject wait; when it is
//! stored they go together, as [batches](super::batch), and so on while requests keep coming.
//! A lone caller waits for nothing; 64 callers of one tool share a few stored messages instead
//! of 64 (and their replies come back in as few).
//!
//! Only requests with new ids take part ([`EventBus::publish_coalesced`]): a batch's
//! de-duplication id depends on which requests happened to go together, so a republished one
//! would not be recognised. Nothing republishes a new request.
//!
//! [`EventBus::publish_coalesced`]: crate::spi::bus::EventBus::publish_coalesced

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::jetstream::stream;
use tokio::sync::oneshot;

use super::batch::{self, Part};
use super::bus::NatsBus;
use crate::error::{EngineError, EngineErrorKind, Result};

/// The most requests waiting on one subject; more are published alone.
const MAX_WAITING: usize = 4096;

/// Subjects with a publish on its way, and the requests waiting for it.
#[derive(Default)]
pub(crate) struct Lanes {
    waiting: std::sync::Mutex<HashMap<String, Vec<Waiting>>>,
}

struct Waiting {
    part: Part,
    stored: oneshot::Sender<std::result::Result<(), String>>,
}

/// What a publisher does: go first, wait for the one on its way, or (a full lane) go alone.
enum Turn {
    First,
    Wait(oneshot::Receiver<std::result::Result<(), String>>),
    Alone(Part),
}

/// Publishes `part` on `subject`, stored with others published on it at the same moment.
pub(crate) async fn publish(
    bus: &NatsBus,
    stream: Arc<stream::Stream>,
    subject: String,
    part: Part,
) -> Result<()> {
    let lanes = bus.lanes();
    let (turn, part) = {
        let mut waiting = lanes.waiting.lock().expect("publish lanes lock");
        match waiting.get_mut(&subject) {
            Some(queue) if queue.len() < MAX_WAITING => {
                let (stored, rx) = oneshot::channel();
                queue.push(Waiting { part, stored });
                (Turn::Wait(rx), None)
            }
            Some(_) => (Turn::Alone(part), None),
            None => {
                waiting.insert(subject.clone(), Vec::new());
                (Turn::First, Some(part))
            }
        }
    };
    match turn {
        Turn::Wait(rx) => match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(EngineError::new(EngineErrorKind::Publish, e).into()),
            Err(_) => Err(EngineError::new(
                EngineErrorKind::Publish,
                "the publish this request waited for was dropped",
            )
            .into()),
        },
        Turn::Alone(part) => bus.store_part(&stream, &subject, part).await,
        Turn::First => {
            // Whatever happens to this future, the requests that wait are published.
            let _next = Next {
                bus: bus.clone(),
                stream: stream.clone(),
                subject: subject.clone(),
            };
            let part = part.expect("the first publisher keeps its part");
            bus.store_part(&stream, &subject, part).await
        }
    }
}

/// Publishes what waits on a subject once the publish on its way is done (or dropped).
struct Next {
    bus: NatsBus,
    stream: Arc<stream::Stream>,
    subject: String,
}

impl Drop for Next {
    fn drop(&mut self) {
        let idle = {
            let mut waiting = self.bus.lanes().waiting.lock().expect("publish lanes lock");
            let idle = waiting.get(&self.subject).is_none_or(Vec::is_empty);
            if idle {
                waiting.remove(&self.subject);
            }
            idle
        };
        if idle {
            return;
        }
        let (bus, stream, subject) = (
            self.bus.clone(),
            self.stream.clone(),
            std::mem::take(&mut self.subject),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(drain(bus, stream, subject));
            }
            Err(_) => {
                // No runtime (it is shutting down): the waiting publishers get an error.
                bus.lanes()
                    .waiting
                    .lock()
                    .expect("publish lanes lock")
                    .remove(&subject);
            }
        }
    }
}

/// Publishes the requests waiting on `subject`, in batches, until none waits.
async fn drain(bus: NatsBus, stream: Arc<stream::Stream>, subject: String) {
    let max_bytes = bus.max_batch_bytes();
    loop {
        let queue = {
            let mut waiting = bus.lanes().waiting.lock().expect("publish lanes lock");
            let queue = waiting
                .get_mut(&subject)
                .map(std::mem::take)
                .unwrap_or_default();
            if queue.is_empty() {
                waiting.remove(&subject);
                return;
            }
            queue
        };
        let (parts, mut waiters): (Vec<Part>, Vec<_>) =
            queue.into_iter().map(|w| (w.part, w.stored)).unzip();
        let mut waiters = waiters.drain(..);
        for parts in batch::cut(parts, max_bytes) {
            let n = parts.len();
            let stored = bus
                .store_parts(&stream, &subject, parts, false)
                .await
                .map_err(|e| e.to_string());
            for stored_tx in waiters.by_ref().take(n) {
                let _ = stored_tx.send(stored.clone());
            }
        }
    }
}
