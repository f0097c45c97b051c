use soorma::prelude::*;

/// Displays, but is not an error.
struct Oops;

impl std::fmt::Display for Oops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("oops")
    }
}

#[on_task("research.requested")]
async fn research(_task: TaskContext<String>) -> Result<(), Oops> {
    Err(Oops)
}

fn main() {}
