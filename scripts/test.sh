#!/bin/sh
# Builds probed and runs the whole test suite under CTest.
#   scripts/test.sh              normal build in build/
#   scripts/test.sh --sanitize   ASan+UBSan build in build-asan/
set -eu
cd "$(dirname "$0")/.."
dir=build
flags="-DPROBED_TESTS=ON"
if [ "${1:-}" = "--sanitize" ]; then
    dir=build-asan
    flags="$flags -DPROBED_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
fi
if command -v clang >/dev/null 2>&1 && [ "$dir" = build ]; then
    flags="$flags -DPROBED_FUZZ=ON"
fi
# shellcheck disable=SC2086
cmake -S . -B "$dir" $flags >/dev/null
cmake --build "$dir" -j"$(nproc)"
before=$(mktemp)
sh scripts/leftovers.sh snapshot "$before"
(cd "$dir" && ctest --output-on-failure -j2 --timeout 900)
sh scripts/leftovers.sh check "$before"   # nothing a test started may outlive it
rm -f "$before"
