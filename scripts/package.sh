#!/usr/bin/env bash
# Publish dry run: `cargo package` for every publishable workspace member (those without
# `publish = false`, read from `cargo metadata`, so a new crate is covered without editing this),
# in one invocation, so that crates depending on each other are packaged against each other.
#
#   bash scripts/package.sh            # --no-verify: the manifests, the versions of local
#                                      # dependencies, the packaged file lists, the lock file;
#                                      # a few seconds
#   bash scripts/package.sh --verify   # also builds every packaged crate from its .crate file,
#                                      # from scratch in target/package (minutes)
#
# Without --verify the packaged crates are not compiled, so it also checks what most often
# breaks a packaged build: every file that a packaged source embeds with include_str! or
# include_bytes! (a literal path) is in the package.
set -euo pipefail
cd "$(dirname "$0")/.."

verify=false
case "${1:-}" in
    "") ;;
    --verify) verify=true ;;
    *) echo "usage: $0 [--verify]" >&2; exit 2 ;;
esac

# One line per publishable member: name, tab, crate directory.
publishable="$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
for package in meta["packages"]:
    # `publish = false` is [] here; no `publish` key is null (any registry).
    if package["id"] in members and package["publish"] != []:
        print(package["name"] + "\t" + os.path.dirname(package["manifest_path"]))
')"
[ -n "$publishable" ] || { echo "no publishable workspace members" >&2; exit 1; }

packages=()
while IFS=$'\t' read -r name _; do
    packages+=(-p "$name")
done <<< "$publishable"
echo "publishable: ${packages[*]}"

# --allow-dirty: a dirty work tree changes only the recorded VCS state, not what is checked.
if $verify; then
    cargo package --allow-dirty "${packages[@]}"
    exit 0
fi
cargo package --allow-dirty --no-verify "${packages[@]}"

while IFS=$'\t' read -r name dir; do
    cargo package --allow-dirty --list -p "$name" | python3 -c '
import os, re, sys
name, root = sys.argv[1], sys.argv[2]
files = set(sys.stdin.read().split())
include = re.compile(r"include_(?:str|bytes)!\(\s*\"([^\"]+)\"\s*\)")
missing = []
for rel in sorted(f for f in files if f.endswith(".rs")):
    with open(os.path.join(root, rel), encoding="utf-8") as source:
        for target in include.findall(source.read()):
            path = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            if path not in files:
                missing.append(f"{rel}: {target}")
if missing:
    sys.exit(f"{name}: embedded files missing from the package (add them to `include`):\n  "
             + "\n  ".join(missing))
' "$name" "$dir"
done <<< "$publishable"
echo "packaged: every embedded file is in its package"
