#!/usr/bin/env bash
# scripts/gpu-check's decisions without a GPU, with stand-ins for nvidia-smi
# and the kernel checker (amprt-cuda-check: exit 2 = no usable CUDA device):
#   - nvidia-smi lists a GPU, the runtime finds none: the correctness phase
#     fails (exit 1) and says why; the bench phase too;
#   - no GPU listed: both phases exit 0 and say the GPU part did not run;
#   - $OUT receives the log as it goes, with the summary;
#   - an unknown phase is refused (exit 2).
#
#   test_gpu_check.sh SRC_ROOT
set -u
SRC=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
mkdir -p "$T/gpu" "$T/nogpu"
cat > "$T/gpu/nvidia-smi" <<'SH'
#!/bin/sh
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  --query-gpu=*) echo "NVIDIA H200, 535.104.05, 143771 MiB" ;;
  *) echo "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |" ;;
esac
SH
printf '#!/bin/sh\nexit 0\n' > "$T/nogpu/nvidia-smi"
cat > "$T/checker" <<'SH'
#!/bin/sh
echo "amprt-cuda-check: no CUDA device: CUDA driver version is insufficient for CUDA runtime version; nothing to check on this machine"
exit 2
SH
chmod +x "$T/gpu/nvidia-smi" "$T/nogpu/nvidia-smi" "$T/checker"
run() { # DIR PHASE -> rc in $r, output in $T/out
  (cd "$T" && env PATH="$T/$1:$PATH" GPU_CHECK_CHECKER="$T/checker" OUT="$T/out.d/$1" \
     bash "$SRC/scripts/gpu-check" "$2") > "$T/out" 2>&1
  r=$?
}
for phase in correctness bench; do
  run gpu $phase
  [ $r -ne 0 ] || fail "$phase with a GPU listed but unusable: exit 0"
  grep -q "nvidia-smi lists 1 GPU(s) but the CUDA runtime finds no usable device" "$T/out" ||
    { fail "$phase: no message naming the unusable GPU"; cat "$T/out"; }
  grep -q "driver supports CUDA Version: 12.2" "$T/out" || fail "$phase: the preflight does not print the driver's CUDA version"
  grep -q "gpu-check $phase: FAILED" "$T/out" || fail "$phase: no FAILED summary"
  [ -s "$T/out.d/gpu/gpu-check-$phase.log" ] && grep -q "== summary" "$T/out.d/gpu/gpu-check-$phase.log" ||
    fail "$phase: \$OUT/gpu-check-$phase.log missing or without the summary"
  run nogpu $phase
  [ $r -eq 0 ] || { fail "$phase without a GPU: exit $r"; cat "$T/out"; }
  grep -q "the GPU part did not run" "$T/out" || fail "$phase without a GPU: does not say the GPU part did not run"
done
(cd "$T" && bash "$SRC/scripts/gpu-check" nonsense) > "$T/out" 2>&1
r=$?
[ $r -eq 2 ] && grep -q "unknown phase 'nonsense'" "$T/out" || fail "an unknown phase: exit $r"
[ $fails -eq 0 ] && echo "gpu-check decisions: all as expected (unusable GPU fails both phases, no GPU passes and says so, \$OUT log, bad phase)"
exit $((fails > 0))
