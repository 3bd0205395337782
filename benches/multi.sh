#!/usr/bin/env bash
# Several keys at once (issue 45, item 3), per backend: an uncontended
# two-key lock (`lock a --and b -- true`) against two one-key locks in a
# row (`lock a -- true; lock b -- true`, one shell running both), with one
# one-key lock for scale, in the same rounds, as
#  - round trips: lc-cli traced by strace (-yy), as in benches/queue.sh
#    (benches/services.sh's `round_trips`), the median of 5 runs;
#  - wall time: ROUNDS hyperfine rounds of RUNS runs of the three, the
#    ratio two-keys/one-then-one per round and its median.
# The built-in server is started here; the others are measured where their
# address is given (benches/services.sh: LC_BENCH_REDIS, LC_BENCH_ZK,
# LC_BENCH_ETCD, LC_BENCH_PG):
#
#   BIN=path/lc-cli ROUNDS=3 RUNS=100 bash benches/multi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || apt-get install -y strace >/dev/null
. benches/builtin-server.sh
. benches/services.sh

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-11s %9s %10s %14s %22s\n' backend "one trips" "two trips" "one+one trips" "two-keys/one-then-one"
for entry in "${servers[@]}"; do
    name=${entry%%=*}
    addr=${entry#*=}
    a="bench-multi-a-$$"
    b="bench-multi-b-$$"
    S=(--server "$addr")
    one=("${S[@]}" lock "$a" -- true)
    two=("${S[@]}" lock "$a" --and "$b" -- true)
    other=("${S[@]}" lock "$b" -- true)
    t1=$(for _ in 1 2 3 4 5; do round_trips "${one[@]}"; done | median)
    t2=$(for _ in 1 2 3 4 5; do round_trips "${two[@]}"; done | median)
    tb=$(for _ in 1 2 3 4 5; do round_trips "${other[@]}"; done | median)
    ratios=()
    for round in $(seq "${ROUNDS:-3}"); do
        hyperfine -N --style none --warmup 10 --runs "${RUNS:-100}" \
            --export-json "$dir/$name-$round.json" \
            -n one "$BIN ${one[*]}" -n two "$BIN ${two[*]}" \
            -n one-then-one "sh -c '$BIN ${one[*]} && $BIN ${other[*]}'" >/dev/null 2>"$dir/hf.err" ||
            { cat "$dir/hf.err" >&2; exit 1; }
        ratios+=("$(python3 -c 'import json,sys; r={x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}; print("%.3f" % (r["two"] / r["one-then-one"]))' "$dir/$name-$round.json")")
    done
    med=$(printf '%s\n' "${ratios[@]}" | median)
    printf '%-11s %9s %10s %14s %21sx  (rounds: %s)\n' "$name" "$t1" "$t2" "$((t1 + tb))" "$med" "${ratios[*]}"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
