#!/usr/bin/env bash
# What `lc-cli keys --watch` costs the service (issue 46 item 3), per
# backend, with HELD kept holds (default 1,000; PostgreSQL has no kept
# holds: PG_HELD holders running `sleep`, default 50, each a session):
#  - round trips per refresh: the watch traced by strace (-yy) for WATCH
#    seconds at --interval 1s, each read from a TCP socket after a write
#    to one counted as one (a pipelined batch is one), divided by the
#    refreshes;
#  - the service's CPU per refresh: its utime+stime (/proc/PID/stat) over
#    WATCH seconds with the watch, less the same over WATCH seconds
#    without (the baseline, in the same round), divided by the refreshes;
#  - one listing's wall time: `lc-cli keys` (connection included) by
#    hyperfine, against `lc-cli ping` in the same rounds.
# The built-in server is started here; the others are measured where their
# address is given (benches/services.sh: LC_BENCH_REDIS, LC_BENCH_ZK,
# LC_BENCH_ETCD, LC_BENCH_PG), the service's pid found by its port (ss).
#
#   HELD=1000 WATCH=10 bash benches/watch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || apt-get install -y strace >/dev/null
. benches/builtin-server.sh
. benches/services.sh
held=${HELD:-1000}
watch=${WATCH:-10}
holders=()
trap 'kill "${holders[@]}" "$server" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

# The pid listening on the port of `addr` (HOST:PORT or URL).
pid_of() {
    local port
    port=$(printf '%s' "$1" | sed -E 's#^[a-z]+://##; s#^[^@]*@##; s#[/?].*##; s#,.*##; s#.*:##')
    ss -ltnpH "sport = :$port" | sed -nE 's/.*pid=([0-9]+).*/\1/p' | head -1
}
# CPU ticks (utime+stime) of a process and its threads.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %6s %14s %16s %18s\n' backend held "trips/refresh" "service ms/refresh" "keys/ping (wall)"
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
    # Without the watch, then with it, the same length.
    t0=$(ticks "$spid"); sleep "$watch"; idle=$(( $(ticks "$spid") - t0 ))
    t0=$(ticks "$spid")
    timeout -s INT "$watch" strace -f -yy -qq \
        -e trace=read,recvfrom,recvmsg,readv,write,sendto,sendmsg,writev -o "$dir/trace" \
        "$BIN" --server "$addr" keys --watch --json --interval 1s >"$dir/events" 2>/dev/null || true
    busy=$(( $(ticks "$spid") - t0 ))
    trips=$(awk '/<TCP(v6)?:\[/ {
            if ($0 ~ /(write|send)/) { sent = 1 }
            else if (sent && $0 !~ /= -1 EAGAIN/) { trips++; sent = 0 }
         }
         END { print trips + 0 }' "$dir/trace")
    per_trip=$(python3 -c "print('%.1f' % ($trips / $watch))")
    per_cpu=$(python3 -c "print('%.1f' % (max(0, $busy - $idle) * 1000 / $hz / $watch))")
    hyperfine -N --style none --warmup 3 --runs "${RUNS:-20}" --export-json "$dir/$name.json" \
        -n keys "$BIN --server $addr keys" -n ping "$BIN --server $addr ping" \
        >/dev/null 2>"$dir/hf.err" || { cat "$dir/hf.err" >&2; exit 1; }
    wall=$(python3 -c 'import json,sys; r={x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}; print("%.1f ms / %.1f ms" % (r["keys"]*1e3, r["ping"]*1e3))' "$dir/$name.json")
    printf '%-11s %6s %14s %16s %18s\n' "$name" "$n" "$per_trip" "$per_cpu" "$wall"
    if [ "$name" = postgresql ]; then
        kill "${holders[@]}" 2>/dev/null || true
        holders=()
    else
        "$BIN" --server "$addr" reset $(seq -f 'bench-watch-%g' "$n") >/dev/null
    fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
