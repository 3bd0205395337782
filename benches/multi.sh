#!/usr/bin/env bash
# Several keys at once (issue 45, item 3): an uncontended two-key lock
# (`lock a --and b -- true`) against two one-key locks in a row (`lock a --
# true; lock b -- true`), with one one-key lock as the baseline, all three
# in the same rounds, on the built-in server (or on SERVER=URL, any
# backend: `SERVER=redis://127.0.0.1:6379 bash benches/multi.sh`).
# Prints each one's mean and its ratio to the baseline.
# Run from the project's root: `bash benches/multi.sh` (ROUNDS=200).
set -euo pipefail
command -v hyperfine >/dev/null || apt-get install -y hyperfine >/dev/null
if [ -z "${SERVER:-}" ]; then
    . benches/builtin-server.sh
    SERVER="$addr"
else
    BIN="${BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/lc-cli}"
fi
S="--server $SERVER"
hyperfine -N --warmup 20 --runs "${ROUNDS:-200}" \
    -n one-key "$BIN $S lock bench/a -- true" \
    -n two-keys "$BIN $S lock bench/a --and bench/b -- true" \
    -n one-then-one "sh -c '$BIN $S lock bench/a -- true && $BIN $S lock bench/b -- true'"
