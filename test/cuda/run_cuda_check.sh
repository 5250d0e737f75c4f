#!/bin/sh
# ctest cuda-kernels: amprt-cuda-check on this machine. With a CUDA device
# every kernel must agree with the CPU runtime (exit 0). Without one the
# checker must say so cleanly: exit 2 and "no CUDA device" (the runtime's
# refusal is what is tested then; the kernels themselves are checked by
# scripts/gpu-check on a GPU machine).
out=$("$1" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 2 ]; then
  echo "$out" | grep -q "no CUDA device" || { echo "exit 2 without the no-device message"; exit 1; }
  echo "no CUDA device here: the clean refusal was checked, the kernels were not run"
  exit 0
fi
exit $rc
