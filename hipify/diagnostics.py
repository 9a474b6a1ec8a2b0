"""What the translator reports: refusals (errors) and the reasons behind rewrites and translations (notes)."""
from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
NOTE = "note"


@dataclass(frozen=True)
class Diagnostic:
    """A decision about one construct: where it is, the check or rule that made it, why, and how to fix it."""

    path: str
    line: int
    col: int
    message: str
    hint: str = ""
    check: str = ""  # the check or rule id
    severity: str = ERROR  # "error" (refused) or "note" (rewritten or translated, with the reason)

    def __str__(self) -> str:
        text = f"{self.path}:{self.line}:{self.col}: {self.severity}: {self.message}"
        if self.check:
            text += f" [{self.check}]"
        return text + (f"\n  hint: {self.hint}" if self.hint else "")


class TranslationError(Exception):
    """Raised when a file contains constructs that cannot be translated safely."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("\n".join(str(d) for d in diagnostics))
        self.diagnostics = diagnostics
