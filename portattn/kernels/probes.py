"""Probe kernels of the verification suite: the prelude's cross-lane operations (``pa_prelude_probe.cu``) and the
MFMA building blocks (``pa_mfma_probe.cu``). They are built like any variant but are never used by attention."""
from __future__ import annotations

from dataclasses import dataclass

from ..runtime.target import Target


@dataclass(frozen=True)
class ProbeSpec:
    filename: str
    function: str
    threads: int
    lanes: int
    emulated: bool = False

    @property
    def defines(self) -> dict[str, int]:
        return {"PA_WARP_SIZE": self.lanes, "PA_THREADS": self.threads} | ({"PA_EMULATE_WAVE64": 1} if self.emulated
                                                                              else {})

    @property
    def label(self) -> str:
        return f"{self.function}[{self.lanes}l{'-emulated' if self.emulated else ''}]"


def prelude_probe(target: Target) -> ProbeSpec:
    """The cross-lane probe for ``target``'s lane count (128 threads)."""
    return ProbeSpec("pa_prelude_probe.cu", "pa_prelude_probe", 128, target.lanes, target.emulated)


def mfma_probe(target: Target, instruction: str) -> ProbeSpec:
    """The probe of one MFMA instruction (e.g. "16x16x16f16"); 64-lane builds only (256 threads)."""
    return ProbeSpec("pa_mfma_probe.cu", f"pa_mfma_probe_{instruction}", 256, target.lanes, target.emulated)
