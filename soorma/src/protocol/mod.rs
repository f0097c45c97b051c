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
        path: bounded(&e.path().to_string(), MAX_REASON_BYTES / 4),
        // serde quotes the offending value (a whole string payload) and the path its keys:
        // keep both small.
        message: bounded(&e.inner().to_string(), MAX_REASON_BYTES / 2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_are_bounded_however_large_the_input() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Calc {
            expression: String,
        }
        let huge_value = Value::String("x".repeat(1_000_000));
        let err = decode_payload::<Calc>("calc", &huge_value).unwrap_err();
        assert!(
            err.to_string().len() < MAX_REASON_BYTES,
            "{}",
            err.to_string().len()
        );
        let huge_key = serde_json::json!({ "k".repeat(1_000_000): {"expression": 1} });
        let err = decode_payload::<std::collections::HashMap<String, Calc>>("calc", &huge_key)
            .unwrap_err();
        assert!(
            err.to_string().len() < MAX_REASON_BYTES,
            "{}",
            err.to_string().len()
        );
    }
}
