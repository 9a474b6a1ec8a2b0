"""Vendor-guarded sections: which logical lines of a prelude file are compiled only for CUDA.

A branch is CUDA-only inside ``#if defined(PA_VENDOR_CUDA)`` / ``#ifdef PA_VENDOR_CUDA`` / ``#ifndef PA_VENDOR_HIP``
(alone or in a conjunction), or in the ``#else`` (or a later ``#elif``) of a plain ``#if defined(PA_VENDOR_HIP)`` /
``#ifdef PA_VENDOR_HIP``. Nesting is tracked.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lexer import TRIVIA, Token

VENDOR_CUDA = "PA_VENDOR_CUDA"
VENDOR_HIP = "PA_VENDOR_HIP"


def vendor_of_condition(words: list[str]) -> tuple[str | None, bool]:
    """Classify an #if/#elif condition (significant token texts): which vendor it implies and whether it is a
    single plain test, so that its negation implies the other vendor."""
    atoms: list[list[str]] = [[]]
    depth = 0
    for w in words:
        if w == "(":
            depth += 1
        elif w == ")":
            depth -= 1
        if depth == 0 and w == "||":
            return None, False
        if depth == 0 and w == "&&":
            atoms.append([])
        else:
            atoms[-1].append(w)
    implied: set[str] = set()
    for atom in atoms:
        negated = False
        while True:
            if atom[:1] == ["!"]:
                negated, atom = not negated, atom[1:]
            elif len(atom) >= 2 and atom[0] == "(" and atom[-1] == ")":
                atom = atom[1:-1]
            else:
                break
        if atom[:1] == ["defined"]:
            atom = [w for w in atom[1:] if w not in "()"]
        if len(atom) != 1 or atom[0] not in (VENDOR_CUDA, VENDOR_HIP):
            continue
        cuda = (atom[0] == VENDOR_CUDA) != negated
        implied.add("cuda" if cuda else "hip")
    if len(implied) != 1:
        return None, False
    return implied.pop(), len(atoms) == 1


@dataclass
class _Branch:
    cuda_only: bool = False  # the current branch is compiled only for CUDA
    after_plain_hip: bool = False  # an earlier branch was a plain HIP test: later branches imply CUDA


def cuda_only_lines(tokens: list[Token], lines: list[tuple[int, int]]) -> list[bool]:
    """For each logical line (a token index range), whether it lies inside a CUDA-only branch."""
    stack: list[_Branch] = []
    flags: list[bool] = []
    for start, end in lines:
        words = [t.text for t in tokens[start:end] if t.kind not in TRIVIA]
        name = words[1] if len(words) > 1 and words[0] == "#" else ""
        outer = any(b.cuda_only for b in stack[:-1])
        if name in ("if", "ifdef", "ifndef"):
            flags.append(any(b.cuda_only for b in stack))
            cond = words[2:]
            if name == "ifdef":
                cond = ["defined", *cond]
            elif name == "ifndef":
                cond = ["!", "defined", *cond]
            vendor, plain = vendor_of_condition(cond)
            stack.append(_Branch(vendor == "cuda", plain and vendor == "hip"))
        elif name in ("elif", "else") and stack:
            flags.append(outer)
            top = stack[-1]
            vendor, plain = vendor_of_condition(words[2:]) if name == "elif" else (None, False)
            top.cuda_only = vendor == "cuda" or top.after_plain_hip
            top.after_plain_hip = top.after_plain_hip or (plain and vendor == "hip")
        elif name == "endif" and stack:
            flags.append(outer)
            stack.pop()
        else:
            flags.append(any(b.cuda_only for b in stack))
    return flags
