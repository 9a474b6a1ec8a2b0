"""Resource usage of a compiled kernel, and occupancy from it."""
from __future__ import annotations

import re
import struct
from dataclasses import asdict, dataclass

from .target import WAVE_SLOTS, Target


@dataclass(frozen=True)
class Resources:
    """Per-kernel resources as the compiler reports them.

    ``registers`` is NVIDIA's per-thread register count or AMD's unified VGPR (+AGPR) count; ``spill_bytes`` is
    NVIDIA spill stores + loads or AMD VGPR/SGPR spills; ``scratch_bytes`` is the stack frame / private segment.
    """

    registers: int
    static_smem: int
    spill_bytes: int
    scratch_bytes: int
    wavefront_size: int = 0
    agprs: int = 0
    sgprs: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str) -> Resources:
    """Read registers, stack, spills and static shared memory from a ``-Xptxas=-v`` log (one kernel)."""
    regs = _PTXAS_REGS.search(log)
    frame = _PTXAS_FRAME.search(log)
    if regs is None or frame is None:
        raise ValueError(f"no ptxas resource line in the compiler log:\n{log}")
    smem = _PTXAS_SMEM.search(log)
    return Resources(
        registers=int(regs.group(1)),
        static_smem=int(smem.group(1)) if smem else 0,
        spill_bytes=int(frame.group(2)) + int(frame.group(3)),
        scratch_bytes=int(frame.group(1)),
        wavefront_size=32,
    )


_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04


def _elf_sections(elf: bytes) -> dict[str, bytes | int]:
    """ELF64 section name -> contents (or size, for sections without file data)."""
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    entsize, count, strndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]
    names = headers[strndx][4]
    out: dict[str, bytes | int] = {}
    for name_off, kind, _, _, off, size, *_ in headers:
        name = elf[names + name_off : elf.index(b"\0", names + name_off)].decode()
        out[name] = size if kind == 8 else elf[off : off + size]  # 8: SHT_NOBITS
    return out


def parse_cubin(cubin: bytes, function: str) -> Resources:
    """Registers, stack frame and static shared memory of ``function`` from a cubin's ``.nv.info`` records.

    A cubin does not record spills separately: they live in the stack frame, so ``spill_bytes`` is the frame
    size (exact when it is zero). The 1 KiB system reserve of sm_90 is not counted as static shared memory.
    """
    sections = _elf_sections(cubin)
    info = sections.get(".nv.info")
    if not isinstance(info, bytes):
        raise ValueError("cubin has no .nv.info section")
    attrs: dict[int, int] = {}
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr, size = info[pos], info[pos + 1], struct.unpack_from("<H", info, pos + 2)[0]
        if fmt == _EIFMT_SVAL:
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and size == 8:
                attrs[attr] = struct.unpack_from("<I", info, pos + 8)[0]
            pos += 4 + size
        else:
            pos += 4
    if _EIATTR_REGCOUNT not in attrs:
        raise ValueError("cubin records no register count")
    shared = sections.get(f".nv.shared.{function}", 0)
    shared = shared if isinstance(shared, int) else len(shared)
    if any(n.startswith(".nv.shared.reserved.") for n in sections):
        shared = max(0, shared - 1024)
    frame = attrs.get(_EIATTR_FRAME_SIZE, 0)
    return Resources(registers=attrs[_EIATTR_REGCOUNT], static_smem=shared, spill_bytes=frame,
                     scratch_bytes=frame, wavefront_size=32)


def nvidia_blocks_per_sm(res: Resources, threads: int, smem_bytes: int, target: Target) -> int:
    """Resident blocks per SM of a kernel launched with ``threads`` threads and ``smem_bytes`` of dynamic shared
    memory: limited by registers, shared memory, threads and the block slot count."""
    warps = -(-threads // 32)
    regs_per_warp = -(-max(res.registers, 1) * 32 // 256) * 256
    by_regs = (65536 // regs_per_warp) // warps
    smem = res.static_smem + smem_bytes + 1024  # the runtime reserves 1 KiB per block
    by_smem = target.smem_per_multiprocessor // smem
    return max(0, min(by_regs, by_smem, 2048 // threads, 32))


def amd_waves_per_simd(res: Resources, threads: int, smem_bytes: int, target: Target) -> int:
    """Waves per SIMD of a kernel on an AMD ``target`` (its family's ``WAVE_SLOTS`` rules): whole workgroups of
    ``threads`` threads with ``smem_bytes`` of dynamic LDS each, limited by vector registers and LDS."""
    waves_per_group = -(-threads // target.lanes)
    return amd_groups_per_cu(res, threads, smem_bytes, target) * waves_per_group // WAVE_SLOTS[target.family].simds


def amd_groups_per_cu(res: Resources, threads: int, smem_bytes: int, target: Target) -> int:
    """Resident workgroups per CU of a kernel on an AMD ``target`` (see ``amd_waves_per_simd``)."""
    slots = WAVE_SLOTS.get(target.family)
    if slots is None:
        raise ValueError(f"no occupancy rules for {target.arch} (family {target.family}); known: "
                         f"{', '.join(WAVE_SLOTS)}")
    regs = res.registers if slots.unified else max(res.registers, res.agprs)
    regs = -(-max(regs, 1) // slots.granule) * slots.granule
    by_vgpr = min(slots.max_waves, slots.vgprs // regs)
    waves_per_group = -(-threads // target.lanes)
    lds = -(-(res.static_smem + smem_bytes) // 512) * 512
    groups_by_lds = target.smem_per_multiprocessor // lds if lds else 32
    groups_by_vgpr = (by_vgpr * slots.simds) // waves_per_group
    return min(groups_by_lds, groups_by_vgpr, 32)


def blocks_per_multiprocessor(res: Resources, threads: int, smem_bytes: int, target: Target) -> int:
    """Resident blocks (workgroups) per SM (CU) of a kernel on ``target``, at least 1."""
    if target.vendor == "hip":
        return max(1, amd_groups_per_cu(res, threads, smem_bytes, target))
    return max(1, nvidia_blocks_per_sm(res, threads, smem_bytes, target))


def occupancy(res: Resources, threads: int, smem_bytes: int, target: Target) -> str:
    """Resident waves per SIMD (AMD) or blocks per SM (NVIDIA), as text for reports."""
    if target.vendor == "hip":
        return f"{amd_waves_per_simd(res, threads, smem_bytes, target)} waves/SIMD"
    return f"{nvidia_blocks_per_sm(res, threads, smem_bytes, target)} blocks/SM"
