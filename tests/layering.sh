#!/bin/sh
# layering.sh - the daemon's folders include only the folders before them in the data flow
# (docs/ARCHITECTURE.md), so the CMake library of each folder links only those: a header
# included against the flow fails here, with the line named.
#   usage: tests/layering.sh [PROBED_SOURCE_DIR]
set -eu
cd "${1:-$(dirname "$0")/../probed}"

# folder: the folders (and "base": the top's log.h config.h clock.h errbuf.h) it may include.
# stub/ (the library put into targets) includes nothing of the daemon's: its stub_proto.h is the
# contract both ends build against, so any folder may read it.
allowed() {
    case "$1" in
    common) echo "common stub" ;;
    base) echo "common base" ;;
    native) echo "common base native" ;;
    gpu) echo "common base gpu" ;;
    sample) echo "common base native gpu sample stub" ;;
    store) echo "common base native gpu sample store" ;;
    query) echo "common base store query" ;;
    intarget) echo "common base store intarget stub" ;;
    push) echo "common base native gpu sample store query push" ;;
    api) echo "common base native gpu sample store query intarget push api" ;;
    ctl) echo "common ctl" ;;
    stub) echo "stub" ;;
    esac
}

bad=0
check() { # file folder
    grep -n '^#include "' "$1" | while IFS= read -r line; do
        inc=$(printf '%s' "$line" | sed 's/^[0-9]*:#include "\([^"]*\)".*/\1/')
        case "$inc" in
        */*) to=${inc%%/*} ;;
        log.h | config.h | clock.h | errbuf.h) to=base ;;
        *) continue ;; # a library's own (pyframes.h, oncpu.h) or a generated file
        esac
        case " $(allowed "$2") " in
        *" $to "*) ;;
        *) echo "$1:${line%%:*}: $2/ includes $inc ($to/ is not before it in the flow)" ;;
        esac
    done
}

out=$(
    for d in common native gpu sample store query intarget push api ctl stub; do
        for f in "$d"/*.c "$d"/*.h; do
            [ -e "$f" ] && check "$f" "$d"
        done
    done
    for f in log.c log.h config.c config.h clock.c clock.h errbuf.c errbuf.h; do
        check "$f" base
    done
)
if [ -n "$out" ]; then
    echo "$out" >&2
    exit 1
fi
echo "layering: ok"
