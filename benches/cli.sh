#!/usr/bin/env bash
# The wall time of `lc-cli lock k -- true` against the built-in server
# (release build, on 127.0.0.1), of `flock FILE true`, and of `true` alone,
# measured in one hyperfine run. Target: lc-cli within 2x of flock(1).
#
#   bash benches/cli.sh            # builds the release binary first
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hyperfine >/dev/null || apt-get install -y hyperfine >/dev/null
cargo build --release --quiet
bin="$PWD/target/release/lc-cli"
dir="$(mktemp -d)"
"$bin" serve --listen 127.0.0.1:0 >"$dir/addr" 2>"$dir/serve.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.05; done
addr="$(sed -n 's/^listening on //p' "$dir/addr")"
hyperfine -N --warmup 50 --runs "${RUNS:-500}" \
    -n lc-cli "$bin --server $addr lock bench -- true" \
    -n flock "flock $dir/flock true" \
    -n true "true" \
    "$@"
