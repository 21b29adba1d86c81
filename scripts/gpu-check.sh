#!/usr/bin/env bash
# The GPU checks of alloclab-gpu, for a machine with an NVIDIA GPU (written for an H200,
# sm_90, driver 580 / CUDA 13.0). Builds, runs the device tests, the headline measurement
# and the `gpu` suite, in under 8 minutes, and writes every figure as JSON:
#
#   scripts/gpu-check.sh OUT_DIR        (or OUT=OUT_DIR scripts/gpu-check.sh)
#
#   OUT_DIR/nvidia-smi.txt     the device, driver and memory
#   OUT_DIR/device-tests.log   cargo test --test device (every kernel checked on the device)
#   OUT_DIR/headline.json      2^20 threads, 512 B pages: CoRW vs CUDA malloc and the queue
#   OUT_DIR/gpu-suite.json     the gpu suite's results.json (CPU model + cuda_* figures)
#   OUT_DIR/suite/             its report.md and charts
#
# Exit status: 0 all ran and the headline targets were met; 1 the targets were missed
# (the figures are still written); 2 usage; 3 not a GPU machine or a tool is missing;
# 4 a build, test or run failed or ran out of time.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-${OUT:-}}"
if [ -z "$out" ]; then
  echo "usage: scripts/gpu-check.sh OUT_DIR (or set OUT)" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
started=$SECONDS
step() { echo "==> [$((SECONDS - started))s] $*"; }
die() { echo "gpu-check: $2" >&2; exit "$1"; }

step "device"
command -v nvidia-smi >/dev/null 2>&1 \
  || die 3 "nvidia-smi not found: no NVIDIA driver here, so there is no GPU to check"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,memory.used \
  --format=csv,noheader | tee "$out/nvidia-smi.txt" \
  || die 3 "nvidia-smi could not query the GPU (driver not loaded?)"
if [ "${GPU_CHECK_PREBUILT:-0}" != 1 ]; then
  command -v cargo >/dev/null 2>&1 \
    || die 3 "cargo not found: install Rust (rustup) first, or build elsewhere and set GPU_CHECK_PREBUILT=1"
fi

# NVRTC: cudarc loads libnvrtc.so(.13/.12) by name; a toolkit outside the loader's path is
# added to LD_LIBRARY_PATH. ALLOCLAB_NVRTC=/path/libnvrtc.so.N overrides the search.
if [ -z "${ALLOCLAB_NVRTC:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  found=""
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib /usr/local/cuda-*/lib64 \
             /usr/local/cuda-*/targets/*/lib /usr/lib/x86_64-linux-gnu; do
    if compgen -G "$dir/libnvrtc.so*" >/dev/null; then found="$dir"; break; fi
  done
  [ -n "$found" ] || die 3 "libnvrtc not found (install the CUDA toolkit's NVRTC, or set ALLOCLAB_NVRTC to a libnvrtc.so.N)"
  export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "NVRTC from $found"
fi

# GPU_CHECK_PREBUILT=1: use the binaries already in target/release (built where crates.io is
# reachable with the two cargo commands below, then copied here with the tree).
build_hint="no network for crates.io? build elsewhere with the two cargo commands of this step, copy target/release along, and rerun with GPU_CHECK_PREBUILT=1"
if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  step "prebuilt binaries (GPU_CHECK_PREBUILT=1)"
else
  step "build (release)"
  timeout 150 cargo build --release --locked -p alloclab-gpu --examples --tests \
    || die 4 "building alloclab-gpu failed or took over 150 s ($build_hint)"
  timeout 150 cargo build --release --locked -p alloclab-harness \
    || die 4 "building the harness failed or took over 150 s ($build_hint)"
fi
device_test=$(ls -t target/release/deps/device-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
for bin in "$device_test" target/release/examples/device_check target/release/alloclab; do
  [ -n "$bin" ] && [ -x "$bin" ] || die 4 "missing binary ${bin:-target/release/deps/device-*} ($build_hint)"
done

step "device tests"
if ! ALLOCLAB_REQUIRE_GPU=1 timeout 60 "$device_test" --nocapture --test-threads 1 \
     >"$out/device-tests.log" 2>&1; then
  tail -20 "$out/device-tests.log" >&2
  die 4 "the device tests failed (log: $out/device-tests.log)"
fi
if grep -q 'skipped:' "$out/device-tests.log"; then
  grep -o 'skipped:.*' "$out/device-tests.log" >&2
  die 4 "a device test skipped on a GPU machine: the device is not usable from cudarc"
fi
grep -oE '(device|compiled with NVRTC) .*' "$out/device-tests.log" || true

step "headline: 2^20 threads, 512 B pages"
set +e
timeout 200 target/release/examples/device_check "$out/headline.json"
headline=$?
set -e
case $headline in
  0 | 1) ;;
  # Keep going: the suite's figures are still worth having; the exit status says it failed.
  124) echo "gpu-check: the headline measurement ran over 200 s" >&2; headline=4 ;;
  *) echo "gpu-check: the headline measurement failed (status $headline)" >&2; headline=4 ;;
esac

step "the gpu suite (CPU model + CUDA, one run per measurement)"
timeout 240 target/release/alloclab suite --only gpu --runs 1 --out "$out/suite" \
  || die 4 "the gpu suite failed or ran over 240 s (see $out/suite if it exists)"
cp "$out/suite/results.json" "$out/gpu-suite.json"
grep -m1 '^CUDA' "$out/suite/report.md" || true

step "done in $((SECONDS - started)) s; figures in $out"
cat "$out/headline.json" 2>/dev/null || true
exit "$headline"
