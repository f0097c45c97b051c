//! Compile-time (UI) tests for the handler attributes `#[on_event]`, `#[on_invoke]`,
//! `#[on_task]`, `#[on_result]`, `#[on_goal]` and `#[on_transition]`, run with [`trybuild`].
//!
//! Layout: `ui/<attribute>/pass/*.rs` must compile (and run), `ui/<attribute>/fail/*.rs` must
//! fail to compile with exactly the diagnostics in the `.stderr` file next to it.
//! `ui/builder/pass/` covers the run-time builder API (`Handler::on_invoke(..)` etc.).
//!
//! Run with `cargo test -p soorma-ui-tests --test ui`. After changing a diagnostic (or adding a
//! fail case), regenerate the expected output and review the diff:
//!
//! ```text
//! TRYBUILD=overwrite cargo test -p soorma-ui-tests --test ui
//! ```
//!
//! The expected output depends on the compiler version (the workspace's `rust-version` and
//! newer stable releases usually agree, but wording of rustc's own errors may drift).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/*/pass/*.rs");
    t.compile_fail("ui/*/fail/*.rs");
}
