#!/usr/bin/env bash
# Installs the project into .venv (or into the active virtualenv), picking the right PyTorch build:
#   - a torch that already imports (for example your CUDA build) is kept;
#   - with an NVIDIA GPU visible, the default (CUDA) wheel from PyPI;
#   - otherwise the CPU wheel from download.pytorch.org, falling back to the default index if that is unreachable.
# Usage: bash scripts/setup.sh [--dev] [--export] [--floor]
#   --dev     the test tools, every optional engine, and what the browser and transformers.js tests run:
#             Debian's chromium and chromium-driver (with apt-get, as root or with passwordless sudo) and the pinned
#             transformers.js (with npm, into ~/.cache/hf_vanilla_transformer). Where one cannot be installed, the
#             tests that need it skip and name this command.
#   --export  the inference engines the model exports to (CTranslate2, ONNX Runtime).
#   --floor   into .venv-floor, with the oldest transformers that pyproject.toml allows (the rest at their newest):
#             the other end of the supported range, which scripts/test.sh tests too.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=()
dev=0
venv=.venv
for arg in "$@"; do
  case "$arg" in
    --dev) extras+=(dev); dev=1 ;;
    --export) extras+=(export) ;;
    --floor) venv=.venv-floor ;;
    *) echo "setup.sh: unknown option $arg (expected --dev, --export and/or --floor)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if [ -z "${VIRTUAL_ENV:-}" ] || [ "$venv" = .venv-floor ]; then
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  python=$venv/bin/python
fi
pip=("$python" -m pip --disable-pip-version-check -q)

if ! "$python" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" install "torch>=2.6"
  else
    "${pip[@]}" install --retries 1 --timeout 20 --index-url https://download.pytorch.org/whl/cpu "torch>=2.6" \
      || "${pip[@]}" install "torch>=2.6"
  fi
fi

spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi
floor=()
if [ "$venv" = .venv-floor ]; then
  # pyproject.toml's lower bound of transformers, as an exact pin.
  floor=("transformers==$("$python" -c 'import re; print(re.search(r"\"transformers>=([\w.]+)", open("pyproject.toml").read())[1])')")
fi
"${pip[@]}" install -e "$spec" "${floor[@]}"

if [ "$dev" = 1 ]; then
  # The browser tests drive Debian's Chromium; never fatal: those tests skip, naming this command.
  if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo -n)
    if [ ${#sudo[@]} = 0 ] || sudo -n true 2>/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      "${sudo[@]}" apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
        || { "${sudo[@]}" apt-get update -q >/dev/null 2>&1 \
             && "${sudo[@]}" apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } \
        || echo "setup.sh: could not install chromium and chromium-driver: the browser tests will skip." >&2
    fi
  fi
  if command -v npm >/dev/null 2>&1; then
    "$python" -c "from hf_vanilla_transformer.interop.onnx_runtime import install_transformers_js as i; i()" \
      || echo "setup.sh: could not install transformers.js with npm: its tests will skip." >&2
  fi
fi
echo "Installed into $("$python" -c 'import sys; print(sys.prefix)') (torch $("$python" -c 'import torch; print(torch.__version__)'))"
