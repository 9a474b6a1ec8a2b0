#!/usr/bin/env bash
# Install current ROCm compile toolchains (hiprtc + comgr) from Debian in minimal chroots, to compile and inspect
# the AMD kernels with more than one ROCm release on a Debian bookworm machine (whose own ROCm is 5.2). Idempotent.
#
# One toolchain per chroot, under $PORTATTN_ROCM_TOOLCHAINS (default /var/lib/portattn/rocm-toolchains):
#   debian-sid           Debian sid:          libamdhip64-6 (hiprtc inside), libhiprtc-builtins6, libamd-comgr3
#   debian-experimental  Debian experimental: libhiprtc7, libamd-comgr3
# plus llvm-N (llvm-objdump) for the LLVM that comgr is built on, for disassembly. Each is
#   <dir>/<name>/portattn-toolchain.json   the manifest (what portattn reads; marks the directory as ours)
#   <dir>/<name>/root/                     debootstrap --variant=minbase with python3 (the compile worker's only need)
# A directory without our manifest is never touched. portattn finds the toolchains by the manifest
# (portattn/runtime/toolchains.py) and runs the compile worker with `chroot <root> python3 -c ...` (root only).
#
# Environment: PORTATTN_ROCM_TOOLCHAINS (directory), PORTATTN_ROCM_CHROOTS (names to make, default
# "debian-sid debian-experimental"; "none" makes none), PORTATTN_DEBIAN_MIRROR (default: the Debian mirror that this
# machine's apt sources name). Without root, apt-get or a Debian host the script says why and exits 0.
set -euo pipefail

DIR=${PORTATTN_ROCM_TOOLCHAINS:-/var/lib/portattn/rocm-toolchains}
WANTED=${PORTATTN_ROCM_CHROOTS:-debian-sid debian-experimental}
APT_OPTS=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3 -o Dpkg::Use-Pty=0)
export DEBIAN_FRONTEND=noninteractive

say() { echo "rocm chroots: $*"; }

# name -> "suite|extra apt source suite|apt target release|packages"
spec() {
    case "$1" in
        debian-sid) echo "sid|||libamdhip64-6 libhiprtc-builtins6 libamd-comgr3" ;;
        debian-experimental) echo "sid|experimental|experimental|libhiprtc7 libamd-comgr3" ;;
        *) return 1 ;;
    esac
}

if [ "$WANTED" = none ] || [ -z "$WANTED" ]; then
    say "skipping: PORTATTN_ROCM_CHROOTS=${WANTED:-<empty>}"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    say "skipping: not root (chroots need root to make and to use)"
    exit 0
fi
if ! command -v apt-get >/dev/null || [ ! -f /etc/debian_version ]; then
    say "skipping: not a Debian machine with apt-get"
    exit 0
fi

mirror() {  # the first Debian archive URI in this machine's apt sources
    [ -n "${PORTATTN_DEBIAN_MIRROR:-}" ] && { echo "$PORTATTN_DEBIAN_MIRROR"; return; }
    local uri
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\/\?\)$/\1/p' | head -n1)
    [ -z "$uri" ] && uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\/debian\/\?\)[[:space:]].*/\2/p' | head -n1)
    echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR=$(mirror)

if ! command -v debootstrap >/dev/null; then
    say "apt-get install debootstrap"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

manifest() {  # name suite state packages...
    local name=$1 suite=$2 state=$3
    shift 3
    local pkgs
    pkgs=$(printf '"%s", ' "$@")
    printf '{"name": "%s", "suite": "%s", "mirror": "%s", "state": "%s", "packages": [%s], "made_by": "%s"}\n' \
        "$name" "$suite" "$MIRROR" "$state" "${pkgs%, }" "portattn scripts/install-rocm-chroots.sh" \
        >"$DIR/$name/portattn-toolchain.json"
}

installed() {  # root packages... : all installed?
    local root=$1
    shift
    [ $# -gt 0 ] || return 1
    local status
    for p in "$@"; do
        status=$(chroot "$root" dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$status" = installed ] || return 1
    done
}

BASE=""  # a fresh minbase root made in this run, copied for the next toolchain instead of a second debootstrap
trap '[ -z "$BASE" ] || rm -rf "$BASE"' EXIT

make_root() {  # name suite
    local name=$1 suite=$2 root="$DIR/$1/root"
    if [ -n "$BASE" ]; then
        say "$name: copying the minimal $suite root"
        cp -a "$BASE" "$root"
    else
        say "$name: debootstrap --variant=minbase $suite from $MIRROR"
        local log="$DIR/$name/debootstrap.log"
        if ! debootstrap --variant=minbase --include=python3 "$suite" "$root" "$MIRROR" >"$log" 2>&1; then
            say "$name: debootstrap failed (last lines of $log):"
            tail -n 5 "$log"
            return 1
        fi
        rm -f "$log"
        BASE="$DIR/.base-$suite-$$"
        cp -a "$root" "$BASE"
    fi
}

make_toolchain() {  # name
    local name=$1 line suite extra release pkgs root start
    start=$(date +%s)
    if ! line=$(spec "$name"); then
        say "skipping $name: unknown toolchain (known: debian-sid debian-experimental)"
        return 0
    fi
    IFS='|' read -r suite extra release pkgs <<<"$line"
    read -r -a pkgs <<<"$pkgs"
    root="$DIR/$name/root"
    if [ -e "$DIR/$name" ] && [ ! -f "$DIR/$name/portattn-toolchain.json" ]; then
        say "skipping $name: $DIR/$name exists and was not made by this script"
        return 0
    fi
    if [ -d "$root" ] && installed "$root" "${pkgs[@]}"; then
        say "$name: present ($(chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' "${pkgs[0]}"))"
        return 0
    fi
    mkdir -p "$DIR/$name"
    manifest "$name" "$suite" creating "${pkgs[@]}"
    if [ ! -x "$root/usr/bin/python3" ]; then
        rm -rf "$root"  # a root left half made by an interrupted run of this script (the manifest says ours)
        make_root "$name" "$suite" || return 1
    fi
    local target=()
    if [ -n "$extra" ]; then
        echo "deb $MIRROR $extra main" >"$root/etc/apt/sources.list.d/portattn-$extra.list"
    fi
    [ -n "$release" ] && target=(-t "$release")
    chroot "$root" apt-get "${APT_OPTS[@]}" update -qq
    local missing=()
    for p in "${pkgs[@]}"; do
        [[ "$(chroot "$root" apt-cache policy "$p" 2>/dev/null)" == *"Candidate: "[0-9]* ]] || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "skipping $name: Debian $suite${extra:+/$extra} has no ${missing[*]}; removing the root made for it"
        rm -rf "$DIR/$name"
        return 0
    fi
    chroot "$root" apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "${target[@]}" "${pkgs[@]}" \
        >/dev/null
    # llvm-objdump of the LLVM that comgr is built on (it knows the same processors).
    local llvm
    llvm=$(chroot "$root" dpkg-query -W -f='${Depends}' libamd-comgr3)
    llvm=$(grep -o 'libllvm[0-9]\+' <<<"$llvm" || true)
    llvm=${llvm%%$'\n'*}
    if [ -n "$llvm" ]; then
        chroot "$root" apt-get "${APT_OPTS[@]}" install -y -qq --no-install-recommends "${target[@]}" \
            "llvm-${llvm#libllvm}" >/dev/null || say "$name: llvm-${llvm#libllvm} not installed (no disassembly)"
        pkgs+=("llvm-${llvm#libllvm}")
    fi
    chroot "$root" apt-get clean
    manifest "$name" "$suite" ready "${pkgs[@]}"
    say "$name: installed $(chroot "$root" dpkg-query -W -f='${Package} ${Version}  ' "${pkgs[@]}") in $(($(date +%s) - start)) s"
}

mkdir -p "$DIR"
status=0
for name in $WANTED; do
    make_toolchain "$name" || status=1
done
exit $status
