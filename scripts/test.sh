#!/usr/bin/env bash
# The whole test suite: unit, integration, UI (trybuild) and doc tests, the examples run
# end to end on the embedded platform, clippy (-D warnings) and rustdoc (-D warnings).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace

echo "== examples (embedded platform)"
for example in hello_tool business_facts research_fanout; do
    echo "-- $example"
    timeout 60 "target/debug/examples/$example"
done

echo "== clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== all checks passed"
