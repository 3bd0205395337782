#!/usr/bin/env bash
# The main job on a fresh machine: build lc-cli, start the built-in server on
# a free loopback port, run a command under a lock, stop the server.
#   bash scripts/demo.sh                  # runs: echo hello from inside the lock
#   bash scripts/demo.sh ./deploy.sh      # runs your command instead
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo's own progress: a first build takes a minute or two.
echo "building lc-cli (cargo build --release)..." >&2
cargo build --release
bin=${CARGO_TARGET_DIR:-target}/release/lc-cli
out=$(mktemp)
"$bin" serve --listen 127.0.0.1:0 >"$out" &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q '^listening on ' "$out" && break; sleep 0.05; done
export LC_SERVER=$(sed -n 's/^listening on //p' "$out")
if [ $# -eq 0 ]; then set -- echo "hello from inside the lock"; fi
"$bin" -v lock demo -- "$@"
