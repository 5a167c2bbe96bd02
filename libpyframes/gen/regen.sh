#!/bin/sh
# Regenerates layouts/py3NN.c from the headers of every CPython found: pyenv's by default, and
# the 3.14+ that scripts/pythons.sh unpacks from Debian (their -dev package's headers).
# usage: gen/regen.sh [PREFIX...]   (run from libpyframes/; prints what it wrote)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
prefixes=${*:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.* "${PROBED_PYTHONS:-/opt/probed-pythons}"/3.* 2>/dev/null)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for prefix in $prefixes; do
    inc=$(ls -d "$prefix"/include/python3.* | head -n 1)
    minor=$(basename "$inc" | sed 's/python3\.\([0-9]*\).*/\1/')
    cc -std=gnu11 -w -I"$inc" -I"$inc/internal" -I"$prefix/include" -o "$tmp/gen$minor" "$here/gen/layoutgen.c"
    out=$(printf '%s/layouts/py3%02d.c' "$here" "$minor")
    "$tmp/gen$minor" > "$out"
    echo "wrote $out from $inc"
done
