#!/bin/sh
# run-scale.sh: the many-numbers measurement of issue 22 (make bench-scale)
# on a machine with no Go toolchain, from the bundle `make device-bundle`
# builds (artifacts/device.tgz): the e2e test binary, the sluice binary and
# a redis-server with its shared libraries, all run from the bundle.
#
# Usage, from the directory the bundle was unpacked in:
#   device/run-scale.sh [OUTDIR]
# The size is issue 22's 16-core run unless set: SLUICE_BENCH_NUMBERS=100,
# SLUICE_BENCH_SENDS=1000, SLUICE_BENCH_WORKERS=8, SLUICE_BENCH_ROUNDS=1.
# The log goes to OUTDIR/bench-scale.txt (default: the current directory)
# and to stdout; the last line holds the ratios, as in make bench-scale.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
out=${1:-.}
mkdir -p "$out"
PATH="$dir/bin:$PATH"
export PATH
export SLUICE_E2E_BIN="$dir/bin/sluice"
export SLUICE_BENCH_SCALE=1
export SLUICE_BENCH_NUMBERS="${SLUICE_BENCH_NUMBERS:-100}"
export SLUICE_BENCH_SENDS="${SLUICE_BENCH_SENDS:-1000}"
export SLUICE_BENCH_WORKERS="${SLUICE_BENCH_WORKERS:-8}"
export SLUICE_BENCH_ROUNDS="${SLUICE_BENCH_ROUNDS:-1}"
echo "run-scale: $(nproc) cores, $(redis-server --version)"
cd "$dir"
"$dir/bin/e2e.test" -test.run '^TestBenchScale$' -test.v -test.count 1 -test.timeout "${SLUICE_DEVICE_TIMEOUT:-9m}" 2>&1 | tee "$out/bench-scale.txt"
