"""What a kernel is built for: vendor, arch, lanes per wave and the limits the selector needs.

``Target.detect(device)`` reads them from torch; ``Target.for_arch("sm_90")`` gives the same description for
a named arch without a GPU (compile-only work: reports, CI).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from ..errors import UnsupportedTargetError
from . import environ


@dataclass(frozen=True)
class ArchInfo:
    """What portattn knows of an arch without a GPU. Multiprocessor counts are those of the common part (A100,
    H100 SXM, MI210, MI300X, ...) and serve offline work only; a detected GPU reports its own. On RDNA a
    "multiprocessor" is a workgroup processor (two CUs, four SIMDs and their shared LDS: HIP's default WGP mode)."""

    family: str  # the tuning family that keys the kernels' tile tables
    lanes: int
    multiprocessors: int
    smem_per_block: int  # opt-in maximum
    smem_per_multiprocessor: int
    min_rocm: str = ""  # AMD: the first ROCm release whose compiler targets this processor (for messages)


@dataclass(frozen=True)
class WaveSlots:
    """How many waves of a kernel an AMD SIMD holds (the occupancy rules of one arch family, as data).

    ``vgprs`` vector registers per lane of a SIMD for the family's wave size, allocated in ``granule`` steps;
    ``unified``: AGPRs come out of the same file (gfx90a and later; ``.vgpr_count`` then counts both), else the
    AGPR file is separate and as large (gfx908); ``max_waves`` per SIMD; ``simds`` that share one
    multiprocessor's LDS (its workgroups' waves spread over them)."""

    vgprs: int
    granule: int
    unified: bool
    max_waves: int
    simds: int


KNOWN_ARCHS: dict[str, ArchInfo] = {
    "sm_80": ArchInfo("sm80", 32, 108, 166912, 167936),
    "sm_86": ArchInfo("sm86", 32, 84, 101376, 102400),
    "sm_89": ArchInfo("sm86", 32, 128, 101376, 102400),
    "sm_90": ArchInfo("sm90", 32, 132, 232448, 233472),
    "gfx908": ArchInfo("cdna1", 64, 120, 65536, 65536, "4.0"),  # MI100
    "gfx90a": ArchInfo("cdna2", 64, 104, 65536, 65536, "4.5"),  # MI210 (MI250X: 220)
    "gfx942": ArchInfo("cdna3", 64, 304, 65536, 65536, "5.7"),  # MI300X / MI325X
    "gfx950": ArchInfo("cdna4", 64, 256, 65536, 163840, "7.0"),  # MI350X / MI355X: 160 KiB of LDS per CU
    "gfx1100": ArchInfo("rdna3", 32, 48, 65536, 131072, "5.5"),  # RX 7900 XTX: 48 WGPs
    "gfx1201": ArchInfo("rdna4", 32, 32, 65536, 131072, "6.4"),  # RX 9070 XT: 32 WGPs
}

# Occupancy rules per AMD family (LLVM's AMDGPU subtarget tables: VGPR file, allocation granule, waves per SIMD).
WAVE_SLOTS: dict[str, WaveSlots] = {
    "cdna1": WaveSlots(vgprs=256, granule=4, unified=False, max_waves=10, simds=4),
    "cdna2": WaveSlots(vgprs=512, granule=8, unified=True, max_waves=8, simds=4),
    "cdna3": WaveSlots(vgprs=512, granule=8, unified=True, max_waves=8, simds=4),
    "cdna4": WaveSlots(vgprs=512, granule=8, unified=True, max_waves=8, simds=4),
    "rdna3": WaveSlots(vgprs=1536, granule=24, unified=True, max_waves=16, simds=4),
    "rdna4": WaveSlots(vgprs=1536, granule=24, unified=True, max_waves=16, simds=4),
}

LANES_ENV = "PORTATTN_LANES"
# NVIDIA can execute the 64-lane mapping of this AMD arch (wave64 emulation, a verification mode).
EMULATED_WAVE64_ARCH = "gfx90a"


@dataclass(frozen=True)
class Target:
    """A GPU as the kernel compiler and selector see it."""

    vendor: str  # "cuda" or "hip"
    arch: str  # "sm_90", "gfx90a", ...
    lanes: int  # lanes per wave the kernels are built for
    multiprocessors: int
    smem_per_block: int  # bytes a block may use (opt-in maximum)
    smem_per_multiprocessor: int
    native_lanes: int = 0  # the hardware's wave size; 0 means "same as lanes"
    emulates: str = ""  # under emulation: the arch whose lane mapping and tiles are executed

    @property
    def hardware_lanes(self) -> int:
        return self.native_lanes or self.lanes

    @classmethod
    def for_arch(cls, arch: str, lanes: int | None = None) -> "Target":
        """The target for a named arch, without touching a GPU."""
        if arch not in KNOWN_ARCHS:
            raise UnsupportedTargetError(f"unknown arch {arch!r}; known: {', '.join(sorted(KNOWN_ARCHS))}")
        a = KNOWN_ARCHS[arch]
        vendor = "hip" if arch.startswith("gfx") else "cuda"
        return cls(vendor, arch, a.lanes, a.multiprocessors, a.smem_per_block, a.smem_per_multiprocessor).with_lanes(
            lanes)

    @classmethod
    def detect(cls, device: "object") -> "Target":
        """Describe the GPU behind a torch device; honours ``PORTATTN_LANES``."""
        import torch

        dev = torch.device(device)
        if dev.type != "cuda":
            raise UnsupportedTargetError(f"portattn needs a GPU tensor, got device {dev}")
        props = torch.cuda.get_device_properties(dev)
        if torch.version.hip is not None:
            vendor = "hip"
            arch = str(getattr(props, "gcnArchName", "")).split(":")[0]
        else:
            vendor = "cuda"
            arch = f"sm_{props.major}{props.minor}"
        known = KNOWN_ARCHS.get(arch)
        lanes = int(getattr(props, "warp_size", 0) or (known.lanes if known else (64 if vendor == "hip" else 32)))
        smem_block = int(getattr(props, "shared_memory_per_block_optin", 0)
                         or (known.smem_per_block if known else 49152))
        smem_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0)
                      or (known.smem_per_multiprocessor if known else smem_block))
        target = cls(vendor, arch, lanes, int(props.multi_processor_count), smem_block, smem_sm)
        env = os.environ.get(LANES_ENV, "").strip()
        if env and not env.isdigit():
            raise UnsupportedTargetError(f"{LANES_ENV} must be a lane count such as 32 or 64, got {env!r}")
        return target.with_lanes(int(env) if env else None)

    def with_lanes(self, lanes: int | None) -> "Target":
        """This target built for ``lanes`` lanes per wave (None: the hardware's own).

        On NVIDIA, 64 lanes selects the wave64 emulation: the kernels are built with ``PA_WARP_SIZE=64``, a wave
        is two warps, and the selector picks the tiles of ``EMULATED_WAVE64_ARCH``. It exists to execute the AMD
        thread mapping on NVIDIA hardware; it is slower and never chosen by default.
        """
        native = self.hardware_lanes
        base = replace(self, lanes=native, native_lanes=0, emulates="")
        if lanes is None or lanes == native:
            return base
        if self.vendor == "cuda" and native == 32 and lanes == 64:
            return replace(base, lanes=64, native_lanes=native, emulates=EMULATED_WAVE64_ARCH)
        choices = f"{native}" + (" or 64 (emulation)" if self.vendor == "cuda" else "")
        raise UnsupportedTargetError(
            f"{self.arch} runs {native}-lane waves; lanes={lanes} is not supported "
            f"(set {LANES_ENV} to {choices}, or leave it unset)"
        )

    @property
    def tuning_arch(self) -> str:
        """The arch whose tile configurations apply: the emulated one under emulation."""
        return self.emulates or self.arch

    @property
    def family(self) -> str:
        """The tuning family that keys the kernels' tile tables (of the emulated arch under emulation)."""
        try:
            return KNOWN_ARCHS[self.tuning_arch].family
        except KeyError:
            raise UnsupportedTargetError(
                f"no kernel configuration for arch {self.tuning_arch!r}; supported: {', '.join(KNOWN_ARCHS)}"
            ) from None

    @property
    def overlapping_launches(self) -> bool:
        """Whether a kernel may be launched to overlap the end of the previous kernel on its stream (programmatic
        dependent launch, NVIDIA sm_90 and later; the kernel waits with ``pa_wait_prior_grid``)."""
        return self.vendor == "cuda" and int("".join(c for c in self.arch[3:] if c.isdigit()) or 0) >= 90

    @property
    def emulated(self) -> bool:
        """True when the kernels' lane count differs from the hardware's (a verification mode)."""
        return self.lanes != self.hardware_lanes

    def __str__(self) -> str:
        extra = f", {self.emulates} mapping emulated on {self.hardware_lanes}-lane waves" if self.emulated else ""
        return f"{self.vendor}:{self.arch} ({self.lanes} lanes{extra})"


def available_targets(device: "object" = None) -> list[Target]:
    """Every (backend, lanes) this machine can execute on ``device`` (default: the current GPU); empty without
    a GPU. On NVIDIA: the native 32-lane target and the wave64 emulation; on AMD: the native target."""
    import torch

    if not torch.cuda.is_available():
        return []
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    native = Target.detect(dev).with_lanes(None)
    return [native, native.with_lanes(64)] if native.vendor == "cuda" and native.lanes == 32 else [native]


_detected: dict[tuple[int, str], Target] = {}
_detected_lock = threading.Lock()


def target_for(device: "object") -> Target:
    """The target of a torch GPU device, detected once per (device, ``PORTATTN_LANES``) and then cached."""
    import torch

    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    key = (index, environ.get(LANES_ENV) or "")
    target = _detected.get(key)
    if target is None:
        target = Target.detect(torch.device("cuda", index))
        with _detected_lock:
            _detected[key] = target
    return target
