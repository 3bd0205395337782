#!/usr/bin/env bash
# The client's cost against the baselines the goals name, measured in the same
# run: the wall time of `lc-cli lock k -- true` against the built-in server
# (release build, on 127.0.0.1) over `flock FILE true` (goal: at most 1.5x),
# and of `lc-cli --version` over `true` (goal: at most 0.3 ms more).
# ROUNDS hyperfine runs (no shell, -N) of RUNS runs each; every round measures
# all the commands, and the ratios are printed per round and as their median,
# so a load that changes between rounds shows instead of skewing one figure.
#
#   bash benches/cli.sh                    # builds the release binary first
#   BIN=path/lc-cli bash benches/cli.sh    # that binary, no build
#   BASE=path/lc-cli bash benches/cli.sh   # and another one beside it (A/B)
#   ROUNDS=5 RUNS=1000 bash benches/cli.sh # extra arguments go to hyperfine
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/builtin-server.sh
commands=(-n lock "$BIN --server $addr lock bench -- true"
    -n flock "flock $dir/flock true"
    -n version "$BIN --version"
    -n true "true")
if [ -n "${BASE:-}" ]; then
    commands+=(-n base-lock "$BASE --server $addr lock bench -- true"
        -n base-version "$BASE --version")
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${ROUNDS:-3}"); do
    hyperfine -N --style none --warmup 50 --runs "${RUNS:-300}" \
        --export-json "$dir/round-$round.json" "${commands[@]}" "$@" >/dev/null 2>"$dir/hf.err" ||
        { cat "$dir/hf.err" >&2; exit 1; }
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$dir"/round-*.json <<'EOF'
import json, statistics, sys

rounds = []
for path in sys.argv[1:]:
    with open(path) as f:
        rounds.append({r["command"]: r for r in json.load(f)["results"]})
ms = lambda r, stat: r[stat] * 1000
print("round  " + "  ".join(f"{name:>12}" for name in rounds[0]) + "   (mean / median, ms)")
for i, r in enumerate(rounds, 1):
    cells = [f"{ms(v, 'mean'):5.2f}/{ms(v, 'median'):5.2f}" for v in r.values()]
    print(f"{i:5}  " + "  ".join(f"{c:>12}" for c in cells))
def figure(label, f, unit):
    for stat in ("mean", "median"):
        per = [f(r, stat) for r in rounds]
        shown = " ".join(f"{p:.2f}" for p in per)
        print(f"{label} ({stat}): {statistics.median(per):.2f}{unit}  (rounds: {shown})")
figure("lc-cli lock / flock", lambda r, s: r["lock"][s] / r["flock"][s], "x")
figure("lc-cli --version - true", lambda r, s: ms(r["version"], s) - ms(r["true"], s), " ms")
if "base-lock" in rounds[0]:
    figure("base lock / flock", lambda r, s: r["base-lock"][s] / r["flock"][s], "x")
    figure("base --version - true", lambda r, s: ms(r["base-version"], s) - ms(r["true"], s), " ms")
    figure("lock: BIN / BASE", lambda r, s: r["lock"][s] / r["base-lock"][s], "x")
EOF
