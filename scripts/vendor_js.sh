#!/usr/bin/env bash
# Refresh the web page's vendored JavaScript from the npm registry.
# The page loads nothing from the internet at run time, so the chart library (uPlot)
# and the YAML parser (js-yaml) live as plain files, with their licences, under
# tunelab/server/static/vendor/. Run this, check the page still works, commit the diff.
# Usage: scripts/vendor_js.sh [uplot-version] [js-yaml-version]
set -euo pipefail

UPLOT_VERSION="${1:-1.6.32}"
JSYAML_VERSION="${2:-5.5.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENDOR="$ROOT/tunelab/server/static/vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

fetch() {  # fetch PACKAGE@VERSION into $WORK/NAME
  (cd "$WORK" && npm pack --silent "$1" >/dev/null)
  mkdir -p "$WORK/$2"
  tar -xzf "$WORK"/*.tgz -C "$WORK/$2" --strip-components=1
  rm -f "$WORK"/*.tgz
}

fetch "uplot@$UPLOT_VERSION" uplot
fetch "js-yaml@$JSYAML_VERSION" js-yaml

mkdir -p "$VENDOR"
cp "$WORK/uplot/dist/uPlot.iife.min.js" "$VENDOR/uPlot.iife.min.js"
cp "$WORK/uplot/dist/uPlot.min.css" "$VENDOR/uPlot.min.css"
cp "$WORK/uplot/LICENSE" "$VENDOR/uPlot.LICENSE"
# Served as .js: some platforms' MIME tables do not know .mjs, and browsers refuse a
# module script served with a non-JavaScript type.
cp "$WORK/js-yaml/dist/browser/js-yaml.esm.min.mjs" "$VENDOR/js-yaml.esm.min.js"
sed -i '/^\/\/# sourceMappingURL=/d' "$VENDOR/js-yaml.esm.min.js"
cp "$WORK/js-yaml/LICENSE" "$VENDOR/js-yaml.LICENSE"
printf 'uplot %s\njs-yaml %s\n' "$UPLOT_VERSION" "$JSYAML_VERSION" > "$VENDOR/VERSIONS"
echo "vendored uplot $UPLOT_VERSION and js-yaml $JSYAML_VERSION into $VENDOR"
