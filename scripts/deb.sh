#!/bin/sh
# Builds the Debian packages (probed, probed-dbgsym) with dpkg-buildpackage from this tree and
# packaging/debian/, and checks them with lintian.
#   scripts/deb.sh OUT [BUILD]
# OUT receives the .deb, the -dbgsym .ddeb, the .changes and lintian.txt. With BUILD (a CMake
# build directory of this tree, as scripts/test.sh makes) its binaries are packaged rather
# than built again. Exits non-zero when the build fails or lintian finds an error or a
# warning that packaging/debian/probed.lintian-overrides does not explain.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
build=${2:+$(cd "$2" && pwd)}
src="$out/probed-0.1.0"
rm -rf "$src"
mkdir -p "$src"
# the sources (tracked and new files, as git sees them), and debian/ beside them
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - --no-recursion) |
    tar -xf - -C "$src"
cp -r "$root/packaging/debian" "$src/debian"
(cd "$src" && PROBED_PREBUILT="$build" dpkg-buildpackage -b -us -uc >"$out/build.log" 2>&1) || {
    tail -40 "$out/build.log" >&2
    exit 1
}
rm -rf "$src"
# lintian reads what it checks as nobody when run by root (it says it should not run as root)
as=""
if [ "$(id -u)" -eq 0 ]; then
    as="setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp"
    chmod go+rx "$out"
fi
$as lintian --fail-on error,warning --display-info --show-overrides "$out"/probed_*.changes \
    >"$out/lintian.txt" 2>&1 || {
    cat "$out/lintian.txt" >&2
    exit 1
}
