#!/bin/sh
# What a test run left running: every test, and the demo, stop what they start.
#   scripts/leftovers.sh snapshot FILE   the processes now (before the run)
#   scripts/leftovers.sh check FILE      fails, naming them, when processes of the kinds the
#                                        tests start (Python targets, probed, probectl, sshd,
#                                        Prometheus, Chromium, node, gdb) outlive the run
set -eu
kinds='^(python[0-9.]*|probed|probectl|sshd|prometheus|chrom.*|node|gdb|torchrun)$'
case "${1:-}" in
snapshot)
    ps -e -o pid= | tr -d ' ' | sort > "$2"
    ;;
check)
    tries=0
    while :; do
        left=$(ps -e -o pid=,comm= | awk -v k="$kinds" '$2 ~ k {print $1}' | sort |
               comm -23 - "$2" | tr '\n' ' ')
        [ -z "$left" ] && exit 0
        tries=$((tries + 1))
        [ "$tries" -ge 10 ] && break
        sleep 1 # ending: give them a moment
    done
    echo "leftovers: the test run left these running:" >&2
    # shellcheck disable=SC2086
    ps -o pid=,ppid=,etimes=,args= -p $(echo $left | tr ' ' ',') >&2 || true
    exit 1
    ;;
*)
    echo "usage: $0 snapshot|check FILE" >&2
    exit 2
    ;;
esac
