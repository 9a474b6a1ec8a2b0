"""One source file as the translator and the lane analysis see it.

Tokens (``lexer.py``), logical lines, which lines are preprocessor directives and which are vendor-guarded
CUDA-only sections, the significant (non-trivia) tokens with their matching brackets, and the function bodies and
macro definitions found among them. Positions called ``p`` are indices into ``sig`` (significant tokens); positions
called ``i`` are indices into ``tokens``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .guards import cuda_only_lines
from .lexer import IDENT, NL, PUNCT, TRIVIA, Token, tokenize

# Words that can stand before "(" without being a function name.
NOT_A_FUNCTION = frozenset({
    "if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "alignas", "decltype", "typeof",
    "static_assert", "__launch_bounds__", "defined", "new", "delete", "throw", "co_return", "co_await",
    "__attribute__", "__declspec", "noexcept", "operator",
})
# Words that can stand before a name without being (part of) its type.
_NOT_A_TYPE = frozenset({
    "return", "else", "case", "goto", "new", "delete", "throw", "sizeof", "do", "co_return", "co_yield", "typename",
    "template", "operator", "define", "undef", "ifdef", "ifndef", "if", "elif", "include",
})
# Words that may follow a function's parameter list before its body.
_AFTER_PARAMS = frozenset({"const", "volatile", "noexcept", "override", "final", "__restrict__", "mutable"})
_OPEN = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True)
class Function:
    """A function definition, or a function-like macro whose replacement is read as a body."""

    name: str
    name_at: int  # significant position of the name
    head: int  # first significant position of the declaration (the words before the name)
    params: tuple[int, int]  # significant range inside the parentheses
    body: tuple[int, int]  # significant range inside the braces, or the macro's replacement
    is_macro: bool = False


@dataclass(frozen=True)
class Macro:
    """A ``#define``: its name, parameter names (None for an object-like macro) and replacement range."""

    name: str
    name_at: int
    params: tuple[str, ...] | None
    body: tuple[int, int]


def logical_lines(tokens: list[Token]) -> list[tuple[int, int]]:
    """Token index ranges [start, end) of the logical lines (line continuations do not end a line)."""
    lines: list[tuple[int, int]] = []
    start = 0
    for i, t in enumerate(tokens):
        if t.kind == NL:
            lines.append((start, i + 1))
            start = i + 1
    if start < len(tokens):
        lines.append((start, len(tokens)))
    return lines


class SourceFile:
    """Tokens of one file with the structure the translator and the analysis ask about."""

    def __init__(self, text: str, *, prelude: bool) -> None:
        self.tokens = tokenize(text)
        n = len(self.tokens)
        self.lines = logical_lines(self.tokens)
        self.line_of = [0] * n
        self.directive = [False] * n
        self.verbatim = [False] * n  # inside a CUDA-only section of a prelude file: copied as it is
        cuda_only = cuda_only_lines(self.tokens, self.lines)
        for li, (start, end) in enumerate(self.lines):
            first = next((t for t in self.tokens[start:end] if t.kind not in TRIVIA), None)
            is_directive = first is not None and first.text == "#" and first.kind == PUNCT
            for i in range(start, end):
                self.line_of[i] = li
                self.directive[i] = is_directive
                self.verbatim[i] = prelude and cuda_only[li]
        self.sig = [i for i, t in enumerate(self.tokens) if t.kind not in TRIVIA]
        self.sig_pos = {i: p for p, i in enumerate(self.sig)}
        # brackets of code (directive lines are matched on their own line) and the open brackets around each token
        self.enclosing: list[tuple[int, ...]] = []
        self.open_of: dict[int, int] = {}
        self.close_of: dict[int, int] = {}
        stack: list[int] = []
        line_stack: list[int] = []
        line = -1
        for p, i in enumerate(self.sig):
            self.enclosing.append(tuple(stack))
            text = self.tokens[i].text
            if self.directive[i]:
                if self.line_of[i] != line:
                    line, line_stack = self.line_of[i], []
                target = line_stack
            else:
                target = stack
            if self.tokens[i].kind != PUNCT:
                continue
            if text in _OPEN:
                target.append(p)
            elif text in (")", "]", "}") and target:
                q = target.pop()
                self.open_of[p], self.close_of[q] = q, p

    # -- token access by significant position --

    def tok(self, p: int) -> Token:
        return self.tokens[self.sig[p]]

    def word(self, p: int) -> str:
        """Text of significant token ``p``, or "" outside the file."""
        return self.tokens[self.sig[p]].text if 0 <= p < len(self.sig) else ""

    def is_ident(self, p: int) -> bool:
        return 0 <= p < len(self.sig) and self.tokens[self.sig[p]].kind == IDENT

    def in_code(self, p: int) -> bool:
        """Whether significant token ``p`` is code that the translation handles (no directive, not verbatim)."""
        i = self.sig[p]
        return not self.directive[i] and not self.verbatim[i]

    def end_of_line(self, p: int) -> int:
        """The significant position just past the logical line of ``p``."""
        li = self.line_of[self.sig[p]]
        q = p
        while q < len(self.sig) and self.line_of[self.sig[q]] == li:
            q += 1
        return q

    def adjacent(self, p: int) -> bool:
        """Whether significant token ``p + 1`` follows ``p`` with nothing in between."""
        return p + 1 < len(self.sig) and self.sig[p + 1] == self.sig[p] + 1

    # -- definitions --

    @functools.cached_property
    def macros(self) -> dict[str, Macro]:
        """``#define`` lines outside verbatim sections, by name (the last definition wins)."""
        found: dict[str, Macro] = {}
        for p in range(len(self.sig) - 2):
            i = self.sig[p]
            if self.word(p) != "#" or not self.directive[i] or self.verbatim[i] or self.word(p + 1) != "define":
                continue
            if p > 0 and self.line_of[self.sig[p - 1]] == self.line_of[i]:
                continue  # "#" inside a directive, not its start
            if not self.is_ident(p + 2):
                continue
            end = self.end_of_line(p)
            name_at = p + 2
            params: tuple[str, ...] | None = None
            body_start = name_at + 1
            if self.adjacent(name_at) and self.word(name_at + 1) == "(" and name_at + 1 in self.close_of:
                close = self.close_of[name_at + 1]
                params = tuple(self.word(q) for q in range(name_at + 2, close) if self.is_ident(q) or
                               self.word(q) == "...")
                body_start = close + 1
            found[self.word(name_at)] = Macro(self.word(name_at), name_at, params, (body_start, end))
        return found

    @functools.cached_property
    def functions(self) -> list[Function]:
        """Function definitions (at namespace or class scope) and function-like macros, in file order."""
        found: list[Function] = []
        scopes: list[str] = []  # "ns", "class" or "block" for each open brace
        for p in range(len(self.sig)):
            if not self.in_code(p):
                continue
            w = self.word(p)
            if w == "}" and p in self.open_of and self.word(self.open_of[p]) == "{":
                if scopes:
                    scopes.pop()
                continue
            if w != "{":
                continue
            kind = self._brace_kind(p)
            if kind == "function" and all(s in ("ns", "class") for s in scopes) and p in self.close_of:
                close_paren = self._params_close(p)
                open_paren = self.open_of[close_paren]
                name_at = open_paren - 1
                found.append(Function(self.word(name_at), name_at, self._decl_start(name_at),
                                      (open_paren + 1, close_paren), (p + 1, self.close_of[p])))
            scopes.append("block" if kind == "function" else kind)
        for m in self.macros.values():
            if m.params is not None:
                found.append(Function(m.name, m.name_at, m.name_at, (m.name_at + 2, m.body[0] - 1), m.body, True))
        return sorted(found, key=lambda f: f.name_at)

    def _params_close(self, brace: int) -> int:
        """The ")" that ends the parameter list before the body brace at ``brace`` (or -1)."""
        q = brace - 1
        while q >= 0 and self.word(q) in _AFTER_PARAMS:
            q -= 1
        return q if self.word(q) == ")" and q in self.open_of else -1

    def _brace_kind(self, brace: int) -> str:
        """What the "{" at ``brace`` opens: "function", "ns" (namespace, extern "C"), "class" or "block"."""
        close_paren = self._params_close(brace)
        if close_paren >= 0:
            name_at = self.open_of[close_paren] - 1
            if self.is_ident(name_at) and self.word(name_at) not in NOT_A_FUNCTION:
                return "function"
            return "block"
        q = brace - 1
        while q >= 0 and self.word(q) not in (";", "{", "}", ")", "=", ",", "(") and not self.directive[self.sig[q]]:
            if self.word(q) in ("namespace", "extern"):
                return "ns"
            if self.word(q) in ("struct", "class", "union"):
                return "class"
            q -= 1
        return "block"

    def _decl_start(self, name_at: int) -> int:
        """First significant position of the declaration whose declarator name is at ``name_at``."""
        q = name_at - 1
        while q >= 0 and self.word(q) not in (";", "{", "}") and not self.directive[self.sig[q]]:
            if self.word(q) == ")" and q in self.open_of:
                q = self.open_of[q]
            q -= 1
        return q + 1

    @functools.cached_property
    def defined_names(self) -> frozenset[str]:
        """Names this file defines: macros, functions, types, and variables or functions it declares."""
        found = set(self.macros) | {f.name for f in self.functions}
        for p in range(1, len(self.sig) - 1):
            if not self.is_ident(p) or not self.in_code(p):
                continue
            before, after = self.word(p - 1), self.word(p + 1)
            if before in ("struct", "class", "union", "enum", "namespace") or (before == "using" and after == "="):
                found.add(self.word(p))
            elif after in ("(", ";", "=", "[", ",", "{") and (before in ("*", "&") or self.is_ident(p - 1)) and \
                    before not in _NOT_A_TYPE:
                found.add(self.word(p))
        return frozenset(found)
