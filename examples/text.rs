//! Tiny deterministic text analyses used by the research example's analyzer tools.

const POSITIVE: &[&str] = &[
    "good",
    "great",
    "fast",
    "safe",
    "reliable",
    "love",
    "excellent",
    "happy",
];
const NEGATIVE: &[&str] = &[
    "bad", "slow", "unsafe", "bug", "crash", "hate", "poor", "sad",
];

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
}

/// A sentiment score in -1.0..=1.0 from a small word list.
///
/// ```
/// assert!(soorma_examples::text::sentiment("great and reliable") > 0.0);
/// ```
pub fn sentiment(text: &str) -> f64 {
    let (mut pos, mut neg) = (0i32, 0i32);
    for w in words(text) {
        let w = w.to_lowercase();
        if POSITIVE.contains(&w.as_str()) {
            pos += 1;
        } else if NEGATIVE.contains(&w.as_str()) {
            neg += 1;
        }
    }
    if pos + neg == 0 {
        0.0
    } else {
        f64::from(pos - neg) / f64::from(pos + neg)
    }
}

/// Capitalised words that do not start a sentence, deduplicated, in order.
///
/// ```
/// assert_eq!(soorma_examples::text::entities("We met Ada and Linus. Then Ada left."), ["Ada", "Linus"]);
/// ```
pub fn entities(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for sentence in text.split(['.', '!', '?']) {
        for w in words(sentence).skip(1) {
            if w.chars().next().is_some_and(char::is_uppercase) && !out.iter().any(|e| e == w) {
                out.push(w.to_owned());
            }
        }
    }
    out
}

/// The first sentence, at most `max_words` words.
///
/// ```
/// assert_eq!(soorma_examples::text::summary("Rust is fast. It is safe.", 10), "Rust is fast.");
/// ```
pub fn summary(text: &str, max_words: usize) -> String {
    let first = text
        .split_inclusive(['.', '!', '?'])
        .next()
        .unwrap_or("")
        .trim();
    let ws: Vec<&str> = first.split_whitespace().collect();
    if ws.len() <= max_words {
        first.to_owned()
    } else {
        format!("{}…", ws[..max_words].join(" "))
    }
}
