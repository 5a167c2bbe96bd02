#!/bin/bash
# bench/gpu_torch.sh - the torch trace and the on-demand profile on a real training job, on a GPU
# (or, to rehearse, the CPU); prints figures, asserts nothing.
#
# usage: bench/gpu_torch.sh BUNDLE PYTHON cuda|cpu OUT
#
# BUNDLE holds probed, probectl, libprobed-stub.so and lib/ (their shared libraries), as
# ../shared/gpu/README.md bundles them; the job is ../shared/gpu/train_gpu.py (a small GPT,
# AdamW, bf16 autocast on CUDA), copied into BUNDLE/gpu/. Phases of PHASE_S seconds (default 8)
# on one job (PHASES): no trace, the trace at its defaults, --every 10, --backward all,
# --device-time, no trace again; then `torch profile --steps 5 -o`. Written to OUT: overhead.txt (each phase's mean and median
# step time and its ratio to the first: the noise floor is the last phase's), profile.txt
# (probectl's summary), profile.json (the Chrome trace), kernels.txt (kernels by module),
# step-busy.txt (each profiled step's GPU busy time), trace.txt (module forward host time per
# block under the trace), device.txt (per block and stage, host and device time under
# --device-time, beside the job's own CUDA-event truth in truth.json), summary.txt, memory.txt and gpu-memory.svg (live GPU memory by stack), and the
# daemon's log.
# SIZE picks the model (default launch-bound: --dim 512 --layers 6 --seq 256 --batch 16;
# GPU-bound: --dim 2048 --layers 8 --seq 1024 --batch 8). Rehearse on CPU:
#   PHASE_S=4 SIZE="--dim 64 --layers 2 --seq 32 --batch 4" bash bench/gpu_torch.sh B python3 cpu /tmp/o
set -u
B=$(cd "$1" && pwd)
PY=$2
DEV=$3
OUT=$4
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
W=$(mktemp -d /tmp/probed-gpu-torch.XXXXXX)
export PROBED_SOCKET=$W/probed.sock
PH=${PHASE_S:-8}
# the phases in order, each PH seconds: none* (no trace), default, every10, backward-all,
# device-time; a name given twice takes a suffix (default.2). The last none is the noise floor.
PHASES=${PHASES:-none default every10 backward-all device-time none2}
SZ=${SIZE:---dim 512 --layers 6 --seq 256 --batch 16}
JOB=$B/gpu/train_gpu.py
[ -f "$JOB" ] || JOB=$(cd "$(dirname "$0")/../../shared/gpu" && pwd)/train_gpu.py
ctl=$B/probectl

"$B/probed" --foreground --socket "$PROBED_SOCKET" --db "$W/probed.db" --metrics off 2>"$W/probed.log" &
D=$!
for _ in $(seq 50); do [ -S "$PROBED_SOCKET" ] && break; sleep 0.1; done
# shellcheck disable=SC2086
"$PY" -u "$JOB" --device "$DEV" --log "$W/steps.jsonl" --truth "$W/truth.json" \
    --seconds $((PH * $(echo $PHASES | wc -w) + 60)) $SZ >"$W/job.out" 2>&1 &
J=$!
for _ in $(seq 900); do grep -q READY "$W/job.out" && break; sleep 0.1; done
mark() { echo "$1 $(date +%s.%N)" >>"$W/phases"; }
"$ctl" attach $J >"$OUT/attach.txt" 2>&1
for phase in $PHASES; do
    mark "$phase"
    case ${phase%%.*} in # a phase named twice (device-time.2) is told apart by a suffix
    none*) opts= ;;
    default) opts=" " ;;
    every10) opts="--every 10" ;;
    backward-all) opts="--backward all" ;;
    device-time) opts="--device-time" ;;
    esac
    # shellcheck disable=SC2086
    [ -n "$opts" ] && "$ctl" torch $J on $opts >>"$OUT/torch-on.txt" 2>&1
    sleep "$PH"
    [ "${phase%%.*}" = device-time ] && "$ctl" torch $J summary >"$OUT/summary.txt" 2>&1
    [ -n "$opts" ] && "$ctl" torch $J off >>"$OUT/torch-on.txt" 2>&1
done
mark end
"$ctl" torch $J profile --steps 5 -o "$OUT/profile.json" >"$OUT/profile.txt" 2>&1
"$ctl" torch $J memory --record 3s -o "$OUT/gpu-memory.svg" >"$OUT/memory.txt" 2>&1
"$ctl" query "SELECT * FROM gpu_step_busy WHERE pid = $J" >"$OUT/step-busy.txt" 2>&1
"$ctl" query "SELECT module, stage, count(*), round(sum(duration_ms), 3) AS ms FROM gpu_kernels
              WHERE pid = $J GROUP BY 1, 2 ORDER BY ms DESC LIMIT 30" >"$OUT/kernels.txt" 2>&1
"$ctl" query "SELECT module, stage, count(*), round(avg(duration) * 1e3, 3) AS mean_ms FROM
              torch_trace WHERE pid = $J AND module LIKE 'blocks.%' AND module NOT LIKE '%.%.%'
              GROUP BY 1, 2 ORDER BY 1, 2" >"$OUT/trace.txt" 2>&1
# the device-time phase's rows: the last trace session's (its steps follow the others')
"$ctl" query "SELECT module, stage, count(*), round(avg(duration) * 1e3, 3) AS host_ms,
              round(avg(device_duration) * 1e3, 3) AS gpu_ms FROM torch_trace WHERE pid = $J
              AND device_ns IS NOT NULL AND (module NOT LIKE '%.%' OR (module LIKE 'blocks.%'
              AND module NOT LIKE '%.%.%')) GROUP BY 1, 2 ORDER BY 1, 2" >"$OUT/device.txt" 2>&1
kill $J
kill $D
wait $D
cp "$W/probed.log" "$W/phases" "$W/truth.json" "$OUT/" 2>/dev/null
"$PY" "$(dirname "$0")/phase_overhead.py" "$W/steps.jsonl" "$W/phases" >"$OUT/overhead.txt"
cat "$OUT/overhead.txt"
head -5 "$OUT/profile.txt"
rm -rf "$W"
