#!/usr/bin/env bash
# What a deploy queue's rules cost an uncontended lock (issue 44): per
# backend, `lc-cli lock --newest --order N k -- true` against the plain
# `lc-cli lock k -- true`, in the same rounds, as
#  - round trips: lc-cli traced by strace (-yy), each time it reads from a
#    TCP socket after writing to one counted as one round trip (a request
#    pipelined behind another is not one more); the median of 5 runs;
#  - wall time: ROUNDS hyperfine rounds (no shell, -N) of RUNS runs of both
#    commands, the ratio queue/plain per round and its median.
# The built-in server is started here; the others are measured where their
# address is given (benches/services.sh: LC_BENCH_REDIS, LC_BENCH_ZK,
# LC_BENCH_ETCD, LC_BENCH_PG):
#
#   BIN=path/lc-cli ROUNDS=5 RUNS=200 bash benches/queue.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || apt-get install -y strace >/dev/null
. benches/builtin-server.sh
. benches/services.sh

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %12s %12s %14s\n' backend "plain trips" "queue trips" "queue/plain"
for entry in "${servers[@]}"; do
    name=${entry%%=*}
    addr=${entry#*=}
    key="bench-queue-$name-$$"
    plain=(--server "$addr" lock "$key" -- true)
    queue=(--server "$addr" lock --newest --order 7 "$key" -- true)
    # The mark is 7 from the first queued run on: each run's order equals it.
    "$BIN" "${queue[@]}"
    p=$(for _ in 1 2 3 4 5; do round_trips "${plain[@]}"; done | median)
    q=$(for _ in 1 2 3 4 5; do round_trips "${queue[@]}"; done | median)
    ratios=()
    for round in $(seq "${ROUNDS:-3}"); do
        hyperfine -N --style none --warmup 20 --runs "${RUNS:-100}" \
            --export-json "$dir/$name-$round.json" \
            -n plain "$BIN ${plain[*]}" -n queue "$BIN ${queue[*]}" >/dev/null 2>"$dir/hf.err" ||
            { cat "$dir/hf.err" >&2; exit 1; }
        ratios+=("$(python3 -c 'import json,sys; r={x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}; print("%.3f" % (r["queue"] / r["plain"]))' "$dir/$name-$round.json")")
    done
    med=$(printf '%s\n' "${ratios[@]}" | median)
    printf '%-11s %12s %12s %9sx  (rounds: %s)\n' "$name" "$p" "$q" "$med" "${ratios[*]}"
    "$BIN" --server "$addr" mark --clear "$key" >/dev/null 2>&1 || true
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
