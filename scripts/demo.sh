#!/bin/sh
# The demo: builds probed and probectl, starts the daemon (on a temporary socket and
# database), starts a real multi-threaded Python program, attaches to it, and shows its live
# stacks, a query over the samples and a flame graph - without stopping or changing it.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
export PROBED_SOCKET="$work/probed.sock"
ctl=./build/probed/probectl
metrics=127.0.0.1:${METRICS_PORT:-19464}
./build/probed/probed --foreground --socket "$PROBED_SOCKET" --db "$work/probed.db" \
    --metrics "$metrics" 2>"$work/probed.log" &
daemon=$!
"$py" tests/targets/busy.py >"$work/target.out" 2>&1 &
pid=$!
trap 'kill $pid $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
    [ -S "$PROBED_SOCKET" ] && grep -q READY "$work/target.out" && break
    sleep 0.1
done
echo "== probectl attach $pid --rate 200"
$ctl attach "$pid" --rate 200
echo
echo "== probectl backtrace $pid   (through the daemon)"
$ctl backtrace "$pid"
sleep 3
echo
echo "== probectl list"
$ctl list
echo
echo "== probectl query: where the time went (function_stats)"
$ctl query "SELECT func, file, self_samples, total_samples, self_pct FROM function_stats LIMIT 5"
echo
echo "== probectl query: live stacks (python.backtrace)"
$ctl query "SELECT tid, depth, func, lineno FROM python.backtrace ORDER BY tid, depth"
echo
echo "== probectl memory $pid   (the memory timeline: RSS/PSS/USS, growth, threads by CPU)"
$ctl memory "$pid"
echo
echo "== Prometheus: curl http://$metrics/metrics (per-target series)"
curl -s "http://$metrics/metrics" | grep -E '^probed_target_(cpu_seconds_total|rss_bytes|samples_total)'
echo
echo "== probectl config sample_rate=50   (live; probectl config lists every setting)"
$ctl config sample_rate=50
$ctl config | grep -E '^(sample_rate|metrics_address|memory_interval) '
echo
echo "== probectl flamegraph $pid --format folded"
$ctl flamegraph "$pid" --format folded
$ctl flamegraph "$pid" -o flamegraph.svg
echo "(open flamegraph.svg in a browser: hover, click to zoom, Ctrl-F to search)"
$ctl detach "$pid"
echo
echo "== probectl attach --native: C frames too, copied with the Python frames of the same instant by the eBPF sampler (perf where eBPF cannot load), without stopping the process"
"$py" tests/targets/native_qsort.py "$work/sorts" >"$work/qsort.out" 2>&1 &
qsort=$!
trap 'kill $pid $qsort $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q READY "$work/qsort.out" && break; sleep 0.1; done
$ctl attach "$qsort" --native
sleep 3
echo "-- one stored mixed stack, innermost first (Python -> ctypes -> libc qsort -> Python)"
$ctl query "SELECT depth, kind, func, file FROM stacks WHERE stack_id = (SELECT s.stack_id
    FROM samples s JOIN targets t ON t.id = s.target_id WHERE t.pid = $qsort AND s.stack_id IN
    (SELECT stack_id FROM stacks WHERE func = 'compare') AND s.stack_id IN (SELECT stack_id
    FROM stacks WHERE func LIKE '%sort%' AND kind = 'native') LIMIT 1) ORDER BY depth"
echo "-- the hottest native and Python functions"
$ctl query "SELECT kind, func, self_pct FROM function_stats ORDER BY self_samples DESC LIMIT 6" \
    --pid "$qsort"
$ctl flamegraph "$qsort" -o flamegraph-native.svg
echo "(flamegraph-native.svg: native frames in blues, Python frames in warm colours)"
$ctl detach "$qsort"
echo
echo "== probectl eval $pid: Python code run inside it (the stub is loaded on first use)"
$ctl eval "$pid" "import threading; [t.name for t in threading.enumerate()]"
echo
echo "== probectl query: the audit trail of evals"
$ctl query "SELECT uid, pid, mode, code, status, output_bytes FROM evals"
echo
echo "== probectl torch: a real PyTorch training job (a small transformer block), traced live"
go="$work/go"
"$py" tests/targets/torchjob.py transformer train 3 40 "$go" "$work/steps.log" >"$work/job.out" 2>&1 &
job=$!
trap 'kill $pid $qsort $job $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 300); do grep -q READY "$work/job.out" && break; sleep 0.1; done
$ctl torch "$job" on --exprs loss@train,epoch@train
touch "$go"
for _ in $(seq 600); do grep -q DONE "$work/job.out" && break; sleep 0.1; done
echo
echo "== probectl torch $job summary"
$ctl torch "$job" summary --top 8
echo
echo "== probectl query: the seeds' torch query (python.torch_trace)"
$ctl query "SELECT module, stage, AVG(duration) * 1000 AS avg_ms, AVG(allocated) AS avg_memory,
    COUNT(*) AS frequency FROM python.torch_trace WHERE step >= (SELECT MAX(step) - 5 FROM
    python.torch_trace) GROUP BY module, stage ORDER BY avg_ms DESC LIMIT 6"
$ctl query "SELECT step, name, value FROM python.variables ORDER BY step DESC LIMIT 4"
$ctl torch "$job" off
$ctl detach "$job" >/dev/null
echo
echo "== a torch.distributed job (gloo, 4 ranks), collectives traced; rank 2 then stalls"
ranks=""
for r in 0 1 2 3; do
    RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=${GLOO_PORT:-29599} STALL_RANK=2 \
        STALL_FILE="$work/stall" OMP_NUM_THREADS=1 "$py" tests/targets/gloo_job.py \
        >"$work/rank$r.out" 2>&1 &
    ranks="$ranks $!"
done
trap 'kill $pid $qsort $job $ranks $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$work"' EXIT
for r in 0 1 2 3; do
    for _ in $(seq 600); do grep -q READY "$work/rank$r.out" && break; sleep 0.1; done
done
# this node as a one-node cluster, through the transport other nodes are reached by
export PROBED_TRANSPORT="PROBED_SOCKET=$PROBED_SOCKET $ctl proxy # {host}"
$ctl cluster attach --match 'gloo_job\.py' --hosts "$(hostname)"
for p in $ranks; do $ctl torch "$p" on --comm-only; done
sleep 2
touch "$work/stall"
sleep 3
echo
echo "== probectl hang   (every rank's stack at one instant, the odd one out first)"
$ctl hang --hosts "$(hostname)" --depth 3
echo "== probectl cluster query: the collectives, with their host"
$ctl cluster query "SELECT rank, op, seq, round(latency_ms, 3) AS latency_ms, in_flight
    FROM comm_metrics WHERE seq_source = 'c10d' ORDER BY ts_ns DESC LIMIT 6" --hosts "$(hostname)"
kill $ranks 2>/dev/null
