# Sourced by the benchmark scripts after benches/builtin-server.sh: the
# services to measure, and how round trips are counted (`round_trips`). The
# services, as NAME=ADDRESS in `servers`: the built-in server
# started there, then each real service whose address is given (the
# servers of ../shared/REAL-SERVERS.md):
#
#   LC_BENCH_REDIS=redis://127.0.0.1:6379 LC_BENCH_ZK=zk://127.0.0.1:2181 \
#   LC_BENCH_ETCD=etcd://127.0.0.1:2379 \
#   LC_BENCH_PG='postgres://postgres@127.0.0.1:5432/postgres' \
#     bash benches/queue.sh
servers=("builtin=$addr")
[ -n "${LC_BENCH_REDIS:-}" ] && servers+=("redis=$LC_BENCH_REDIS")
[ -n "${LC_BENCH_ZK:-}" ] && servers+=("zookeeper=$LC_BENCH_ZK")
[ -n "${LC_BENCH_ETCD:-}" ] && servers+=("etcd=$LC_BENCH_ETCD")
[ -n "${LC_BENCH_PG:-}" ] && servers+=("postgresql=$LC_BENCH_PG")

# Round trips of one run of `lc-cli ARGS`: reads from a TCP socket that
# follow a write to one.
round_trips() {
    strace -f -yy -qq -e trace=read,recvfrom,recvmsg,readv,write,sendto,sendmsg,writev \
        -o "$dir/trace" "$BIN" "$@" >/dev/null 2>&1
    awk '/<TCP(v6)?:\[/ {
            if ($0 ~ /(write|send)/) { sent = 1 }
            else if (sent && $0 !~ /= -1 EAGAIN/) { trips++; sent = 0 }
         }
         END { print trips + 0 }' "$dir/trace"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
