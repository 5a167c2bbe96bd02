#!/bin/sh
# Fails when a C file is not clang-formatted (see .clang-format).
set -eu
cd "$(dirname "$0")/.."
bad=$(git ls-files '*.c' '*.h' | while read -r f; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || echo "$f"
done)
if [ -n "$bad" ]; then
    echo "not clang-formatted:" $bad >&2
    exit 1
fi
echo "format-check: ok"
