#!/bin/sh
# Installs every Debian package probed needs to build, test and demo. Idempotent; run as root.
set -eu
if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (it installs Debian packages with apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
packages="
  build-essential cmake pkg-config git clang llvm clang-format libclang-rt-14-dev
  libelf-dev libdw-dev libdebuginfod-dev libunwind-dev libbpf-dev bpftool linux-libc-dev
  libsqlite3-dev sqlite3 libxxhash-dev libprotobuf-c-dev protobuf-c-compiler zlib1g-dev
  libevent-dev libjansson-dev libcurl4-openssl-dev libedit-dev libsmartcols-dev libncurses-dev
  python3 python3-pytest python3-torch procps util-linux curl golang-go strace prometheus
  openssh-server openssh-client iproute2 gdb python3-debugpy debuginfod python3-uvloop
  chromium chromium-driver python3-selenium nodejs python3-pyte
  patchelf xz-utils gpgv debian-archive-keyring debhelper lintian
"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
fi
# npm (tests/mcp's client): Debian's package, unless the nodejs installed brings its own (a
# NodeSource build does, and conflicts with Debian's npm)
if ! command -v npm >/dev/null 2>&1; then
    apt-get update -q
    apt-get install -y -q --no-install-recommends npm
fi
echo "setup.sh: all packages present"
# CPython 3.14 and 3.15, newer than this Debian: Debian unstable's, verified and unpacked
sh "$(dirname "$0")/pythons.sh"
