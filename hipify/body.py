"""The statements of a function body, as the lane analysis reads them.

``read_body`` walks a body (or a macro replacement) statement by statement and returns the expressions in it
(declaration initialisers, expression statements, conditions, loop headers, returns), the ``for`` loops, the
``if`` statements and the declared types of the local variables and parameters.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .expr import split_args
from .source import Function, SourceFile

_STATEMENT_WORDS = frozenset({"return", "break", "continue", "goto", "case", "default", "else", "do", "throw"})


@dataclass(frozen=True)
class Root:
    """An expression of the body. ``kind``: "expr", "init" (a declared variable's initialiser), "cond", "return",
    "for-cond" or "for-step"."""

    kind: str
    span: tuple[int, int]
    target: str = ""  # "init": the declared variable
    target_at: int = -1


@dataclass(frozen=True)
class Loop:
    """A ``for`` loop: its variable (declared or assigned in the init part) and the ranges of its parts."""

    at: int
    var: str
    init: tuple[int, int]  # the value given to ``var`` (empty when there is none)
    cond: tuple[int, int]
    step: tuple[int, int]
    body: tuple[int, int]


@dataclass(frozen=True)
class Guard:
    """An ``if``: condition, the statement it guards, and whether that statement only leaves (return, continue,
    break), in which case the rest of the enclosing block (``rest``) runs only when the condition is false."""

    at: int
    cond: tuple[int, int]
    body: tuple[int, int]
    exits: bool
    rest: tuple[int, int]


@dataclass
class Body:
    roots: list[Root] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    declared: dict[str, tuple[str, ...]] = field(default_factory=dict)  # variable -> its type words
    params: set[str] = field(default_factory=set)  # the names of the parameters


class _Reader:
    def __init__(self, src: SourceFile, body: Body, in_macro: bool) -> None:
        self.src = src
        self.out = body
        self.in_macro = in_macro  # a macro's replacement is all on a directive line: read it as code

    def skipped(self, p: int) -> bool:
        """Whether ``p`` starts a directive line to step over (``#pragma unroll`` inside a body)."""
        return not self.in_macro and self.src.directive[self.src.sig[p]]

    def word(self, p: int) -> str:
        return self.src.word(p)

    def skip_group(self, p: int) -> int:
        """Position after the bracket group opening at ``p`` (or p + 1 when it is not matched)."""
        return self.src.close_of.get(p, p) + 1

    def statement_end(self, p: int, end: int) -> int:
        """Position just past the statement starting at ``p`` (bounded by ``end``)."""
        while p < end and self.skipped(p):
            p = self.src.end_of_line(p)
        if p >= end:
            return end
        w = self.word(p)
        if w == "{":
            return min(self.skip_group(p), end)
        if w in ("for", "while", "switch") and self.word(p + 1) == "(":
            return self.statement_end(self.skip_group(p + 1), end)
        if w == "if":
            q = p + 1
            if self.word(q) == "constexpr":
                q += 1
            q = self.statement_end(self.skip_group(q), end)
            if q < end and self.word(q) == "else":
                q = self.statement_end(q + 1, end)
            return q
        if w == "do":
            q = self.statement_end(p + 1, end)
            if self.word(q) == "while":
                q = self.skip_group(q + 1)
            return min(q + 1, end) if self.word(q) == ";" else q
        q = p
        while q < end:
            w = self.word(q)
            if w == ";":
                return q + 1
            if w in ("(", "[", "{") and q in self.src.close_of:
                q = self.skip_group(q)
                continue
            if w == "}":
                return q
            q += 1
        return end

    def block(self, start: int, end: int) -> None:
        p = start
        while p < end:
            if self.skipped(p):
                p = min(self.src.end_of_line(p), end)
                continue
            nxt = self.statement_end(p, end)
            self.statement(p, max(nxt, p + 1), end)
            p = max(nxt, p + 1)

    def statement(self, p: int, end: int, block_end: int) -> None:
        w = self.word(p)
        src = self.src
        if w == "{":
            self.block(p + 1, min(src.close_of.get(p, end), end))
        elif w == "if":
            q = p + 2 if self.word(p + 1) == "constexpr" else p + 1
            close = src.close_of.get(q, q)
            self.out.roots.append(Root("cond", (q + 1, close)))
            body_end = self.statement_end(close + 1, end)
            leaves = self.only_leaves(close + 1, body_end)
            self.out.guards.append(Guard(p, (q + 1, close), (close + 1, body_end), leaves, (end, block_end)))
            self.block(close + 1, body_end)
            if body_end < end and self.word(body_end) == "else":
                self.block(body_end + 1, end)
        elif w == "for" and self.word(p + 1) == "(":
            self.loop(p, end)
        elif w in ("while", "switch") and self.word(p + 1) == "(":
            close = src.close_of.get(p + 1, p + 1)
            self.out.roots.append(Root("cond", (p + 2, close)))
            self.block(close + 1, end)
        elif w == "do":
            body_end = self.statement_end(p + 1, end)
            self.block(p + 1, body_end)
            if self.word(body_end) == "while" and self.word(body_end + 1) == "(":
                self.out.roots.append(Root("cond", (body_end + 2, src.close_of.get(body_end + 1, body_end + 1))))
        elif w == "return":
            self.out.roots.append(Root("return", (p + 1, self.expression_end(p + 1, end))))
        elif w in ("case", "default"):
            q = p
            while q < end and self.word(q) != ":":
                q += 1
            self.block(q + 1, end)
        elif w in _STATEMENT_WORDS:
            return
        else:
            self.simple(p, self.expression_end(p, end))

    def expression_end(self, p: int, end: int) -> int:
        """The ";" (or ``end``) that ends the expression starting at ``p``."""
        q = p
        while q < end and self.word(q) != ";":
            q = self.skip_group(q) if self.word(q) in ("(", "[", "{") else q + 1
        return min(q, end)

    def only_leaves(self, start: int, end: int) -> bool:
        words = [self.word(q) for q in range(start, end) if self.word(q) not in ("{", "}")]
        return bool(words) and words[0] in ("return", "continue", "break") and words.count(";") == 1

    def loop(self, p: int, end: int) -> None:
        src = self.src
        close = src.close_of.get(p + 1, p + 1)
        parts = []
        a = q = p + 2
        while q < close:
            if self.word(q) == ";":
                parts.append((a, q))
                a = q + 1
            q = self.skip_group(q) if self.word(q) in ("(", "[", "{") else q + 1
        parts.append((a, close))
        if len(parts) != 3:  # range-based for
            self.block(close + 1, self.statement_end(close + 1, end))
            return
        (i0, i1), cond, step = parts
        var, init = "", (i1, i1)
        for root in self.simple(i0, i1):
            if root.kind == "init":
                var, init = root.target, root.span
                break
        else:
            if i1 - i0 >= 3 and src.is_ident(i0) and self.word(i0 + 1) == "=":
                var, init = self.word(i0), (i0 + 2, i1)
        self.out.roots += [Root("for-cond", cond), Root("for-step", step)]
        body_end = self.statement_end(close + 1, end)
        self.out.loops.append(Loop(p, var, init, cond, step, (close + 1, body_end)))
        self.block(close + 1, body_end)

    def simple(self, start: int, end: int) -> list[Root]:
        """An expression statement or a declaration in [start, end); returns the roots it added."""
        found = []
        decl = declarators(self.src, start, end)
        if decl is None:
            found.append(Root("expr", (start, end)))
        else:
            types, items = decl
            for name, name_at, init in items:
                self.out.declared[name] = types
                if init is not None:
                    found.append(Root("init", init, name, name_at))
        self.out.roots += found
        return found


def declarators(src: SourceFile, start: int, end: int) -> tuple[tuple[str, ...], list] | None:
    """If [start, end) is a declaration: (type words, [(name, name position, initialiser range or None)])."""
    q = start
    types: list[str] = []
    while q < end:
        w = src.word(q)
        if src.is_ident(q):
            nxt = src.word(q + 1) if q + 1 < end else ";"
            if types and (nxt in ("=", ";", ",", "[", "{", ":") or nxt == "(" and src.word(q - 1) != "::"):
                break  # q is the first declarator's name
            if w in _STATEMENT_WORDS:
                return None
            types.append(w)
        elif w == "<" and types:
            q = _template_end(src, q, end)
            if q < 0:
                return None
        elif w not in ("*", "&", "::", "&&"):
            return None
        q += 1
    if q >= end or not types:
        return None
    items = []
    for a, b in split_args(src, q, end):
        n = a
        while n < b and src.word(n) in ("*", "&", "&&", "const"):
            n += 1
        if n >= b or not src.is_ident(n):
            return None
        init = None
        r = n + 1
        while r < b and src.word(r) == "[":
            r = src.close_of.get(r, r) + 1
        if r < b and src.word(r) == "=":
            init = (r + 1, b)
        elif r < b and src.word(r) in ("(", "{") and src.close_of.get(r, -1) == b - 1:
            init = (r + 1, b - 1)
        items.append((src.word(n), n, init))
    return tuple(types), items


def _template_end(src: SourceFile, lt: int, end: int) -> int:
    """The ">" closing the template argument list opened at ``lt``, or -1."""
    depth = 0
    for q in range(lt, end):
        w = src.word(q)
        if w == "<":
            depth += 1
        elif w in (">", ">>"):
            depth -= len(w)
            if depth <= 0:
                return q
        elif w in (";", "{", "}", "(", ")"):
            break
    return -1


def read_body(src: SourceFile, fn: Function) -> Body:
    """The statements of ``fn``'s body (a macro's replacement is read as a block of statements)."""
    body = Body()
    for a, b in split_args(src, *fn.params):
        decl = declarators(src, a, b)
        if decl is not None:
            for name, _, _ in decl[1]:
                body.declared[name] = decl[0]
                body.params.add(name)
        elif fn.is_macro and b - a == 1 and src.is_ident(a):
            body.declared[src.word(a)] = ()
            body.params.add(src.word(a))
    _Reader(src, body, fn.is_macro).block(*fn.body)
    return body
