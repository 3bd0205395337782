# Sourced by the benchmark scripts (from the project's root): hyperfine,
# the release binary in BIN (built unless BIN is given), a temp dir in
# `dir`, and `lc-cli serve` started there on a free loopback port, its
# address in `addr`; the server stopped and the dir removed at exit.
command -v hyperfine >/dev/null || apt-get install -y hyperfine >/dev/null
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/lc-cli"
fi
dir="$(mktemp -d)"
"$BIN" serve --listen 127.0.0.1:0 >"$dir/addr" 2>"$dir/serve.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/addr" ] && break; sleep 0.05; done
addr="$(sed -n 's/^listening on //p' "$dir/addr")"
