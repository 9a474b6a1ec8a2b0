"""Where portattn-hipify reads and writes, and the rules that keep it from losing a source.

The input is a folder (every ``*.cu``, ``*.cuh``, ``*.h`` under it) or one such file; the output is a folder, or a
file for a file input. Input and output must not overlap: an output folder equal to, inside, or containing the
input folder is refused, and so is an output that resolves to a source file. An existing output file is replaced
only when it carries the generated header; stale generated files are removed only when their header names the same
source tree. All checks happen before anything is written.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .translate import HEADER_PREFIX, split_header

SOURCE_SUFFIXES = (".cu", ".cuh", ".h")
PROJECT_MARKER = "pa_prelude.cuh"  # a tree with portattn's prelude at its root is portattn's own (project mode)


class UsageError(Exception):
    """Arguments or files that make the run impossible or unsafe; ``lines`` are the messages, one per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Plan:
    """What to translate and where: ``sources`` maps each output path (relative to ``out_root``) to its source."""

    sources: dict[str, Path]
    out_root: Path
    tree: str  # the input folder's name, recorded in each output's header
    input_root: Path  # the input folder (the file's folder for a file input)
    single: bool

    def origin(self, rel: str) -> str:
        return f"{self.tree}/{self.sources[rel].relative_to(self.input_root).as_posix()}"

    @property
    def project(self) -> bool:
        """Whether the input is portattn's own tree (its prelude sits at the root of the input folder)."""
        return (self.input_root / PROJECT_MARKER).is_file()


def source_files(root: Path) -> list[str]:
    """Relative POSIX paths of the *.cu / *.cuh / *.h files under ``root``, sorted."""
    files = (p for p in root.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)
    return sorted(p.relative_to(root).as_posix() for p in files)


def _inside(path: Path, folder: Path) -> bool:
    return folder in path.parents


def plan(input_path: Path, output: Path, output_is_folder: bool = False) -> Plan:
    """Check the locations and list the work. ``output_is_folder``: the output was written with a trailing slash.
    Raises UsageError."""
    if not input_path.exists():
        raise UsageError([f"input {input_path} not found"])
    src = input_path.resolve()
    if input_path.is_dir():
        if output.exists() and not output.is_dir():
            raise UsageError([f"output {output} is a file; the input {input_path} is a folder, so the output must be "
                              "a folder"])
        out = output.resolve()
        if out == src:
            raise UsageError([f"output folder {output} is the input folder: the generated files would replace the "
                              "CUDA sources; choose a folder outside it"])
        if _inside(out, src):
            raise UsageError([f"output folder {output} is inside the input folder {input_path}: the generated files "
                              "would become sources of the next run; choose a folder outside it"])
        if _inside(src, out):
            raise UsageError([f"input folder {input_path} is inside the output folder {output}: generated files could "
                              "land on the sources, and stale-file removal would look at them; choose an output folder "
                              "that does not contain the input"])
        sources = {rel: input_path / rel for rel in source_files(input_path)}
        return Plan(sources, output, src.name, input_path, single=False)
    if input_path.suffix not in SOURCE_SUFFIXES:
        raise UsageError([f"input {input_path} is not a CUDA source: expected a folder or a "
                          f"{', '.join(SOURCE_SUFFIXES)} file"])
    target = output / input_path.name if (output_is_folder or output.is_dir()) else output
    if target.resolve() == src:
        raise UsageError([f"output {target} is the input file: the generated file would replace the CUDA source; "
                          "choose another name or folder"])
    return Plan({target.name: input_path}, target.parent, src.parent.name, input_path.parent, single=True)


def read_sources(work: Plan) -> dict[str, str]:
    """The text of every source, by output path. Raises UsageError naming each file that is not UTF-8 text."""
    texts: dict[str, str] = {}
    problems = []
    for rel, path in work.sources.items():
        try:
            texts[rel] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"{path} is not UTF-8 text (byte {exc.start}); only source text can be translated")
        except OSError as exc:
            problems.append(f"cannot read {path}: {exc.strerror or exc}")
    if problems:
        raise UsageError(problems)
    return texts


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _generated_origin(path: Path) -> str | None:
    """The source recorded in a generated file's header, or None when the file is not generated."""
    text = _read(path)
    if text is None or not text.startswith(HEADER_PREFIX):
        return None
    return split_header(text)[0]


def _stale(work: Plan, outputs: dict[str, str]) -> tuple[list[Path], list[Path]]:
    """Output-folder files without a source: (generated from this tree: to remove, others: to leave)."""
    if work.single or not work.out_root.is_dir():
        return [], []
    remove, leave = [], []
    for rel in source_files(work.out_root):
        if rel in outputs:
            continue
        origin = _generated_origin(work.out_root / rel)
        (remove if origin is not None and origin.split("/", 1)[0] == work.tree else leave).append(work.out_root / rel)
    return remove, leave


def check(work: Plan, outputs: dict[str, str]) -> list[str]:
    """Differences between the output and what would be generated, one line each ("stale: path", ...)."""
    problems = []
    for rel in sorted(outputs):
        target = work.out_root / rel
        if not target.is_file():
            problems.append(f"missing: {target.as_posix()}")
        elif _read(target) != outputs[rel]:
            problems.append(f"stale: {target.as_posix()}")
    problems += [f"extra: {p.as_posix()}" for p in _stale(work, outputs)[0]]
    return sorted(problems, key=lambda line: line.split(": ", 1)[1])


def write(work: Plan, outputs: dict[str, str]) -> list[str]:
    """Write the outputs (only files whose text changes) and remove this tree's stale generated files. Every target
    is checked first; returns what was done, one line each. Raises UsageError (nothing written)."""
    sources = {p.resolve() for p in work.sources.values()}
    problems = []
    for rel in outputs:
        target = work.out_root / rel
        if target.resolve() in sources:
            problems.append(f"output {target} is a source file of the input; nothing written")
        elif target.is_dir():
            problems.append(f"output {target} is a folder; nothing written")
        elif target.exists() and _generated_origin(target) is None:
            problems.append(f"output {target} exists and was not generated by portattn-hipify (its first line is "
                            f"not '{HEADER_PREFIX}...'); move it away or choose another output; nothing written")
    if problems:
        raise UsageError(problems)
    done = []
    for rel, text in outputs.items():
        target = work.out_root / rel
        if _read(target) == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="\n")
        done.append(f"wrote {target.as_posix()}")
    remove, leave = _stale(work, outputs)
    for path in remove:
        path.unlink()
        done.append(f"removed {path.as_posix()}")
    done += [f"left {path.as_posix()} (not generated from {work.tree}/)" for path in leave]
    return done
