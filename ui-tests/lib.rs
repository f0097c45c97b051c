//! Compile-time (trybuild) tests of the soorma handler attributes; see `tests/ui.rs`.
