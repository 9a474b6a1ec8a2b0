"""Command line: ``portattn-hipify INPUT -o OUTPUT [--check] [--mode auto|project|user] [--explain] [-q]``.

Exit status: 0 done (or up to date), 1 refused or out of date, 2 the run could not start or could not write
safely (bad arguments, a missing or unreadable input, an output that overlaps the input or is not generated).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import lexer
from .diagnostics import Diagnostic
from .source import SourceFile
from .translate import TranslationError, is_prelude, translate
from .tree import Plan, UsageError, check, plan, read_sources, write

MODES = ("auto", "project", "user")


def tree_names(texts: dict[str, str]) -> frozenset[str]:
    """Names defined anywhere in the tree (a header's ``cudaCheck`` macro is the user's in every file)."""
    names: set[str] = set()
    for rel, text in texts.items():
        try:
            names |= SourceFile(text, prelude=is_prelude(rel)).defined_names
        except lexer.LexError:
            continue  # reported when the file is translated
    return frozenset(names)


def generate(work: Plan, texts: dict[str, str], strict: bool, explain: bool = False
             ) -> tuple[dict[str, str], list[Diagnostic], list[Diagnostic]]:
    """Translate every source: ({output path: text}, refusals, notes: the rewrites, and with ``explain`` the
    reasons for what was translated)."""
    outputs: dict[str, str] = {}
    errors: list[Diagnostic] = []
    notes: list[Diagnostic] = []
    names = tree_names(texts)
    for rel, text in texts.items():
        path = work.sources[rel]
        try:
            result = translate(text, work.origin(rel), str(path), prelude=is_prelude(rel), strict=strict,
                               user_names=names)
        except TranslationError as exc:
            errors.extend(exc.diagnostics)
            continue
        outputs[rel] = result.text
        notes.extend(result.rewrites)
        if explain:
            notes.extend(result.notes)
    return outputs, errors, notes


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="portattn-hipify",
        description="Translate CUDA kernel sources (*.cu, *.cuh, *.h) to HIP for 64-lane AMD waves. INPUT is a "
        "folder or one file; OUTPUT is a folder (or a file, for a file input) that does not overlap INPUT.",
    )
    parser.add_argument("input", metavar="INPUT", help="source folder or file")
    parser.add_argument("-o", "--output", metavar="OUTPUT", required=True,
                        help="output folder, or output file for a file INPUT")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if OUTPUT differs from what would be generated")
    parser.add_argument("--mode", choices=MODES, default="auto",
                        help="project: portattn's own rules (lane counts only through the prelude); user: judge "
                        "lane constants and warpSize by their meaning; auto (default): project when INPUT's folder "
                        "holds pa_prelude.cuh")
    parser.add_argument("--explain", action="store_true",
                        help="also print why each cross-lane operation and lane-like constant was translated")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 refused or out of date, 2 cannot run safely)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        work = plan(Path(args.input), Path(args.output), args.output.endswith(("/", os.sep)))
        texts = read_sources(work)
    except UsageError as exc:
        for line in exc.lines:
            print(f"portattn-hipify: error: {line}", file=sys.stderr)
        return 2
    strict = work.project if args.mode == "auto" else args.mode == "project"
    outputs, errors, notes = generate(work, texts, strict, args.explain)
    if errors:
        for d in errors:
            print(d, file=sys.stderr)
        print(f"portattn-hipify: {len(errors)} error(s), nothing written", file=sys.stderr)
        return 1
    if not args.quiet:
        for d in sorted(notes, key=lambda n: (n.path, n.line, n.col)):
            print(d)
    if args.check:
        problems = check(work, outputs)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"portattn-hipify: {args.output} is out of date; regenerate with: "
                  f"portattn-hipify {args.input} -o {args.output}", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"portattn-hipify: {args.output} is up to date ({len(outputs)} files)")
        return 0
    try:
        done = write(work, outputs)
    except UsageError as exc:
        for line in exc.lines:
            print(f"portattn-hipify: error: {line}", file=sys.stderr)
        return 2
    if not args.quiet:
        for line in done:
            print(line)
    return 0
