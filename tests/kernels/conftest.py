"""Shared by the kernel tests: the MFMA lane layouts as AMD publishes them (``mfma_layouts.json``)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

PUBLISHED_LAYOUTS = Path(__file__).with_name("mfma_layouts.json")
_ENTRY = re.compile(r"([ABD])\[(\d+)\]\[(\d+)\]")


def read_published_layouts() -> dict[str, dict[str, dict[str, list[list[tuple[int, int]]]]]]:
    """instruction -> architecture -> operand ("A", "B", "D") -> [lane][element] -> (row, column) of that operand,
    read from the calculator's output kept verbatim in ``mfma_layouts.json`` (plus "mnemonic" -> its spelling)."""
    data = json.loads(PUBLISHED_LAYOUTS.read_text())["instructions"]
    out: dict = {}
    for name, archs in data.items():
        for arch, entry in archs.items():
            tables: dict = {"mnemonic": entry["mnemonic"]}
            for operand in ("A", "B", "D"):
                lanes = entry[operand]["lanes"]
                width = len(entry[operand]["registers"])
                table = []
                for text in lanes:
                    cells = text.split(",")
                    assert len(cells) == width, f"{name} {arch} {operand}: {text!r} has not {width} entries"
                    parsed = [_ENTRY.fullmatch(c) for c in cells]
                    assert all(m and m.group(1) == operand for m in parsed), f"{name} {arch} {operand}: {text!r}"
                    table.append([(int(m.group(2)), int(m.group(3))) for m in parsed])
                tables[operand] = table
            out.setdefault(name, {})[arch] = tables
    return out


@pytest.fixture(scope="session")
def published_layouts():
    return read_published_layouts()
