//! The wire protocol on top of the bus: publishing with consistent envelopes (and schema
//! checks), replies, progress reports and payload decoding — each rule in one place.

pub(crate) mod progress;
pub mod publish;
pub(crate) mod reply;
pub mod request;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::Error;
use crate::util::{MAX_REASON_BYTES, bounded};

/// Decodes an event's `data` into `T`, naming the event, the type and the serde path on
/// failure (in a message of bounded size).
pub(crate) fn decode_payload<T: DeserializeOwned>(event: &str, data: &Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(data).map_err(|e| Error::InvalidPayload {
        event: event.to_owned(),
        type_name: std::any::type_name::<T>(),
        path: e.path().to_string(),
        // serde quotes the offending value (a whole string payload): keep the message small.
        message: bounded(&e.inner().to_string(), MAX_REASON_BYTES / 2),
    })
}
