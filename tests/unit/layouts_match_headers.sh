#!/bin/bash
# Regenerates the layout tables from every installed CPython's headers into a temporary
# copy and fails if any differs from the committed libpyframes/layouts/. A version whose
# headers are not installed is reported, not hidden.
set -eu
src=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r "$src/gen" "$tmp/gen"; mkdir "$tmp/layouts"
checked=0
for minor in 6 7 8 9 10 11 12 13 14 15; do
    # pyenv's, or for 3.14+ the headers of Debian's -dev package (scripts/pythons.sh)
    prefix=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.$minor.* \
        "${PROBED_PYTHONS:-/opt/probed-pythons}/3.$minor" 2>/dev/null | tail -n 1 || true)
    if [ -z "$prefix" ]; then
        echo "3.$minor: headers not installed, table not checked"
        continue
    fi
    "$tmp/gen/regen.sh" "$prefix" >/dev/null
    f=$(printf 'py3%02d.c' "$minor")
    # The first line names the exact patch release the table was made from.
    if ! diff <(tail -n +2 "$tmp/layouts/$f") <(tail -n +2 "$src/layouts/$f") 2>/dev/null; then
        echo "3.$minor: $f differs from the $prefix headers"; exit 1
    fi
    echo "3.$minor: $f matches $prefix"
    checked=$((checked + 1))
done
if [ -d /usr/include/python3.11/internal ]; then
    cc -std=gnu11 -w -I/usr/include/python3.11 -I/usr/include/python3.11/internal \
        -o "$tmp/deb" "$src/gen/layoutgen.c"
    if ! diff <("$tmp/deb" | tail -n +2) <(tail -n +2 "$src/layouts/py311.c"); then
        echo "3.11 (Debian /usr/include): py311.c differs"; exit 1
    fi
    echo "3.11 (Debian /usr/include): py311.c matches"
fi
echo "$checked tables checked"
[ "$checked" -gt 0 ]
