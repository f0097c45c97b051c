//! How memory records store vectors, and the clock they are stamped with (their digests:
//! `util::digest`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// A vector as stored: base64 of its little-endian `f32`s.
pub(crate) fn encode_vector(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    STANDARD.encode(bytes)
}

/// A stored vector of `dimensions` numbers, or `None` when it is malformed.
pub(crate) fn decode_vector(text: &str, dimensions: usize) -> Option<Vec<f32>> {
    let bytes = STANDARD.decode(text).ok()?;
    if bytes.len() != dimensions * 4 {
        return None;
    }
    let vector: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (vector.iter().all(|x| x.is_finite()) && !is_zero(&vector)).then_some(vector)
}

/// Whether a vector has (about) no length: it has no direction to compare.
pub(crate) fn is_zero(vector: &[f32]) -> bool {
    vector.iter().map(|x| x * x).sum::<f32>() < 1e-12
}

/// Checks a name, id or key: 1 to `max` bytes without control characters; otherwise
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) naming `what`.
pub(crate) fn check_text(what: &str, value: &str, max: usize) -> crate::error::Result<()> {
    if value.is_empty() || value.len() > max || value.chars().any(char::is_control) {
        return Err(crate::error::Error::InvalidArgument(format!(
            "a {what} must be 1 to {max} bytes without control characters"
        )));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `now + ttl` in ms since the epoch (saturating).
pub(crate) fn expiry(now: u64, ttl: Option<std::time::Duration>) -> Option<u64> {
    ttl.map(|ttl| now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_round_trip_and_malformed_ones_are_refused() {
        let v = vec![0.25_f32, -1.0, 3.5];
        assert_eq!(decode_vector(&encode_vector(&v), 3), Some(v.clone()));
        assert_eq!(decode_vector(&encode_vector(&v), 4), None);
        assert_eq!(decode_vector("not base64!", 3), None);
        assert_eq!(decode_vector(&encode_vector(&[f32::NAN]), 1), None);
        assert_eq!(decode_vector(&encode_vector(&[0.0, 0.0]), 2), None);
    }
}
