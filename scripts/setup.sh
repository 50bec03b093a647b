#!/usr/bin/env bash
# Make this checkout ready to build and test: a virtualenv with aot and its pinned dependencies,
# and a Vulkan driver (Mesa lavapipe) so the Vulkan device tests have a real device on a CPU-only
# machine. Says what it does; does nothing twice.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
stamp="$VENV/.aot-installed"

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtualenv $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing aot and its dependencies into $VENV (pip install -e '.[test,torch]')"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test,torch]'
  touch "$stamp"
else
  echo "setup: $VENV is up to date"
fi
# The torch extra must stay the CPU build: say which one is installed (reads metadata, imports nothing).
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
try:
    version = md.version("torch")
except md.PackageNotFoundError:
    print("setup: torch is not installed: PyTorch models cannot be built (pip install -e '.[torch]')")
else:
    cuda = sorted({d.metadata["Name"] for d in md.distributions() if (d.metadata["Name"] or "").startswith("nvidia-")})
    print(f"setup: torch {version}" + (f" with {len(cuda)} CUDA packages ({', '.join(cuda[:3])}...)" if cuda
                                       else " (CPU build: no CUDA packages)"))
PY

have_vulkan() {
  # no `grep -q` here: it closes the pipe early and pipefail would turn that into a failure
  ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null || return 1
  # One ICD in either folder is enough (`ls` of both globs fails when one folder is empty).
  for icd in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
    [ -e "$icd" ] && return 0
  done
  return 1
}
if have_vulkan; then
  echo "setup: Vulkan loader and an ICD are present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing Mesa's Vulkan driver (apt-get install mesa-vulkan-drivers libvulkan1)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  if have_vulkan; then echo "setup: Vulkan driver installed"; else echo "setup: WARNING: Vulkan still not found"; fi
else
  echo "setup: WARNING: no Vulkan driver, and no root/apt-get to install one."
  echo "setup:          Vulkan builds and device tests will fail; install mesa-vulkan-drivers libvulkan1."
fi

# A C compiler: the tests compile every generated C header (and the example program) with it.
if command -v cc >/dev/null; then
  echo "setup: C compiler present ($(command -v cc))"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing a C compiler (apt-get install gcc libc6-dev)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq gcc libc6-dev >/dev/null
else
  echo "setup: WARNING: no C compiler and no root/apt-get to install one; install gcc."
fi
