"""Exceptions raised by portattn."""
from __future__ import annotations


class PortattnError(RuntimeError):
    """Base class of portattn's run-time failures (compiler, driver)."""


class CompileError(PortattnError):
    """A kernel failed to compile.

    Carries the backend (``"nvrtc"`` or ``"hiprtc"``), the target arch, the compiler options, the compiler's
    log and the source text; :meth:`dump` returns the source with line numbers for reading the log against it.
    """

    def __init__(self, backend: str, arch: str, options: list[str], log: str, source: str, name: str) -> None:
        self.backend = backend
        self.arch = arch
        self.options = list(options)
        self.log = log
        self.source = source
        self.name = name
        super().__init__(
            f"{backend} failed to compile {name} for {arch}\n"
            f"options: {' '.join(self.options)}\n{log.strip()}"
        )

    def __reduce__(self) -> tuple:  # picklable: raised in compiler worker processes
        return type(self), (self.backend, self.arch, self.options, self.log, self.source, self.name)

    def dump(self) -> str:
        """The source with 1-based line numbers."""
        lines = self.source.splitlines()
        width = len(str(len(lines)))
        return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))


class DriverError(PortattnError):
    """A driver call (module load, launch, attribute) returned an error code."""

    def __init__(self, backend: str, call: str, code: object, detail: str = "") -> None:
        self.backend = backend
        self.call = call
        self.code = code
        self.detail = detail
        msg = f"{backend}: {call} failed with {code}"
        super().__init__(f"{msg}: {detail}" if detail else msg)

    def __reduce__(self) -> tuple:
        return type(self), (self.backend, self.call, self.code, self.detail)


class UnsupportedTargetError(PortattnError, ValueError):
    """The device or arch is not one portattn can build for."""
