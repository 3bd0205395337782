#!/usr/bin/env bash
# Runs the whole test suite, installing the real servers the tests start
# (redis-server, ZooKeeper) and the checkers of deploy/ and man/ (promtool,
# groff, systemd-analyze) and libfaketime (a client with a skewed clock) from
# Debian's packages if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v groff >/dev/null 2>&1 || need+=(groff-base)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
[ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || need+=(libfaketime)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

cargo test --release --no-fail-fast -- --test-threads=2 "$@"
