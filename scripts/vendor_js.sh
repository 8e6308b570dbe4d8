#!/usr/bin/env bash
# Fetch the JavaScript graph-layout library the diff report embeds (dagre, MIT) from the npm
# registry into src/graphwright/diff/_vendor/, with its licence.  Run it to update the
# vendored copy; the result is committed, so installs and tests never need the network.
set -euo pipefail
VERSION="${1:-3.1.3}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$HERE/src/graphwright/diff/_vendor"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
npm pack --silent "@dagrejs/dagre@$VERSION" >/dev/null
tar -xzf dagrejs-dagre-"$VERSION".tgz
mkdir -p "$DEST"
cp package/dist/dagre.min.js "$DEST/dagre.min.js"
cp package/LICENSE "$DEST/dagre.LICENSE"
cp package/dist/dagre.min.js.LEGAL.txt "$DEST/dagre.min.js.LEGAL.txt"  # licence notices kept by the bundler
printf '@dagrejs/dagre %s (npm registry), MIT licence: see dagre.LICENSE\n' "$VERSION" > "$DEST/VERSION"
echo "vendored @dagrejs/dagre $VERSION into $DEST"
