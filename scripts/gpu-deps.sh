#!/usr/bin/env bash
# Gathers what the lent GPU machine lacks (it has no apt and no network) into .gpu-deps/ (git-ignored), to be
# carried with a device run: FlatBuffers headers and flatc, CLI11 headers, GoogleTest sources.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
d=$top/.gpu-deps
rm -rf "$d"; mkdir -p "$d/include" "$d/bin"
cp -r /usr/include/flatbuffers "$d/include/"
cp -r /usr/include/CLI "$d/include/"   # zrun's command line (header-only)
cp /usr/bin/flatc "$d/bin/"
cp -r /usr/src/googletest "$d/googletest-src"
echo "gpu-deps: $(du -sh "$d" | cut -f1) in $d"
