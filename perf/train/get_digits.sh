#!/bin/sh
# Prints the path of the handwritten digits data set (1797 rows: 64 pixels 0..16, label) as a
# plain CSV, decompressed into CACHE_DIR (default /tmp/sketchccl-data). The data is the one
# Debian's python3-sklearn ships (sklearn/datasets/data/digits.csv.gz). When that package is not
# installed, the package file alone is fetched with `apt-get download` (about 2 MB, nothing is
# installed) and the CSV is taken out of it. No Python is needed.
set -eu
CACHE=${1:-/tmp/sketchccl-data}
REL=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
mkdir -p "$CACHE"
out=$CACHE/digits.csv
if [ -s "$out" ]; then echo "$out"; exit 0; fi
src=
for f in "/$REL" /usr/local/lib/python3*/dist-packages/sklearn/datasets/data/digits.csv.gz; do
  if [ -f "$f" ]; then src=$f; break; fi
done
if [ -z "$src" ]; then
  deb=$(ls "$CACHE"/python3-sklearn_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$CACHE" && apt-get -qq -o APT::Sandbox::User=root download python3-sklearn >/dev/null 2>&1) ||
      { [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1 &&
        (cd "$CACHE" && apt-get -qq -o APT::Sandbox::User=root download python3-sklearn >/dev/null 2>&1); } ||
      { echo "cannot get python3-sklearn (apt-get download failed; install python3-sklearn)" >&2; exit 1; }
    deb=$(ls "$CACHE"/python3-sklearn_*.deb | head -1)
  fi
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "./$REL" >"$CACHE/digits.csv.gz.tmp"
  src=$CACHE/digits.csv.gz.tmp
fi
gzip -dc "$src" >"$out.tmp"
rm -f "$CACHE/digits.csv.gz.tmp"
mv "$out.tmp" "$out"
echo "$out"
