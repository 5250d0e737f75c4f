#!/usr/bin/env bash
# Installs what AMP-MLIR needs and is missing, and nothing else:
#   - Debian packages (apt-get), checked one by one with dpkg-query;
#   - the project venv .venv with python/requirements.txt (re-run only when
#     that file changes).
# Idempotent: a second run installs nothing and prints one line per step.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build ccache g++ lld make pkg-config
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libdnnl-dev libgtest-dev graphviz zlib1g-dev
  python3 python3-venv
  clang-22 libclang-rt-22-dev libomp-22-dev clang-format-22
  libopenmpi-dev openmpi-bin
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

# The venv uses Debian's python3 so that it is the same on every machine.
PY=/usr/bin/python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.stamp
if [ ! -f "$stamp" ] || ! cmp -s python/requirements.txt "$stamp"; then
  echo "setup: installing Python packages into .venv (python/requirements.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r python/requirements.txt
  cp python/requirements.txt "$stamp"
else
  echo "setup: Python packages present"
fi

# .venv-ort: onnxruntime-training for the ORT-artifacts test (see
# python/requirements-ort.txt); torch is .venv's, through a .pth file
# written after the install so that pip installs every dependency here.
if [ ! -x .venv-ort/bin/python ]; then
  echo "setup: creating .venv-ort"
  "$PY" -m venv .venv-ort
fi
stamp=.venv-ort/.requirements.stamp
if [ ! -f "$stamp" ] || ! cmp -s python/requirements-ort.txt "$stamp"; then
  echo "setup: installing onnxruntime-training into .venv-ort (python/requirements-ort.txt)"
  site=$(.venv-ort/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -f "$site/amp_mlir_torch.pth"
  .venv-ort/bin/python -m pip install -q --upgrade pip
  .venv-ort/bin/python -m pip install -q -r python/requirements-ort.txt
  main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$main" > "$site/amp_mlir_torch.pth"
  cp python/requirements-ort.txt "$stamp"
else
  echo "setup: onnxruntime-training present"
fi
