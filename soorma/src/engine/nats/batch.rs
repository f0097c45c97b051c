//! Batches on the wire: several envelopes of one subject stored as one JetStream message.
//!
//! With `sync_interval: always` every stored message costs the server an fsync, so a fan-out
//! that publishes its requests one message each pays one fsync per sub-task. A batch is one
//! message: the header [`BATCH_HEADER`] holds how many envelopes it carries, the payload is a
//! JSON array of them (each exactly as a single message would carry it). Every subscriber of
//! this engine hands the envelopes out one by one; a stored batch is acked when every one of
//! them is settled.
//!
//! Batches are cut deterministically (in the order given, at most [`MAX_PARTS`] envelopes and
//! [`MAX_BATCH_BYTES`] each) and take a `Nats-Msg-Id` derived from their envelopes' ids, so a
//! replayed fan-out publishes the same batches and JetStream keeps one copy of each.

use std::fmt;

use async_nats::HeaderMap;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use soorma_common::EventEnvelope;

use crate::error::Error;

/// Header on a message carrying a batch of envelopes: how many.
///
/// ```
/// assert_eq!(soorma::nats::BATCH_HEADER, "Soorma-Batch");
/// ```
pub const BATCH_HEADER: &str = "Soorma-Batch";

/// Header on a batch whose replies are stored together, once every envelope is handled (a
/// fan-out's requests); its value is [`REPLIES_TOGETHER`]. Without it (requests of unrelated
/// callers published at the same moment) each reply goes out as soon as it is ready.
pub(crate) const REPLIES_HEADER: &str = "Soorma-Batch-Replies";
pub(crate) const REPLIES_TOGETHER: &str = "together";

/// The most envelopes one published batch carries (so that a fan-out is still spread over
/// the instances of the agent it calls: a batch goes to one of them).
pub(crate) const MAX_PARTS: usize = 64;

/// The most envelopes a received batch may carry (more is hostile: dead-lettered whole).
pub(crate) const MAX_PARTS_ACCEPTED: usize = 1024;

/// The most bytes of envelopes one published batch carries (and at most half the server's
/// `max_payload`).
pub(crate) const MAX_BATCH_BYTES: usize = 256 * 1024;

/// One envelope ready to publish: its id, its JSON and its `traceparent` (sent as a header
/// when it travels alone).
pub(crate) struct Part {
    pub(crate) id: String,
    pub(crate) json: bytes::Bytes,
    pub(crate) traceparent: Option<String>,
}

/// Cuts `parts` (all of one subject) into batches of at most [`MAX_PARTS`] envelopes and
/// `max_bytes` bytes, in order. An envelope larger than `max_bytes` travels alone.
pub(crate) fn cut(parts: Vec<Part>, max_bytes: usize) -> Vec<Vec<Part>> {
    let mut out: Vec<Vec<Part>> = Vec::new();
    let mut bytes = 0;
    for part in parts {
        let fits = out
            .last()
            .is_some_and(|b| b.len() < MAX_PARTS && bytes + part.json.len() < max_bytes);
        if !fits {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += part.json.len() + 1;
        out.last_mut().expect("a batch was just pushed").push(part);
    }
    out
}

/// The payload of a batch: the JSON array of its envelopes.
pub(crate) fn payload(parts: &[Part]) -> bytes::Bytes {
    let len = parts.iter().map(|p| p.json.len() + 1).sum::<usize>() + 1;
    let mut out = Vec::with_capacity(len);
    out.push(b'[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&p.json);
    }
    out.push(b']');
    out.into()
}

/// The de-duplication id of a batch: a digest of its envelopes' ids (the same batch published
/// again is stored once; ids are unguessable, so is this).
pub(crate) fn batch_id(parts: &[Part]) -> String {
    let mut digest = Sha256::new();
    for p in parts {
        digest.update(p.id.as_bytes());
        digest.update([0]);
    }
    let hash = digest.finalize();
    format!("batch-{}", crate::util::hex(&hash[..16]))
}

/// Whether a message carries a batch.
pub(crate) fn is_batch(headers: Option<&HeaderMap>) -> bool {
    headers.is_some_and(|h| h.get(BATCH_HEADER).is_some())
}

/// Whether a batch's replies are stored together.
pub(crate) fn replies_together(headers: Option<&HeaderMap>) -> bool {
    headers
        .and_then(|h| h.get(REPLIES_HEADER))
        .is_some_and(|v| v.as_str() == REPLIES_TOGETHER)
}

/// The envelopes' JSON texts of a batch payload, or why it is not one (bounded text).
pub(crate) fn split(payload: &[u8]) -> Result<Vec<&RawValue>, String> {
    struct Parts;
    impl<'de> Visitor<'de> for Parts {
        type Value = Vec<&'de RawValue>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "an array of at most {MAX_PARTS_ACCEPTED} envelopes")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(part) = seq.next_element::<&'de RawValue>()? {
                if out.len() == MAX_PARTS_ACCEPTED {
                    return Err(serde::de::Error::custom(format_args!(
                        "more than {MAX_PARTS_ACCEPTED} envelopes"
                    )));
                }
                out.push(part);
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(payload);
    let parts = de
        .deserialize_seq(Parts)
        .and_then(|p| de.end().map(|()| p))
        .map_err(|e| {
            crate::util::bounded(
                &format!("undecodable batch of envelopes: {e}"),
                crate::util::MAX_REASON_BYTES,
            )
        })?;
    if parts.is_empty() {
        return Err("an empty batch of envelopes".into());
    }
    Ok(parts)
}

/// The envelopes a message read straight from a soorma stream carries: one, or a batch's.
/// For tools and tests that read the streams without the SDK's subscriptions.
///
/// ```
/// use soorma::nats::{async_nats::HeaderMap, envelopes_of, BATCH_HEADER};
/// use soorma::{EventEnvelope, Topic};
///
/// let a = EventEnvelope::new("a", "svc", Topic::ActionResults, "x.done");
/// let b = EventEnvelope::new("b", "svc", Topic::ActionResults, "x.done");
/// let single = serde_json::to_vec(&a)?;
/// assert_eq!(envelopes_of(None, &single)?.len(), 1);
///
/// let mut headers = HeaderMap::new();
/// headers.insert(BATCH_HEADER, "2");
/// let batch = serde_json::to_vec(&[&a, &b])?;
/// let ids: Vec<String> = envelopes_of(Some(&headers), &batch)?.into_iter().map(|e| e.id).collect();
/// assert_eq!(ids, ["a", "b"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn envelopes_of(
    headers: Option<&HeaderMap>,
    payload: &[u8],
) -> Result<Vec<EventEnvelope>, Error> {
    let undecodable = |e: serde_json::Error| Error::serialize("event envelope", e);
    if !is_batch(headers) {
        return Ok(vec![serde_json::from_slice(payload).map_err(undecodable)?]);
    }
    split(payload)
        .map_err(Error::InvalidArgument)?
        .into_iter()
        .map(|p| serde_json::from_str(p.get()).map_err(undecodable))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &str, len: usize) -> Part {
        Part {
            id: id.into(),
            json: vec![b' '; len].into(),
            traceparent: None,
        }
    }

    #[test]
    fn batches_are_cut_by_count_and_size_in_order() {
        let parts: Vec<Part> = (0..130).map(|i| part(&i.to_string(), 10)).collect();
        let sizes: Vec<usize> = cut(parts, 1 << 20).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_PARTS, MAX_PARTS, 2]);

        let parts = vec![
            part("a", 60),
            part("b", 60),
            part("big", 500),
            part("c", 10),
        ];
        let batches = cut(parts, 100);
        let ids: Vec<Vec<&str>> = batches
            .iter()
            .map(|b| b.iter().map(|p| p.id.as_str()).collect())
            .collect();
        assert_eq!(ids, [vec!["a"], vec!["b"], vec!["big"], vec!["c"]]);
    }

    #[test]
    fn a_batch_id_depends_on_every_envelope_id() {
        let id = |ids: &[&str]| batch_id(&ids.iter().map(|i| part(i, 1)).collect::<Vec<_>>());
        assert_eq!(id(&["a", "b"]), id(&["a", "b"]));
        assert_ne!(id(&["a", "b"]), id(&["a", "c"]));
        // The separator keeps ("ab", "") apart from ("a", "b").
        assert_ne!(id(&["ab", ""]), id(&["a", "b"]));
        assert_eq!(id(&["a"]).len(), "batch-".len() + 32);
    }

    #[test]
    fn payloads_split_back_into_their_envelopes() {
        let parts = vec![
            Part {
                id: "a".into(),
                json: br#"{"id":"a"}"#.to_vec().into(),
                traceparent: None,
            },
            Part {
                id: "b".into(),
                json: br#"{"id":"b"}"#.to_vec().into(),
                traceparent: None,
            },
        ];
        let payload = payload(&parts);
        let texts: Vec<&str> = split(&payload).unwrap().iter().map(|r| r.get()).collect();
        assert_eq!(texts, [r#"{"id":"a"}"#, r#"{"id":"b"}"#]);
    }

    #[test]
    fn hostile_batches_are_refused_with_a_bounded_reason() {
        for bad in [&b"not json"[..], b"{}", b"[]", b"[1,2", b"[1] trailing"] {
            let reason = split(bad).unwrap_err();
            assert!(reason.len() <= crate::util::MAX_REASON_BYTES, "{reason}");
        }
        let many = format!("[{}1]", "1,".repeat(MAX_PARTS_ACCEPTED));
        assert!(split(many.as_bytes()).unwrap_err().contains("more than"));
        let nested = format!("[{}{}]", "[".repeat(200), "]".repeat(200));
        assert!(
            split(nested.as_bytes()).is_ok(),
            "a part's nesting is the part's decoder's business"
        );
    }
}
