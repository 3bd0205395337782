#!/usr/bin/env bash
# What `lc-cli keys --watch` costs the service (issue 46 item 3), per
# backend, with HELD kept holds (default 1,000; PostgreSQL has no kept
# holds: PG_HELD holders running `sleep`, default 50, each a session),
# idle and with one change a second (a key taken one second, released the
# next, by a loop of `lc-cli lock`/`unlock` beside the watch):
#  - round trips per second: the watch (--interval 1s) traced by strace
#    (-ttt -yy) for WATCH seconds after a warm-up of WARM seconds (the
#    connect, the first listing and the feed's arming left out), each read
#    from a TCP socket after a write to one counted as one (a pipelined
#    batch is one; a notification the service pushes is no trip);
#  - the service's CPU per second: its utime+stime (/proc/PID/stat) over
#    the same WATCH seconds, less the same without the watch (the
#    baseline, with the same change loop or none, in the same round);
#  - one listing's wall time: `lc-cli keys` (connection included) by
#    hyperfine, against `lc-cli ping` in the same rounds.
# The built-in server is started here; the others are measured where their
# address is given (benches/services.sh: LC_BENCH_REDIS, LC_BENCH_ZK,
# LC_BENCH_ETCD, LC_BENCH_PG), the service's pid found by its port (ss).
# Redis is measured as it is configured: turn keyspace notifications on
# (`CONFIG SET notify-keyspace-events KA`) to measure its feed.
#
#   HELD=1000 WATCH=10 bash benches/watch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || apt-get install -y strace >/dev/null
. benches/builtin-server.sh
. benches/services.sh
held=${HELD:-1000}
watch=${WATCH:-10}
warm=${WARM:-3}
holders=()
changer=
trap 'kill "${holders[@]}" $changer "$server" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

# The pid listening on the port of `addr` (HOST:PORT or URL).
pid_of() {
    local port
    port=$(printf '%s' "$1" | sed -E 's#^[a-z]+://##; s#^[^@]*@##; s#[/?].*##; s#,.*##; s#.*:##')
    ss -ltnpH "sport = :$port" | sed -nE 's/.*pid=([0-9]+).*/\1/p' | head -1
}
# CPU ticks (utime+stime) of a process and its threads.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# One change a second on ADDR until killed: the key taken, then released.
changes() {
    while true; do
        "$BIN" --server "$1" lock bench-watch-change >/dev/null 2>&1; sleep 1
        "$BIN" --server "$1" unlock bench-watch-change >/dev/null 2>&1; sleep 1
    done
}

# Measures one round on ADDR (service pid SPID): prints "trips/s cpu_ms/s".
round() {
    local addr=$1 spid=$2 t0 base busy start trips
    t0=$(ticks "$spid"); sleep "$watch"; base=$(( $(ticks "$spid") - t0 ))
    start=$(date +%s.%N)
    timeout -s INT "$((warm + watch))" strace -f -ttt -yy -qq \
        -e trace=read,recvfrom,recvmsg,readv,write,sendto,sendmsg,writev -o "$dir/trace" \
        "$BIN" --server "$addr" keys --watch --json --interval 1s >"$dir/events" 2>/dev/null &
    local traced=$!
    sleep "$warm"
    t0=$(ticks "$spid"); sleep "$watch"; busy=$(( $(ticks "$spid") - t0 ))
    wait "$traced" || true
    trips=$(awk -v from="$(python3 -c "print($start + $warm)")" '$2 >= from && /<TCP(v6)?:\[/ {
            if ($0 ~ /(write|send)/) { sent = 1 }
            else if (sent && $0 !~ /= -1 EAGAIN/) { trips++; sent = 0 }
         }
         END { print trips + 0 }' "$dir/trace")
    python3 -c "print('%.1f %.1f' % ($trips / $watch, max(0, $busy - $base) * 1000 / $hz / $watch))"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %6s %12s %12s %14s %14s %18s\n' backend held "trips/s idle" "cpu ms/s idle" \
    "trips/s 1chg/s" "cpu ms/s 1chg/s" "keys/ping (wall)"
for entry in "${servers[@]}"; do
    name=${entry%%=*}
    addr=${entry#*=}
    spid=$server
    [ "$name" = builtin ] || spid=$(pid_of "$addr")
    n=$held
    if [ "$name" = postgresql ]; then
        n=${PG_HELD:-50}
        for i in $(seq "$n"); do
            "$BIN" --server "$addr" lock "bench-watch-$i" -- sleep 3600 &
            holders+=($!)
        done
        sleep 3
    else
        for i in $(seq "$n"); do "$BIN" --server "$addr" lock "bench-watch-$i" 2>/dev/null; done
    fi
    listed=$("$BIN" --server "$addr" keys 'bench-watch-*' --json | wc -l)
    [ "$listed" -eq "$n" ] || { echo "$name: $listed of $n held" >&2; exit 1; }
    read -r idle_trips idle_cpu < <(round "$addr" "$spid")
    changes "$addr" &
    changer=$!
    read -r chg_trips chg_cpu < <(round "$addr" "$spid")
    kill "$changer"; wait "$changer" 2>/dev/null || true; changer=
    "$BIN" --server "$addr" unlock bench-watch-change >/dev/null 2>&1 || true
    hyperfine -N --style none --warmup 3 --runs "${RUNS:-20}" --export-json "$dir/$name.json" \
        -n keys "$BIN --server $addr keys" -n ping "$BIN --server $addr ping" \
        >/dev/null 2>"$dir/hf.err" || { cat "$dir/hf.err" >&2; exit 1; }
    wall=$(python3 -c 'import json,sys; r={x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}; print("%.1f ms / %.1f ms" % (r["keys"]*1e3, r["ping"]*1e3))' "$dir/$name.json")
    printf '%-11s %6s %12s %12s %14s %14s %18s\n' "$name" "$n" "$idle_trips" "$idle_cpu" \
        "$chg_trips" "$chg_cpu" "$wall"
    if [ "$name" = postgresql ]; then
        kill "${holders[@]}" 2>/dev/null || true
        holders=()
    else
        "$BIN" --server "$addr" reset $(seq -f 'bench-watch-%g' "$n") >/dev/null
    fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
