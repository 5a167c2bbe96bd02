#!/bin/sh
# web-libs.sh OUT_DIR - the libraries of probectl web's page (d3-flame-graph, uPlot), installed
# from npm exactly as probed/ctl/web/package-lock.json pins them, and joined into
# OUT_DIR/libs.js and OUT_DIR/libs.css (with d3-selection, which draws the flame graph into the page),, which the build puts into probectl (no CDN: the page
# works offline). Run by the build (probed/CMakeLists.txt) when npm is there. When npm cannot
# install them (no network, no registry), the files say so and the page draws the daemon's
# own SVG flame graph instead: the build goes on, and the web tests say what is missing.
set -eu
out=$1
src=$(cd "$(dirname "$0")/../probed/ctl/web" && pwd)
mkdir -p "$out/npm"
cp "$src/package.json" "$src/package-lock.json" "$out/npm/"
if ! (cd "$out/npm" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1); then
    echo "web-libs.sh: npm ci failed (see $out/npm.log); the page is built without its libraries" >&2
    printf '/* probectl was built without the page libraries: npm ci failed (%s) */\n' "$out/npm.log" >"$out/libs.js"
    : >"$out/libs.css"
    exit 0
fi
m=$out/npm/node_modules
ver() { sed -n 's/^  "version": "\(.*\)",$/\1/p' "$m/$1/package.json"; }
{
    printf '/* The libraries of probed'"'"'s web view, from npm (probed/ctl/web/package-lock.json):\n'
    printf ' * uPlot %s (MIT) and d3-flame-graph %s (Apache-2.0, with d3: ISC). Their licences:\n' \
        "$(ver uplot)" "$(ver d3-flame-graph)"
    for p in uplot d3-flame-graph d3-selection; do
        printf '\n * ---- %s ----\n' "$p"
        sed 's/\*\//* \//g; s/^/ * /' "$m/$p/LICENSE"
    done
    printf ' */\n'
    cat "$m/uplot/dist/uPlot.iife.min.js"
    printf '\n'
    cat "$m/d3-selection/dist/d3-selection.min.js"
    printf '\n'
    cat "$m/d3-flame-graph/dist/d3-flamegraph.min.js"
    printf '\n'
} >"$out/libs.js.tmp"
cat "$m/uplot/dist/uPlot.min.css" "$m/d3-flame-graph/dist/d3-flamegraph.css" >"$out/libs.css.tmp"
mv "$out/libs.js.tmp" "$out/libs.js"
mv "$out/libs.css.tmp" "$out/libs.css"
