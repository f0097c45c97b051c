//! Small runtime helpers: ids, timestamps, panic capture.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A new unique, unguessable id: 128 bits, 122 of them random from the OS RNG (a UUID v4),
/// as 32 lowercase hex digits. Ids name tasks, events and de-duplication keys that other
/// tenants must not predict, so they carry no process seed and no counter.
pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The most bytes of a reason or error message the SDK copies into a dead letter, a notice or
/// an error reply: text derived from hostile input (a decode error quoting a huge payload)
/// must not make those messages large.
pub(crate) const MAX_REASON_BYTES: usize = 1024;

/// `text` cut to at most `max` bytes (at a character boundary, ending in `…` when cut).
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

/// `bytes` in lowercase hex, two digits each.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// SHA-256 of `parts` (each length-prefixed, so no two lists of parts give the same input),
/// hex.
pub(crate) fn digest(parts: &[&[u8]]) -> String {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hex(&hash.finalize())
}

/// The current time as RFC 3339 UTC with milliseconds (`2026-11-21T10:00:00.123Z`).
pub(crate) fn now_rfc3339() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_rfc3339(d.as_secs(), d.subsec_millis())
}

/// The time `after` from now, as RFC 3339 UTC with milliseconds.
pub(crate) fn rfc3339_after(after: std::time::Duration) -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after);
    format_rfc3339(d.as_secs(), d.subsec_millis())
}

/// A time in milliseconds since the Unix epoch, as RFC 3339 UTC with milliseconds.
pub(crate) fn rfc3339_of_millis(ms: u64) -> String {
    format_rfc3339(ms / 1000, u32::try_from(ms % 1000).unwrap_or(0))
}

fn format_rfc3339(secs: u64, millis: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (h, min, sec) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let Ok(year @ 0..=9999) = u32::try_from(y) else {
        return format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}.{millis:03}Z");
    };
    // Written digit by digit: every event is stamped, and `format!` costs more than the rest.
    let mut out = [0u8; 24];
    let mut put = |at: usize, value: u32, width: u32| {
        for i in 0..width {
            let digit = (value / 10u32.pow(width - 1 - i)) % 10;
            out[at + i as usize] = b'0' + digit as u8;
        }
    };
    put(0, year, 4);
    put(5, m, 2);
    put(8, d, 2);
    put(11, h as u32, 2);
    put(14, min as u32, 2);
    put(17, sec as u32, 2);
    put(20, millis.min(999), 3);
    for (at, sep) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (23, b'Z'),
    ] {
        out[at] = sep;
    }
    out.iter().map(|&b| char::from(b)).collect()
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Runs `f` over `items` with at most `limit` in flight, keeping the input order of results.
/// Stops at (and returns) the first error.
pub(crate) async fn concurrently<T, R, F, Fut>(
    items: Vec<T>,
    limit: usize,
    f: F,
) -> crate::error::Result<Vec<R>>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = crate::error::Result<R>> + Send + 'static,
{
    let total = items.len();
    if total <= 1 {
        // Nothing to overlap: no task to spawn.
        let mut out = Vec::with_capacity(total);
        for item in items {
            out.push(f(item).await?);
        }
        return Ok(out);
    }
    let mut out: Vec<Option<R>> = (0..total).map(|_| None).collect();
    let mut set = tokio::task::JoinSet::new();
    let mut items = items.into_iter().enumerate();
    let spawn = |set: &mut tokio::task::JoinSet<(usize, crate::error::Result<R>)>,
                 (i, item): (usize, T)| {
        let f = f.clone();
        set.spawn(async move { (i, f(item).await) });
    };
    for item in items.by_ref().take(limit.max(1)) {
        spawn(&mut set, item);
    }
    while let Some(joined) = set.join_next().await {
        let (i, r) = joined.map_err(|e| {
            crate::error::Error::Handler(format!("a concurrent step panicked: {e}"))
        })?;
        out[i] = Some(r?);
        if let Some(item) = items.next() {
            spawn(&mut set, item);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; waiting for Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Polls a future, turning a panic inside it into `Err(message)`.
pub(crate) struct CatchUnwind<F>(pub(crate) F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

/// Which group of a table that tenants share gives up an entry when the table is full: the one
/// holding the most, and of those holding as many, the one whose oldest entry came first, so
/// that one tenant's flood pushes out its own entries, not another's. `groups` yields each
/// group, how many entries it holds and when its oldest came (any order that sorts by age).
///
/// ```text
/// heaviest([("acme", 3, 7), ("globex", 3, 2), ("initech", 1, 1)]) == Some("globex")
/// ```
pub(crate) fn heaviest<G, A: Ord>(groups: impl IntoIterator<Item = (G, usize, A)>) -> Option<G> {
    groups
        .into_iter()
        .max_by(|(_, a_len, a_oldest), (_, b_len, b_oldest)| {
            a_len.cmp(b_len).then_with(|| b_oldest.cmp(a_oldest))
        })
        .map(|(group, _, _)| group)
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// A set remembering the last `capacity` values inserted (the oldest forgotten first): which
/// event ids a read model applied already, say, within a bound.
#[derive(Debug)]
pub(crate) struct RecentSet<T> {
    set: std::collections::HashSet<T>,
    order: std::collections::VecDeque<T>,
    capacity: usize,
}

impl<T: std::hash::Hash + Eq + Clone> RecentSet<T> {
    /// An empty set remembering at most `capacity` values (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            set: std::collections::HashSet::new(),
            order: std::collections::VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// How many values it remembers.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it remembers `value`.
    #[cfg_attr(not(feature = "nats"), allow(dead_code))]
    pub(crate) fn contains(&self, value: &T) -> bool {
        self.set.contains(value)
    }

    /// Inserts `value`; whether it was not remembered already.
    pub(crate) fn insert(&mut self, value: T) -> bool {
        if self.set.contains(&value) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.set.insert(value.clone());
        self.order.push_back(value);
        true
    }
}

/// The events a read model applied lately, by scope (a plan, a run) and event id, remembered
/// as hashes (a few bytes each, however long the ids), the last `capacity` of them.
pub(crate) struct SeenIds {
    hasher: std::collections::hash_map::RandomState,
    seen: RecentSet<u64>,
}

impl SeenIds {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            hasher: std::collections::hash_map::RandomState::new(),
            seen: RecentSet::new(capacity),
        }
    }

    /// How many events it remembers.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether event `id` of `scope` is seen for the first time (lately).
    pub(crate) fn first(&mut self, scope: &str, id: &str) -> bool {
        use std::hash::BuildHasher;
        self.seen.insert(self.hasher.hash_one((scope, id)))
    }
}

/// The length of `value`'s JSON when it is at most `max` bytes (`None` when longer; the
/// counting stops there, so a huge value costs no more than `max` bytes of writing).
pub(crate) fn json_len_within(value: &serde_json::Value, max: usize) -> Option<usize> {
    struct Counter {
        written: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.written += buf.len();
            if self.written > self.max {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { written: 0, max };
    serde_json::to_writer(&mut counter, value)
        .ok()
        .map(|()| counter.written)
}

#[cfg(test)]
mod tests {
    #[test]
    fn digests_separate_their_parts() {
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[b"x"]).len(), 64);
    }

    #[test]
    fn the_heaviest_group_is_the_one_holding_the_most_then_the_oldest() {
        assert_eq!(
            heaviest([("acme", 3, 7), ("globex", 3, 2), ("initech", 1, 1)]),
            Some("globex")
        );
        assert_eq!(heaviest([("acme", 4, 7), ("globex", 3, 2)]), Some("acme"));
        assert_eq!(heaviest::<&str, u64>([]), None);
    }

    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            format_rfc3339(1_795_000_000, 999),
            "2026-11-18T11:06:40.999Z"
        );
        assert_eq!(format_rfc3339(4_102_444_799, 0), "2099-12-31T23:59:59.000Z");
        assert_eq!(
            format_rfc3339(253_402_300_799, 7),
            "9999-12-31T23:59:59.007Z"
        );
        assert_eq!(
            format_rfc3339(253_402_300_800, 0),
            "10000-01-01T00:00:00.000Z"
        );
        // Digit by digit, as `format!` would write them.
        for secs in (0..4_102_444_800u64).step_by(7_777_777) {
            let (y, m, d) = civil_from_days((secs / 86_400) as i64);
            let r = secs % 86_400;
            let expected = format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                r / 3600,
                (r % 3600) / 60,
                r % 60,
                secs % 1000
            );
            assert_eq!(format_rfc3339(secs, (secs % 1000) as u32), expected);
        }
    }

    #[test]
    fn bounded_text_is_cut_at_a_char_boundary() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(bounded("exactly10!", 10), "exactly10!");
        let cut = bounded(&"é".repeat(1000), 101);
        assert!(cut.len() <= 101 && cut.ends_with('…'), "{}", cut.len());
        assert!(cut.starts_with("éé"));
        assert_eq!(
            bounded(&"x".repeat(5000), MAX_REASON_BYTES).len(),
            MAX_REASON_BYTES
        );
    }

    #[test]
    fn ids_are_unique_and_hex() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(
            ids.iter()
                .all(|i| i.len() == 32 && i.chars().all(|c| c.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn ids_share_no_predictable_part() {
        // A seed-plus-counter id repeats its first half within a process; a random one does not,
        // and no 8-digit window of one id predicts the same window of the next.
        let ids: Vec<String> = (0..1_000).map(|_| new_id()).collect();
        for window in [0..8, 8..16, 16..24, 24..32] {
            let distinct: std::collections::HashSet<&str> =
                ids.iter().map(|i| &i[window.clone()]).collect();
            assert!(
                distinct.len() > 990,
                "window {window:?} repeats: {}",
                distinct.len()
            );
        }
    }

    #[test]
    fn catch_unwind_reports_panics() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ok = rt.block_on(CatchUnwind(Box::pin(async { 7 })));
        assert_eq!(ok, Ok(7));
        let fut: BoxFuture<'static, ()> = Box::pin(async { panic!("boom {}", 1) });
        let err = rt.block_on(CatchUnwind(fut));
        assert_eq!(err, Err("boom 1".to_owned()));
    }

    #[test]
    fn a_recent_set_remembers_the_last_values_inserted() {
        let mut seen = RecentSet::new(2);
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.insert("b"));
        assert!(seen.insert("c"), "past the capacity");
        assert!(seen.insert("a"), "the oldest was forgotten");
        assert!(!seen.insert("c"));
        assert!(seen.contains(&"a") && !seen.contains(&"b"));
        assert_eq!((seen.set.len(), seen.order.len()), (2, 2));
    }

    #[test]
    fn json_length_is_counted_up_to_a_limit() {
        let value = serde_json::json!({"a": [1, 2, 3]});
        assert_eq!(json_len_within(&value, 100), Some(value.to_string().len()));
        assert_eq!(json_len_within(&value, 5), None);
        let huge = serde_json::Value::String("x".repeat(1 << 20));
        assert_eq!(json_len_within(&huge, 1024), None);
    }
}
