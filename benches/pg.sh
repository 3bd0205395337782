#!/usr/bin/env bash
# The PostgreSQL backend against a private PostgreSQL on 127.0.0.1 (fsync
# off, in a temp dir, as the tests run it):
#   1. `lc-cli lock k -- true` against `flock FILE true` and `true`: the
#      mean of RUNS (300) runs each, one after the other, in one run of this
#      script (the ratio to flock is the figure);
#   2. hand-off latency with 1, 16 and 64 waiters: W lc-cli waiters queue
#      behind a holder, each command logs its start and end (date +%s%N),
#      and a hand-off is the time from one command's end to the next one's
#      start (lc-cli's release, the server's grant, the next lc-cli's fork
#      and exec). The figure is the 16- and 64-waiter medians over the
#      1-waiter median, measured in the same run.
#
#   bash benches/pg.sh          # as root (initdb runs as the postgres user)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin="$PWD/target/release/lc-cli"
pgbin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
dir="$(mktemp -d /dev/shm/lc-pg-bench.XXXXXX)"
chown postgres: "$dir"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
runuser -u postgres -- "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >/dev/null
runuser -u postgres -- "$pgbin/postgres" -D "$dir/data" -k "$dir" -h 127.0.0.1 -p "$port" \
    -c fsync=off -c max_connections=200 >"$dir/log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$dir"' EXIT
url="postgres://postgres@127.0.0.1:$port/postgres"
for _ in $(seq 200); do "$bin" --server "$url" keys >/dev/null 2>&1 && break; sleep 0.05; done

# Mean wall time of one run of "$@" over RUNS runs (after 20 warm-up runs), in us.
per_run() {
    local runs=${RUNS:-300} t0 t1
    for _ in $(seq 20); do "$@" >/dev/null; done
    t0=$(date +%s%N)
    for _ in $(seq "$runs"); do "$@" >/dev/null; done
    t1=$(date +%s%N)
    echo $(((t1 - t0) / runs / 1000))
}

echo "== lc-cli lock k -- true against flock(1), ${RUNS:-300} runs each"
lc=$(per_run "$bin" --server "$url" lock bench -- true)
fl=$(per_run flock "$dir/flock" true)
tr=$(per_run true)
awk -v l="$lc" -v f="$fl" -v t="$tr" 'BEGIN{printf "lc-cli lock k -- true %.2f ms, flock FILE true %.2f ms, true %.2f ms: %.2fx flock\n", l/1000, f/1000, t/1000, l/f}'

# Hand-off: the holder waits for all W waiters to be queued (pg_locks
# shows them waiting), then ends; each waiter's command logs its times.
# handoff W ID: W waiters, on a key and files of run ID's own.
handoff() {
    local waiters=$1 key="h$2" log="$dir/handoff-$2" go="$dir/go-$2"
    : >"$log"
    "$bin" --server "$url" lock $key -c "while [ ! -e $go ]; do sleep 0.01; done; echo end \$(date +%s%N) >>$log" &
    local holder=$!
    for _ in $(seq 200); do
        [ "$(psql -h 127.0.0.1 -p "$port" -U postgres -Atc "select count(*) from pg_locks where locktype='advisory' and granted" postgres)" = 1 ] && break
        sleep 0.02
    done
    local pids=()
    for i in $(seq "$waiters"); do
        "$bin" --server "$url" lock $key -c "echo start \$(date +%s%N) >>$log; echo end \$(date +%s%N) >>$log" &
        pids+=($!)
    done
    for _ in $(seq 500); do
        [ "$(psql -h 127.0.0.1 -p "$port" -U postgres -Atc "select count(*) from pg_locks where locktype='advisory' and not granted" postgres)" = "$waiters" ] && break
        sleep 0.02
    done
    touch "$go"
    wait "$holder" "${pids[@]}"
    # Lines alternate end, start, end, start...: pair each end with the next start.
    awk '$1=="end"{e=$2} $1=="start" && e{print ($2-e)/1000; e=0}' "$log" >"$log.raw"
    echo "$waiters waiters: first hand-off (from the holder) $(head -1 "$log.raw") us" >&2
    sort -n "$log.raw" >"$log.us"
    local n median p99
    n=$(wc -l <"$log.us")
    median=$(awk -v n="$n" 'NR==int((n+1)/2){print; exit}' "$log.us")
    p99=$(awk -v n="$n" 'NR==int(n*0.99+0.999){print; exit}' "$log.us")
    echo "$waiters waiters: $n hand-offs, median ${median} us, p99 ${p99} us" >&2
    echo "$median"
}

echo "== hand-off latency (end of one command to start of the next)"
m1=$(handoff 1 a); m1b=$(handoff 1 b); m1c=$(handoff 1 c)
base=$(printf '%s\n' "$m1" "$m1b" "$m1c" | sort -n | sed -n 2p)
m16=$(handoff 16 d)
m64=$(handoff 64 e)
awk -v b="$base" -v a="$m16" -v c="$m64" 'BEGIN{printf "1-waiter median of 3 runs: %.0f us; 16 waiters: %.2fx; 64 waiters: %.2fx\n", b, a/b, c/b}'
