#!/usr/bin/env bash
# The Python wheel that carries lc-cli's binary (pyproject.toml, maturin):
# built, installed into a fresh virtual environment, tried there (its
# --version and a real lock against its own `lc-cli serve` on 127.0.0.1),
# and the GitHub Action's step (action/run.sh) run with that wheel as what
# it installs. Prints the wheel's name, tag and size. Writes the wheel to
# dist/ (CARGO_TARGET_DIR as for cargo: .ci/run's cached one there).
# maturin comes from PyPI if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v maturin >/dev/null 2>&1 || pip3 install -q --break-system-packages maturin
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

work=$(mktemp -d)
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p dist
rm -f dist/lc_cli-*.whl
maturin build --release --locked --out dist
wheel=$(ls dist/lc_cli-"$version"-*.whl)
# The tag pyproject.toml asks for, which maturin checked the binary against
# (as auditwheel does): the glibc its symbols need.
case $wheel in
  *-py3-none-manylinux_2_35_x86_64.whl) ;;
  *) echo "unexpected wheel name: $wheel" >&2; exit 1 ;;
esac

# A fresh virtual environment, the wheel alone (no index: it has no
# dependencies).
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
lc=$work/venv/bin/lc-cli
[ "$("$lc" --version)" = "lc-cli $version" ] || { echo "wrong --version: $("$lc" --version)" >&2; exit 1; }

# Its server on a free port of 127.0.0.1, its client takes a lock there.
"$lc" serve --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
server=$!
for _ in $(seq 100); do grep -q '^listening on ' "$work/serve.out" && break; sleep 0.05; done
port=$(sed -n 's/^listening on 127.0.0.1://p' "$work/serve.out")
[ -n "$port" ] || { echo "lc-cli serve from the wheel did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
"$lc" --server "127.0.0.1:$port" lock wheel-check -- sh -c 'echo "$LC_KEY" >"$0"' "$work/ran"
[ "$(cat "$work/ran")" = wheel-check ] || { echo "the command did not run under the lock" >&2; exit 1; }
status=0
"$lc" --server "127.0.0.1:$port" lock wheel-check -- sh -c 'exit 7' || status=$?
[ "$status" = 7 ] || { echo "exit status $status, not the command's 7" >&2; exit 1; }

# The Action's step, installing this wheel instead of lc-cli==VERSION from
# PyPI, into a venv of its own (under RUNNER_TEMP as on a runner).
mkdir "$work/runner"
INPUT_KEY=wheel-check INPUT_RUN='echo "action ran under $LC_KEY" >"$ACTION_OUT"' \
  INPUT_SERVER="127.0.0.1:$port" INPUT_VERSION="$version" RUNNER_TEMP="$work/runner" \
  LC_CLI_ACTION_PACKAGE="$PWD/$wheel" ACTION_OUT="$work/action" \
  bash action/run.sh
[ "$(cat "$work/action")" = "action ran under wheel-check" ] || { echo "the action's command did not run" >&2; exit 1; }
[ -x "$work/runner/lc-cli-$version/bin/lc-cli" ] || { echo "the action did not install the wheel" >&2; exit 1; }

size=$(stat -c %s "$wheel")
binary=$(stat -c %s "$work/venv/bin/lc-cli")
echo "wheel: $wheel: $(awk -v w="$size" -v b="$binary" 'BEGIN { printf "%d bytes (%.1f MiB; the binary in it %.1f MiB)", w, w / 1048576, b / 1048576 }')"
echo "wheel checked: installed in a fresh venv, --version, a lock from its own server, exit status 7 passed through, the action's install step"
