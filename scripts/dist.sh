#!/usr/bin/env bash
# A release archive: dist/lc-cli-VERSION-x86_64-linux.tar.gz (the binary,
# its man pages, completions, README, LICENSE and the systemd unit) and
# dist/SHA256SUMS.
#   bash scripts/dist.sh                # the usual glibc build (target/release)
#   STATIC=1 bash scripts/dist.sh       # a static-pie build: see "Static build" in docs
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
name="lc-cli-$version-x86_64-linux"
target_dir=${CARGO_TARGET_DIR:-target}
if [ "${STATIC:-0}" = 1 ]; then
  # glibc linked in: name lookups through /etc/hosts and DNS work (glibc
  # 2.34+ has both built in), other NSS modules (LDAP, mDNS) do not.
  RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu
  bin=$target_dir/x86_64-unknown-linux-gnu/release/lc-cli
  name="$name-static"
  # Shipped only if name lookups work in it: localhost and a name from
  # /etc/hosts, each as a server address for a real lock.
  out=$(mktemp)
  "$bin" serve --listen 127.0.0.1:0 >"$out" 2>/dev/null &
  server=$!
  for _ in $(seq 100); do grep -q '^listening on ' "$out" && break; sleep 0.05; done
  port=$(sed -n 's/^listening on 127.0.0.1://p' "$out")
  named=$(awk '$1 ~ /^127\./ { for (i = 2; i <= NF; i++) if ($i != "localhost") { print $i; exit } }' /etc/hosts)
  for host in localhost ${named:-}; do
    if ! "$bin" --server "$host:$port" lock static-check -- true; then
      kill "$server"; rm -f "$out"
      echo "the static build cannot look up '$host': not shipped" >&2
      exit 1
    fi
    echo "static build: '$host' resolved and locked"
  done
  kill "$server"; rm -f "$out"
else
  cargo build --release --locked
  bin=$target_dir/release/lc-cli
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
mkdir -p "$root/man" "$root/completions"
install -m 0755 "$bin" "$root/lc-cli"
install -m 0644 man/*.1 "$root/man/"
install -m 0644 completions/lc-cli.bash completions/_lc-cli completions/lc-cli.fish "$root/completions/"
install -m 0644 README.md LICENSE deploy/lc-cli-serve.service "$root/"
cp -r docs "$root/docs"
mkdir -p dist
# Reproducible: sorted names, fixed owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' \
  -C "$stage" -czf "dist/$name.tar.gz" "$name"
(cd dist && sha256sum ./*.tar.gz | sed 's| \./| |' > SHA256SUMS)
echo "dist/$name.tar.gz"
