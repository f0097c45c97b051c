//! The wire protocol on top of the bus: publishing with consistent envelopes (and schema
//! checks), replies, progress reports and payload decoding — each rule in one place.

pub(crate) mod progress;
pub mod publish;
pub(crate) mod reply;
pub mod request;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::Error;

/// Decodes an event's `data` into `T`, naming the event, the type and the serde path on
/// failure.
pub(crate) fn decode_payload<T: DeserializeOwned>(event: &str, data: &Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(data).map_err(|e| Error::InvalidPayload {
        event: event.to_owned(),
        type_name: std::any::type_name::<T>(),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}
