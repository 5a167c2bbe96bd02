#!/bin/sh
# The demo: builds probectl, starts a real multi-threaded Python program, and reads its
# stacks from outside (text, with locals, and JSON), without stopping or changing it.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build -DPROBED_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
py=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
"$py" tests/targets/shapes.py >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q READY "$out" && break; sleep 0.1; done
echo "== probectl backtrace $pid"
./build/probed/probectl backtrace "$pid"
echo
echo "== probectl backtrace $pid --locals=1   (main thread only shown)"
./build/probed/probectl backtrace "$pid" --locals=1 | sed -n "/^Thread $pid /,/^\$/p"
echo "== probectl backtrace $pid --json | head -30"
./build/probed/probectl backtrace "$pid" --json | head -30
