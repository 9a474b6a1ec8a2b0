"""A decision of the lane analysis, before it is placed at a file's line and column."""
from __future__ import annotations

from dataclasses import dataclass

TRANSLATE = "translate"
REWRITE = "rewrite"
REFUSE = "refuse"


@dataclass(frozen=True)
class Verdict:
    """One decision: ``action`` translate / rewrite / refuse, at significant position ``at``, by check ``check``,
    with the reason (and for refusals a hint). A rewrite inserts ``insert[1]`` before significant position
    ``insert[0]``."""

    action: str
    check: str
    at: int
    reason: str
    hint: str = ""
    insert: tuple[int, str] | None = None
