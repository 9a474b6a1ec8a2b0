#!/usr/bin/env bash
# Install what portattn needs to compile AMD kernels (hiprtc) on a machine without an AMD GPU. Idempotent.
#
# On Debian bookworm, ROCm 5.2 comes from Debian's own archive:
#   libamdhip64-5   the HIP runtime; on ROCm 5.2 hiprtc lives inside it. Pulls in libamd-comgr2 (the compiler,
#                   with the device libraries built in) and libhsa-runtime64-1.
#   libamd-comgr2   named as well because the runtime opens it with dlopen at compile time.
#   llvm-15         llvm-objdump-15 / llvm-readelf-15 for disassembly and metadata checks (optional; wanted).
# libhiprtc-builtins5 and rocm-device-libs are not needed: the 5.2 runtime carries its own hiprtc header and
# comgr its own device libraries (neither package's files are opened by a compile).
# Then hip-python, whose 10.x releases find the libraries through ROCM_PATH at first use (portattn points it
# at a private directory of symlinks when ROCm has no libhiprtc.so, as with 5.2).
#
# Then scripts/install-rocm-chroots.sh: current ROCm releases (Debian sid's 6.x, experimental's 7.x) in minimal
# chroots, so that CI compiles the kernels with more than one ROCm generation (root only; its failure is reported
# and the AMD tests decide whether that matters).
#
# Environment: PYTHON (default python3), HIP_PYTHON_SPEC (default 'hip-python>=10.0,<11'), and those of
# install-rocm-chroots.sh. Without root or apt-get the system packages are skipped with a message (as is a failing
# pip install when not root), and the script exits 0.
set -euo pipefail

PY=${PYTHON:-python3}
HIP_PYTHON_SPEC=${HIP_PYTHON_SPEC:-'hip-python>=10.0,<11'}
PACKAGES=(libamdhip64-5 libamd-comgr2)
TOOLS=(llvm-15)

have_lib() {  # a library (any version) under /opt/rocm*/lib, $ROCM_PATH/lib or the loader's cache
    local stem=$1 d
    for d in "${ROCM_PATH:-/opt/rocm}/lib" /opt/rocm/lib /opt/rocm-*/lib; do
        compgen -G "$d/$stem.so*" >/dev/null && return 0
    done
    ldconfig -p 2>/dev/null | grep -q "$stem\.so" && return 0
    compgen -G "/usr/lib/*-linux-gnu/$stem.so*" >/dev/null
}

have_hiprtc() { (have_lib libhiprtc || have_lib libamdhip64) && have_lib libamd_comgr; }
have_objdump() { command -v llvm-objdump-15 >/dev/null || command -v llvm-objdump >/dev/null; }

missing=()
have_hiprtc || missing+=("${PACKAGES[@]}")
have_objdump || missing+=("${TOOLS[@]}")

if [ ${#missing[@]} -eq 0 ]; then
    echo "rocm toolchain: hiprtc and llvm-objdump present"
elif ! command -v apt-get >/dev/null; then
    echo "rocm toolchain: skipping: apt-get is not available (missing: ${missing[*]})"
elif [ "$(id -u)" -ne 0 ]; then
    echo "rocm toolchain: skipping: not root, cannot apt-get install ${missing[*]}"
else
    echo "rocm toolchain: apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash "$(dirname "$0")/install-rocm-chroots.sh" || echo "rocm toolchain: install-rocm-chroots.sh failed (exit $?)"

if ! have_hiprtc; then
    echo "rocm toolchain: skipping hip-python: no hiprtc library installed"
    exit 0
fi

if "$PY" - "$HIP_PYTHON_SPEC" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
spec = sys.argv[1]
try:
    from packaging.requirements import Requirement
    ok = Requirement(spec).specifier.contains(version("hip-python"), prereleases=True)
except (ImportError, PackageNotFoundError):
    ok = False
sys.exit(0 if ok else 1)
EOF
then
    echo "rocm toolchain: $("$PY" -c 'from importlib.metadata import version; print("hip-python", version("hip-python"))') present"
else
    echo "rocm toolchain: pip install '$HIP_PYTHON_SPEC'"
    if ! "$PY" -m pip install -q "$HIP_PYTHON_SPEC"; then
        [ "$(id -u)" -eq 0 ] && exit 1
        echo "rocm toolchain: skipping: pip could not install '$HIP_PYTHON_SPEC' as $(id -un)"
    fi
fi
