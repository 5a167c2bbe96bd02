#!/bin/sh
# Installs the CPythons newer than this Debian release (3.14, 3.15) for the tests and the demo.
#
# Bookworm has no such package, and they need a newer glibc than bookworm's. Debian unstable
# builds both: each goes, with unstable's libc6, into a folder of its own, /opt/probed-pythons/3.N
# (dpkg -x, nothing registered with dpkg), and its bin/python3.N is given that libc's loader and
# library path (patchelf), so /proc/PID/exe is the interpreter itself, as for any other target.
# That libc's detached symbols (libc6-dbg) are linked into /usr/lib/debug/.build-id, as the
# package would put them; the interpreters themselves stay stripped, as Debian ships them.
#
# Trust: InRelease is checked with gpgv against debian-archive-keyring, Packages.xz against the
# SHA256 InRelease lists, and every .deb against the SHA256 of its Packages stanza. Idempotent:
# a folder whose VERSION file names the index's version is kept, and the .debs are cached in
# /var/cache/probed/debs. A version that cannot be installed is written to
# /opt/probed-pythons/MISSING with why, and the tests report it there (tests/functional/conftest.py).
# The free-threaded build (3.14t) has no Debian package, and CPython's sources cannot be fetched
# here: it is not installed (README.md says so where versions are listed).
set -eu
ROOT=${PROBED_PYTHONS:-/opt/probed-pythons}
CACHE=/var/cache/probed/debs
MIRROR=${PROBED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=unstable
MINORS="3.14 3.15"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

mkdir -p "$ROOT" "$CACHE"
: >"$ROOT/MISSING.new"
index=""

fail() { # minor, why
    echo "pythons.sh: Python $1 not installed: $2" >&2
    echo "$1 $2" >>"$ROOT/MISSING.new"
}

# Fetches and verifies the index once, into $CACHE/Packages; sets $index.
fetch_index() {
    [ -n "$index" ] && return 0
    tmp=$(mktemp -d)
    if ! curl -fsS --max-time 60 -o "$tmp/InRelease" "$MIRROR/dists/$SUITE/InRelease"; then
        rm -rf "$tmp"
        return 1
    fi
    if ! gpgv --keyring "$KEYRING" --output "$tmp/Release" "$tmp/InRelease" 2>/dev/null; then
        echo "pythons.sh: $SUITE's InRelease has no good Debian signature" >&2
        rm -rf "$tmp"
        return 1
    fi
    want=$(awk '/^SHA256:/ {s = 1; next} /^[^ ]/ {s = 0}
                s && $3 == "main/binary-amd64/Packages.xz" {print $1}' "$tmp/Release")
    if ! curl -fsS --max-time 300 -o "$tmp/Packages.xz" \
        "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.xz" ||
        [ "$(sha256sum "$tmp/Packages.xz" | cut -d' ' -f1)" != "$want" ]; then
        echo "pythons.sh: $SUITE's Packages.xz missing or not the one InRelease lists" >&2
        rm -rf "$tmp"
        return 1
    fi
    xz -dc "$tmp/Packages.xz" >"$CACHE/Packages"
    rm -rf "$tmp"
    index="$CACHE/Packages"
}

# Prints "version filename sha256" of a binary package in the index.
stanza() {
    awk -v want="$1" '
        /^Package: / {p = ($2 == want)}
        p && /^Version: / {v = $2}
        p && /^Filename: / {f = $2}
        p && /^SHA256: / {s = $2}
        /^$/ && p {print v, f, s; exit}' "$index"
}

# Downloads one package into the cache (kept when its checksum is right) and unpacks it.
unpack() { # package dest
    set -- "$1" "$2" $(stanza "$1")
    [ $# -eq 5 ] || { echo "pythons.sh: $1 is not in $SUITE" >&2; return 1; }
    deb="$CACHE/$(basename "$4")"
    if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$5" ]; then
        curl -fsS --max-time 300 -o "$deb.part" "$MIRROR/$4" || return 1
        if [ "$(sha256sum "$deb.part" | cut -d' ' -f1)" != "$5" ]; then
            echo "pythons.sh: $4 does not match its SHA256 in the index" >&2
            rm -f "$deb.part"
            return 1
        fi
        mv "$deb.part" "$deb"
    fi
    dpkg -x "$deb" "$2"
}

install_minor() { # 3.N
    minor=$1
    dest="$ROOT/$minor"
    if [ -x "$dest/bin/python$minor" ] && [ -f "$dest/VERSION" ] && [ -z "${PROBED_PYTHONS_REFRESH:-}" ]; then
        "$dest/bin/python$minor" -c 'pass' 2>/dev/null && return 0
    fi
    fetch_index || { fail "$minor" "the $SUITE index could not be fetched from $MIRROR"; return 0; }
    version=$(stanza "python$minor-minimal" | cut -d' ' -f1)
    [ -n "$version" ] || { fail "$minor" "$SUITE has no python$minor-minimal"; return 0; }
    work="$dest.new"
    rm -rf "$work"
    mkdir -p "$work/root"
    for p in libc6 libc6-dbg "python$minor-minimal" "libpython$minor-minimal" \
        "libpython$minor-stdlib" "libpython$minor-dev"; do
        unpack "$p" "$work/root" || { fail "$minor" "$p could not be fetched or verified"; rm -rf "$work"; return 0; }
    done
    lib="$dest/root/usr/lib/x86_64-linux-gnu"
    mkdir -p "$work/bin"
    cp "$work/root/usr/bin/python$minor" "$work/bin/python$minor"
    # The loader and libc of unstable, found again by each extension module (DT_RPATH, unlike
    # RUNPATH, applies to what the executable's dependencies load too). PYTHONHOME is not
    # needed: the interpreter finds its prefix from ../lib/python3.N beside bin/ (a link).
    patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib" \
        "$work/bin/python$minor"
    ln -s root/usr/lib "$work/lib"
    ln -s root/usr/include "$work/include"
    echo "$version" >"$work/VERSION"
    rm -rf "$dest"
    mv "$work" "$dest"
    # libc6-dbg's detached symbols where debuggers look for them, by build-id (what installing
    # the package does): the native frames in unstable's libc get their names, as bookworm's do
    for f in "$dest"/root/usr/lib/debug/.build-id/*/*.debug; do
        [ -e "$f" ] || continue
        link="/usr/lib/debug/.build-id/${f#"$dest"/root/usr/lib/debug/.build-id/}"
        mkdir -p "$(dirname "$link")"
        [ -e "$link" ] || ln -sfn "$f" "$link"
    done
    if ! "$dest/bin/python$minor" -c 'import sys, threading, json, socket, ctypes' 2>/dev/null; then
        fail "$minor" "python$minor $version was unpacked but does not run"
        return 0
    fi
    echo "pythons.sh: Python $minor ($version) in $dest"
}

for minor in $MINORS; do
    install_minor "$minor"
done
mv "$ROOT/MISSING.new" "$ROOT/MISSING"
[ -s "$ROOT/MISSING" ] || rm -f "$ROOT/MISSING"
chmod -R a+rX "$ROOT"
