// Any path ending in `Result` works as the return type: `soorma::Result<T>` (error type
// `soorma::Error`), `std::result::Result<T, E>`, ...
use soorma::prelude::*;

/// Counts the words in a text.
#[on_invoke("words.count", agent = "counter")]
async fn count_words(req: Invocation<String>) -> soorma::Result<usize> {
    Ok(req.data.split_whitespace().count())
}

/// Lists the words in a text.
#[on_invoke("words.split", agent = "counter")]
async fn split_words(req: Invocation<String>) -> std::result::Result<Vec<String>, soorma::Error> {
    Ok(req.data.split_whitespace().map(str::to_owned).collect())
}

/// Reports nothing (a unit result).
#[on_invoke("words.noop", agent = "counter")]
async fn noop(_req: Invocation) -> ::core::result::Result<(), ToolError> {
    Ok(())
}

fn main() {
    let _ = (count_words, split_words, noop);
}
