#!/bin/bash
# bench/gpu_comm.sh - GPU readings (NVML) and a DDP job's collectives on a real GPU (or, to
# rehearse, the CPU with gloo); prints figures, asserts nothing.
#
# usage: bench/gpu_comm.sh BUNDLE PYTHON cuda|cpu OUT
#
# BUNDLE as for bench/gpu_torch.sh (../shared/gpu/README.md). One daemon reading every 500 ms:
# nvml.txt is its /v1/status gpu part beside nvidia-smi's view (names, memory, utilisation,
# the processes), gpu-metrics.txt the last readings of gpu_metrics and gpu_processes. Then one
# rank of ../shared/gpu/train_gpu.py --ddp (nccl on cuda, gloo on cpu: DDP's gradient
# all_reduce issued from C++) through phases of PHASE_S seconds: none, `torch on --comm`,
# none; overhead.txt has each phase's mean and median step and its ratio to the first (the
# last phase is the noise floor); comm.txt what comm_metrics holds per op and source (DDP's
# bytes a step against the model's parameters), ddp.txt DDP's own step timing, and the job's
# GPU memory as NVML reported it (gpu_processes) against torch's allocator.
# Rehearse on CPU: PHASE_S=4 SIZE="--dim 64 --layers 2 --seq 32 --batch 4" bash bench/gpu_comm.sh B python3 cpu /tmp/o
set -u
B=$(cd "$1" && pwd)
PY=$2
DEV=$3
OUT=$4
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
W=$(mktemp -d /tmp/probed-gpu-comm.XXXXXX)
export PROBED_SOCKET=$W/probed.sock
PH=${PHASE_S:-10}
SZ=${SIZE:---dim 512 --layers 6 --seq 256 --batch 16}
JOB=$B/gpu/train_gpu.py
[ -f "$JOB" ] || JOB=$(cd "$(dirname "$0")/../../shared/gpu" && pwd)/train_gpu.py
BACKEND=gloo
[ "$DEV" = cuda ] && BACKEND=nccl
ctl=$B/probectl

"$B/probed" --foreground --socket "$PROBED_SOCKET" --db "$W/probed.db" --metrics off \
    --memory-interval 500ms 2>"$W/probed.log" &
D=$!
for _ in $(seq 50); do [ -S "$PROBED_SOCKET" ] && break; sleep 0.1; done
# shellcheck disable=SC2086
MASTER_ADDR=127.0.0.1 MASTER_PORT=29671 RANK=0 WORLD_SIZE=1 "$PY" -u "$JOB" --device "$DEV" \
    --ddp "$BACKEND" --log "$W/steps.jsonl" --truth "$W/truth.json" --seconds $((PH * 3 + 60)) \
    $SZ >"$W/job.out" 2>&1 &
J=$!
for _ in $(seq 900); do grep -q READY "$W/job.out" && break; sleep 0.1; done
"$ctl" attach $J >"$OUT/attach.txt" 2>&1
sleep 2
{
    echo "== probed /v1/status gpu"
    # the system curl, not with the bundle's libraries (its libcurl is Debian's)
    env -u LD_LIBRARY_PATH curl -s --unix-socket "$PROBED_SOCKET" http://probed/v1/status | "$PY" -c \
        'import json, sys; print(json.dumps(json.load(sys.stdin).get("gpu"), indent=1))'
    echo "== nvidia-smi"
    nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu,clocks.sm,clocks.mem \
        --format=csv 2>&1
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1
} >"$OUT/nvml.txt"
mark() { echo "$1 $(date +%s.%N)" >>"$W/phases"; }
mark none
sleep "$PH"
mark comm
"$ctl" torch $J on --comm >"$OUT/torch-on.txt" 2>&1
sleep "$PH"
"$ctl" torch $J off >>"$OUT/torch-on.txt" 2>&1
mark none2
sleep "$PH"
mark end
"$ctl" query "SELECT gpu, mig, name, gpu_util, memory_util, memory_used_mb, memory_total_mb, power_w,
              temperature_c, sm_clock_mhz, memory_clock_mhz, throttle_reasons, xid_errors FROM
              gpu_metrics ORDER BY ts_ns DESC LIMIT 8" >"$OUT/gpu-metrics.txt" 2>&1
"$ctl" query "SELECT pid, gpu, memory_used_mb, sm_util, timestamp FROM gpu_processes
              ORDER BY ts_ns DESC LIMIT 8" >>"$OUT/gpu-metrics.txt" 2>&1
"$ctl" query "SELECT op, seq_source, count(*), min(bytes), max(bytes), round(avg(latency_ms), 3)
              AS mean_ms FROM comm_metrics WHERE pid = $J GROUP BY 1, 2" >"$OUT/comm.txt" 2>&1
"$ctl" eval $J "sum(p.numel() * p.element_size() for p in model.parameters())" \
    >>"$OUT/comm.txt" 2>&1
"$ctl" query "SELECT count(*), round(avg(forward_ms), 3), round(avg(backward_ms), 3),
              round(avg(comm_ms), 3), round(avg(comm_exposed_ms), 3), min(bytes), min(buckets)
              FROM ddp_step_times WHERE pid = $J" >"$OUT/ddp.txt" 2>&1
"$ctl" eval $J "torch.cuda.memory_reserved() if torch.cuda.is_available() else None" \
    >>"$OUT/ddp.txt" 2>&1
kill $J
kill $D
wait $D
cp "$W/probed.log" "$W/phases" "$W/truth.json" "$W/job.out" "$OUT/" 2>/dev/null
"$PY" "$(dirname "$0")/phase_overhead.py" "$W/steps.jsonl" "$W/phases" >"$OUT/overhead.txt"
cat "$OUT/overhead.txt" "$OUT/comm.txt" "$OUT/ddp.txt"
rm -rf "$W"
