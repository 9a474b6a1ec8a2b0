"""C++ expressions as small trees, parsed from a range of significant tokens of a ``SourceFile``.

The parser knows C++ operator precedence, calls, subscripts, member access, casts (C-style, ``static_cast<T>``
and friends) and template calls (``f<8>(x)``). It never fails: a token it cannot place becomes a leaf, and what is
left over after a complete expression is kept in a ``Seq`` node, so every token of the range is in the tree.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .lexer import CHAR, IDENT, NUMBER, STRING
from .source import SourceFile

# binary operators: precedence (higher binds tighter); assignments and "?:" group to the right
_BINARY = {
    ",": 1,
    "=": 2, "+=": 2, "-=": 2, "*=": 2, "/=": 2, "%=": 2, "&=": 2, "|=": 2, "^=": 2, "<<=": 2, ">>=": 2,
    "?": 3,
    "||": 4, "&&": 5, "|": 6, "^": 7, "&": 8, "==": 9, "!=": 9, "<": 10, ">": 10, "<=": 10, ">=": 10,
    "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13,
}
_RIGHT = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", "?"})
_PREFIX = frozenset({"-", "+", "!", "~", "*", "&", "++", "--"})
_CASTS = frozenset({"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "bit_cast"})
TYPE_WORDS = frozenset({
    "void", "bool", "char", "short", "int", "long", "signed", "unsigned", "float", "double", "auto", "const",
    "volatile", "size_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
    "uint64_t", "__half", "__half2", "half", "half2", "float2", "float4", "int2", "int4", "uint", "ushort",
})


@dataclass(frozen=True)
class Node:
    """Base of the tree nodes; ``at`` is the significant position that names the node in diagnostics."""

    at: int

    def children(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True)
class Leaf(Node):
    """An identifier, a literal or a token the parser could not place."""


@dataclass(frozen=True)
class Member(Node):
    """``base.name``, ``base->name`` or ``base::name``; ``at`` is the position of ``name``."""

    base: Node

    def children(self) -> tuple[Node, ...]:
        return (self.base,)


@dataclass(frozen=True)
class Call(Node):
    """``func(args...)``; ``at`` is the first position of ``func``, ``close`` its closing parenthesis."""

    func: Node
    args: tuple[Node, ...]
    close: int

    def children(self) -> tuple[Node, ...]:
        return (self.func, *self.args)


@dataclass(frozen=True)
class Index(Node):
    base: Node
    index: Node

    def children(self) -> tuple[Node, ...]:
        return (self.base, self.index)


@dataclass(frozen=True)
class Unary(Node):
    """A prefix or postfix operator; ``at`` is the operator."""

    op: str
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Node):
    """``left op right``; ``at`` is the operator. ``?:`` is a Binary "?" whose right side is a Binary ":"."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Cast(Node):
    """``(T) x``, ``static_cast<T>(x)``; ``types`` are the words of T."""

    types: tuple[str, ...]
    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Group(Node):
    """A parenthesized expression."""

    inner: Node

    def children(self) -> tuple[Node, ...]:
        return (self.inner,)


@dataclass(frozen=True)
class Seq(Node):
    """Pieces of a range that do not form one expression (braced lists, leftovers)."""

    items: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.items


def walk(node: Node) -> Iterator[Node]:
    """The node and all nodes below it, parents first."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children()))


def strip(node: Node) -> Node:
    """The node without enclosing parentheses."""
    while isinstance(node, Group):
        node = node.inner
    return node


def first(node: Node) -> int:
    """The first significant position covered by ``node``."""
    while True:
        if isinstance(node, (Member, Index)):
            node = node.base
        elif isinstance(node, Call):
            node = node.func
        elif isinstance(node, Binary):
            node = node.left
        elif isinstance(node, Seq) and node.items:
            node = node.items[0]
        else:
            return node.at


class _Parser:
    def __init__(self, src: SourceFile, start: int, end: int) -> None:
        self.src = src
        self.p = start
        self.end = end

    def word(self, p: int | None = None) -> str:
        p = self.p if p is None else p
        return self.src.word(p) if p < self.end else ""

    def group_end(self, p: int) -> int:
        """Closing bracket of the bracket at ``p`` if it lies inside the range, else -1."""
        q = self.src.close_of.get(p, -1)
        return q if q < self.end else -1

    def parse_all(self) -> Node:
        items = []
        while self.p < self.end:
            before = self.p
            items.append(self.expression(0))
            if self.p == before:  # nothing consumed: keep the token and move on
                items.append(Leaf(self.p))
                self.p += 1
        if len(items) == 1:
            return items[0]
        return Seq(items[0].at if items else self.end, tuple(items))

    def expression(self, min_prec: int) -> Node:
        left = self.unary()
        while self.p < self.end:
            op = self.word()
            prec = _BINARY.get(op)
            if prec is None or prec < min_prec or op == "?" and min_prec > 3:
                break
            at = self.p
            self.p += 1
            if op == "?":
                then = self.expression(1)
                if self.word() == ":":
                    colon = self.p
                    self.p += 1
                    other = self.expression(3)
                    left = Binary(at, "?", left, Binary(colon, ":", then, other))
                else:
                    left = Binary(at, "?", left, then)
                continue
            right = self.expression(prec if op in _RIGHT else prec + 1)
            left = Binary(at, op, left, right)
        return left

    def unary(self) -> Node:
        w = self.word()
        if w in _PREFIX:
            at = self.p
            self.p += 1
            return Unary(at, w, self.unary())
        if w == "sizeof":
            at = self.p
            self.p += 1
            return Unary(at, w, self.unary())
        if w == "(":
            cast = self.cast_types(self.p)
            if cast is not None:
                at, close = self.p, self.group_end(self.p)
                self.p = close + 1
                return Cast(at, cast, self.unary())
        return self.postfix(self.primary())

    def cast_types(self, open_at: int) -> tuple[str, ...] | None:
        """The type words if the parenthesis at ``open_at`` is a C-style cast, else None."""
        close = self.group_end(open_at)
        if close < 0 or close + 1 >= self.end:
            return None
        words = [self.src.word(q) for q in range(open_at + 1, close)]
        names = [w for w in words if w not in ("*", "&", "::")]
        if not names or not all(self.src.is_ident(q) or self.src.word(q) in ("*", "&", "::")
                                for q in range(open_at + 1, close)):
            return None
        if not (names[0] in TYPE_WORDS or (words[-1] in ("*", "&") and len(names) >= 1)):
            return None
        nxt = self.src.word(close + 1)
        if nxt in (")", "]", ";", ",", "=") or (nxt in _BINARY and nxt not in _PREFIX):
            return None
        return tuple(names)

    def template_end(self, lt: int) -> int:
        """The ">" that closes a template argument list opened at ``lt`` and is followed by "(" or "::"."""
        depth = 0
        q = lt
        while q < self.end:
            w = self.src.word(q)
            if w in ("(", "[") and q in self.src.close_of:
                q = self.src.close_of[q] + 1
                continue
            if w in (";", "{", "}", ")", "]", "&&", "||"):
                return -1
            if w == "<":
                depth += 1
            elif w in (">", ">>"):
                depth -= len(w)
                if depth <= 0:
                    return q if depth == 0 and self.src.word(q + 1) in ("(", "::") and q + 1 < self.end else -1
            q += 1
        return -1

    def primary(self) -> Node:
        at = self.p
        w = self.word()
        if w == "(":
            close = self.group_end(at)
            if close < 0:
                self.p += 1
                return Leaf(at)
            inner = _Parser(self.src, at + 1, close).parse_all()
            self.p = close + 1
            return Group(at, inner)
        if w == "{":
            close = self.group_end(at)
            inner = _Parser(self.src, at + 1, close).parse_all() if close > at + 1 else Leaf(at)
            self.p = (close if close >= 0 else at) + 1
            return Seq(at, (inner,))
        self.p += 1
        tok = self.src.tok(at)
        if tok.kind == IDENT:
            if w in _CASTS and self.word() == "<":
                gt = self.template_end(self.p)
                if gt >= 0 and self.word(gt + 1) == "(":
                    types = tuple(self.src.word(q) for q in range(self.p + 1, gt) if self.src.is_ident(q))
                    close = self.group_end(gt + 1)
                    if close >= 0:
                        operand = _Parser(self.src, gt + 2, close).parse_all()
                        self.p = close + 1
                        return Cast(at, types, operand)
            if self.word() == "<":
                gt = self.template_end(self.p)
                if gt >= 0:
                    self.p = gt + 1  # template arguments are not looked at as an expression
            return Leaf(at)
        if tok.kind in (NUMBER, STRING, CHAR):
            return Leaf(at)
        return Leaf(at)

    def postfix(self, node: Node) -> Node:
        while self.p < self.end:
            w = self.word()
            if w == "(":
                close = self.group_end(self.p)
                if close < 0:
                    break
                args = _split_args(self.src, self.p + 1, close)
                node = Call(first(node), node, tuple(_Parser(self.src, a, b).parse_all() for a, b in args), close)
                self.p = close + 1
            elif w == "[":
                close = self.group_end(self.p)
                if close < 0:
                    break
                node = Index(first(node), node, _Parser(self.src, self.p + 1, close).parse_all())
                self.p = close + 1
            elif w in (".", "->", "::") and self.p + 1 < self.end and self.src.is_ident(self.p + 1):
                node = Member(self.p + 1, node)
                self.p += 2
            elif w in ("++", "--"):
                node = Unary(self.p, w, node)
                self.p += 1
            else:
                break
        return node


def _split_args(src: SourceFile, start: int, end: int) -> list[tuple[int, int]]:
    """Ranges of the comma-separated arguments in [start, end) (none for an empty list)."""
    if start >= end:
        return []
    args = []
    a = q = start
    while q < end:
        w = src.word(q)
        if w in ("(", "[", "{") and q in src.close_of:
            q = src.close_of[q] + 1
            continue
        if w == ",":
            args.append((a, q))
            a = q + 1
        q += 1
    args.append((a, end))
    return args


def parse(src: SourceFile, start: int, end: int) -> Node:
    """The expression tree of significant positions [start, end)."""
    if start >= end:
        return Seq(start, ())
    return _Parser(src, start, end).parse_all()


def split_args(src: SourceFile, start: int, end: int) -> list[tuple[int, int]]:
    """Ranges of the comma-separated items in [start, end), brackets respected."""
    return _split_args(src, start, end)
