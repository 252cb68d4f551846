#!/usr/bin/env bash
# OpenNMT-py 3.5.1 for the GPU side-by-side of scripts/gpu_check.sh, packed for a machine with
# no network: its wheels (Python 3.12, x86-64), the CPU side-by-side's config and scripts from
# ../shared/peers, into .gpu-bundle/peer/. Run from the project root, after bundle.sh.
#
# spaCy is the one module OpenNMT-py imports that is left out (its terminology transform, unused
# here, imports it; with its dependencies it would be most of the bundle): an empty stand-in
# module in peer/stub takes its place.
set -euo pipefail
peers=${PEERS:-../shared/peers}
out=.gpu-bundle/peer
[ -f pyproject.toml ] || { echo "run this from the project root" >&2; exit 2; }
rm -rf "$out"; mkdir -p "$out/whl" "$out/stub/spacy"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$out/whl" OpenNMT-py==3.5.1 configargparse==1.9.0 \
  pyonmttok==1.38.1 rapidfuzz==3.14.6 pyahocorasick==2.3.1 fasttext-wheel==0.9.2
echo '"""Stand-in: OpenNMT-py imports spaCy for a transform this benchmark does not use."""' \
  >"$out/stub/spacy/__init__.py"
cp "$peers/opennmt/config.yaml" "$peers/opennmt/summarize.py" "$peers/common/prep_data.py" \
  "$peers/common/yaml_set.py" "$out/"
cat >"$out/timev.py" <<'PY'
"""timev.py FILE CMD...: run CMD, then write its wall time and peak memory to FILE in the
format of GNU time -v (which summarize.py reads), for machines without /usr/bin/time."""
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
with open(sys.argv[1], "w") as f:
    f.write(f"Maximum resident set size (kbytes): {rss}\n")
    f.write(f"Elapsed (wall clock) time (h:mm:ss or m:ss): {wall:.2f}\n")
sys.exit(code)
PY
du -sh "$out"
