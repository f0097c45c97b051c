//! `soorma events tail`: live events of the shared platform.

use std::collections::{HashMap, VecDeque};

use soorma::{EventEnvelope, Topic};

use crate::CliError;
use crate::output::{errln, outln};
use crate::platform::connect;

/// How many characters of an event's compact JSON data a line shows.
pub const DATA_WIDTH: usize = 120;

/// How many recent event ids `events tail` remembers to spot a copy of an event it printed.
pub const SEEN_IDS: usize = 10_000;

/// The recent event ids seen, to mark an event delivered again: the same id seen again (a
/// republish after a crash, two publishers racing), or a delivery the platform counts as a
/// redelivery. Remembers the last `capacity` ids (oldest forgotten first).
///
/// ```
/// use soorma_cli::events::Copies;
///
/// let mut copies = Copies::new(2);
/// assert_eq!(copies.count("a", 1), 1);
/// assert_eq!(copies.count("a", 1), 2); // the same id again
/// assert_eq!(copies.count("b", 3), 3); // the platform's delivery count
/// assert_eq!(copies.count("c", 1), 1);
/// assert_eq!(copies.count("a", 1), 1); // forgotten: only the last 2 ids are kept
/// ```
#[derive(Debug)]
pub struct Copies {
    counts: HashMap<String, u32>,
    order: VecDeque<String>,
    capacity: usize,
}

impl Copies {
    /// Remembers up to `capacity` ids (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            counts: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Records a delivery of the event `id`, the platform's `attempt` at delivering it (1 for
    /// a first delivery); returns how many times it has now been delivered (1: the first time).
    pub fn count(&mut self, id: &str, attempt: u32) -> u32 {
        if let Some(n) = self.counts.get_mut(id) {
            *n = n.saturating_add(1).max(attempt);
            return *n;
        }
        while self.order.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.counts.remove(&old);
            }
        }
        let n = attempt.max(1);
        self.counts.insert(id.to_owned(), n);
        self.order.push_back(id.to_owned());
        n
    }
}

/// The marker of an event delivered `copies` times (nothing for the first delivery).
///
/// ```
/// assert_eq!(soorma_cli::events::redelivered_marker(1), "");
/// assert_eq!(soorma_cli::events::redelivered_marker(2), "  (redelivered ×2)");
/// ```
pub fn redelivered_marker(copies: u32) -> String {
    if copies > 1 {
        format!("  (redelivered ×{copies})")
    } else {
        String::new()
    }
}

/// What to tail and how to print it.
#[derive(Debug, Clone, Default)]
pub struct TailOptions {
    /// Only this topic.
    pub topic: Option<Topic>,
    /// Only these event types (empty: every type).
    pub events: Vec<String>,
    /// Only this correlation id.
    pub correlation: Option<String>,
    /// One JSON envelope per line instead of a readable line.
    pub json: bool,
}

impl TailOptions {
    /// Whether an event passes the filters (the topic is filtered by the subscription).
    ///
    /// ```
    /// use soorma::{EventEnvelope, Topic};
    /// use soorma_cli::events::TailOptions;
    ///
    /// let only = TailOptions { events: vec!["order.placed".into()], ..Default::default() };
    /// assert!(only.matches(&EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")));
    /// assert!(!only.matches(&EventEnvelope::new("e2", "shop", Topic::BusinessFacts, "order.paid")));
    /// ```
    pub fn matches(&self, env: &EventEnvelope) -> bool {
        (self.topic.is_none() || self.topic == Some(env.topic))
            && (self.events.is_empty() || self.events.contains(&env.event_type))
            && self
                .correlation
                .as_ref()
                .is_none_or(|c| env.correlation_id.as_deref() == Some(c.as_str()))
    }

    fn describe(&self) -> String {
        let mut what = match self.topic {
            Some(t) => format!("events on {t}"),
            None => "events on every topic".to_owned(),
        };
        if !self.events.is_empty() {
            what.push_str(&format!(" of type {}", self.events.join(" or ")));
        }
        if let Some(c) = &self.correlation {
            what.push_str(&format!(" with correlation id {c}"));
        }
        what
    }
}

/// Streams the shared platform's events to stdout until Ctrl-C or SIGTERM.
///
/// Prints `tailing ...` on stderr once the subscription is live; events published from then on
/// are printed. A closed stdout (`soorma events tail | head`) ends the command with
/// [`CliError::StdoutClosed`], which the binary turns into a quiet exit with status 0.
pub async fn tail(options: TailOptions) -> Result<(), CliError> {
    let connected = connect("events tail").await?;
    let mut events = connected.platform.bus().observe(options.topic).await?;
    errln!(
        "tailing {} on {}; Ctrl-C to stop",
        options.describe(),
        connected.url
    );
    let signal = crate::shutdown_signal();
    tokio::pin!(signal);
    let mut copies = Copies::new(SEEN_IDS);
    loop {
        let delivery = tokio::select! {
            _ = &mut signal => return Ok(()),
            delivery = events.next() => delivery,
        };
        let Some(delivery) = delivery else {
            return Err(CliError::StreamEnded(connected.url));
        };
        let env = &delivery.envelope;
        if !options.matches(env) {
            continue;
        }
        let n = copies.count(&env.id, delivery.attempt);
        let line = if options.json {
            json_line(env, n).map_err(|source| CliError::Json {
                what: "an event",
                source,
            })?
        } else {
            format!("{}{}", format_line(env), redelivered_marker(n))
        };
        outln!("{line}")?;
    }
}

/// The envelope as one JSON line; an event delivered more than once also has
/// `"redelivered": <copies>`.
///
/// ```
/// use soorma::{EventEnvelope, Topic};
///
/// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed");
/// assert!(!soorma_cli::events::json_line(&env, 1)?.contains("redelivered"));
/// assert!(soorma_cli::events::json_line(&env, 2)?.contains(r#""redelivered":2"#));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn json_line(env: &EventEnvelope, copies: u32) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(env)?;
    if copies > 1
        && let serde_json::Value::Object(map) = &mut value
    {
        map.insert("redelivered".into(), copies.into());
    }
    serde_json::to_string(&value)
}

/// One readable line: time, topic, event type, source, correlation id and compact data
/// (at most [`DATA_WIDTH`] characters).
///
/// ```
/// use soorma::{EventEnvelope, Topic};
///
/// let env = EventEnvelope::new("e1", "shop", Topic::BusinessFacts, "order.placed")
///     .with_time("2026-05-01T12:34:56.789Z")
///     .with_correlation_id("c-1")
///     .with_data(serde_json::json!({"order": 7}));
/// assert_eq!(
///     soorma_cli::events::format_line(&env),
///     r#"12:34:56.789 business-facts      order.placed             from shop  corr c-1  {"order":7}"#
/// );
/// ```
pub fn format_line(env: &EventEnvelope) -> String {
    let time = env
        .time
        .as_deref()
        .map(|t| {
            let t = t.split_once('T').map_or(t, |(_, time)| time);
            t.trim_end_matches('Z')
        })
        .unwrap_or("-");
    let data = serde_json::to_string(&env.data).unwrap_or_default();
    format!(
        "{time} {:<19} {:<24} from {}  corr {}  {}",
        env.topic.as_str(),
        env.event_type,
        env.source,
        env.correlation_id.as_deref().unwrap_or("-"),
        truncate(&data, DATA_WIDTH)
    )
}

/// `text` cut to at most `max` characters, ending in `…` when cut.
///
/// ```
/// assert_eq!(soorma_cli::events::truncate("abcdef", 4), "abc…");
/// assert_eq!(soorma_cli::events::truncate("abc", 4), "abc");
/// ```
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
