"""What an expression holds, for the lane analysis: integer constants, integer widths and value tags.

Tags say what a value is, not how it is spelled: ``THREAD`` a thread index (not reduced to a lane), ``LANE32`` a
lane number in 0..31 (``threadIdx.x % 32``, ``& 31``), ``LANEW`` a lane number modulo the wave size
(``% warpSize``), ``GROUP`` a group number or count (``/ 32``, ``>> 5``, ``blockDim``), ``WAVE`` the wave size or an
expression of it, ``BALLOT`` a ballot or active mask (kept through bit operations).
"""
from __future__ import annotations

import functools

from .body import declarators
from .expr import Binary, Call, Cast, Leaf, Member, Node, Unary, parse, strip, walk
from .lane_ops import LANE_OPS
from .lexer import IDENT, NUMBER
from .source import SourceFile

WAVE_SIZE_NAMES = frozenset({"warpSize", "PA_WARP_SIZE"})
THREAD = "thread"
LANE32 = "lane32"
LANEW = "laneW"
GROUP = "group"
WAVE = "wave"
BALLOT = "ballot"
THREADISH = frozenset({THREAD, LANE32, LANEW, GROUP})
ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
_INT_BITS = {
    "char": 8, "short": 16, "int": 32, "unsigned": 32, "signed": 32, "uint": 32, "int8_t": 8, "uint8_t": 8,
    "int16_t": 16, "uint16_t": 16, "int32_t": 32, "uint32_t": 32, "int64_t": 64, "uint64_t": 64, "size_t": 64,
    "long": 64, "ushort": 16,
}
_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: int(a / b), "%": lambda a, b: a % b, "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
}


class Values:
    """Constants (object-like macros, const and constexpr variables), typedefs and value tags of one file.
    ``returns`` holds the tags of what each function returns; the analysis fills it in."""

    def __init__(self, src: SourceFile) -> None:
        self.src = src
        self.consts = self._constants()
        self.typedefs = self._typedefs()
        self.returns: dict[str, frozenset[str]] = {}

    def _constants(self) -> dict[str, Node]:
        """Object-like macros and const / constexpr variables with an initialiser, by name."""
        src = self.src
        found: dict[str, Node] = {}
        for m in src.macros.values():
            if m.params is None and m.body[0] < m.body[1]:
                found[m.name] = parse(src, *m.body)
        p = 0
        while p < len(src.sig):
            if src.word(p) in ("const", "constexpr") and src.in_code(p) and src.word(p - 1) in (";", "{", "}", "(",
                                                                                              "static", ""):
                end = p
                while end < len(src.sig) and src.word(end) not in (";", "{", "}"):
                    end += 1
                decl = declarators(src, p, end)
                for name, _, init in (decl[1] if decl else []):
                    if init is not None:
                        found.setdefault(name, parse(src, *init))
                p = end
            p += 1
        return found

    def _typedefs(self) -> dict[str, tuple[str, ...]]:
        src = self.src
        found: dict[str, tuple[str, ...]] = {}
        for p in range(len(src.sig)):
            if src.word(p) == "typedef":
                end = p
                while end < len(src.sig) and src.word(end) != ";":
                    end += 1
                if src.is_ident(end - 1):
                    found[src.word(end - 1)] = tuple(src.word(q) for q in range(p + 1, end - 1) if src.is_ident(q))
            elif src.word(p) == "using" and src.is_ident(p + 1) and src.word(p + 2) == "=":
                end = p
                while end < len(src.sig) and src.word(end) != ";":
                    end += 1
                found[src.word(p + 1)] = tuple(src.word(q) for q in range(p + 3, end) if src.is_ident(q))
        return found

    def name(self, node: Node) -> str:
        """The identifier a node is, or ""."""
        node = strip(node)
        return self.src.word(node.at) if isinstance(node, Leaf) and self.src.is_ident(node.at) else ""

    def const(self, node: Node | None, seen: frozenset[str] = frozenset()) -> int | None:
        """The integer value of a constant expression (literals, constants, macros), or None."""
        if node is None:
            return None
        node = strip(node)
        if isinstance(node, Leaf):
            tok = self.src.tok(node.at)
            if tok.kind == NUMBER:
                return int_value(tok.text)
            if tok.kind == IDENT and tok.text in self.consts and tok.text not in seen:
                return self.const(self.consts[tok.text], seen | {tok.text})
            return None
        if isinstance(node, Cast):
            return self.const(node.operand, seen)
        if isinstance(node, Unary) and node.op in ("-", "~", "+"):
            v = self.const(node.operand, seen)
            return None if v is None else {"-": -v, "~": ~v, "+": v}[node.op]
        if isinstance(node, Binary):
            a, b = self.const(node.left, seen), self.const(node.right, seen)
            if a is None or b is None:
                return None
            try:
                return _ARITH[node.op](a, b) if node.op in _ARITH else None
            except (ZeroDivisionError, ValueError):
                return None
        return None

    def mentions_wave(self, node: Node | None, seen: frozenset[str] = frozenset()) -> bool:
        """Whether an expression uses the wave size (warpSize, PA_WARP_SIZE or a constant made from them)."""
        return node is not None and bool(self.wave_leaves(node, seen))

    def wave_leaves(self, node: Node, seen: frozenset[str] = frozenset()) -> list[int]:
        """Positions of the wave-size names in an expression (a constant made from one counts where it is used)."""
        found = []
        for n in walk(node):
            w = self.src.word(n.at) if isinstance(n, Leaf) else ""
            if w in WAVE_SIZE_NAMES:
                found.append(n.at)
            elif w in self.consts and w not in seen and self.wave_leaves(self.consts[w], seen | {w}):
                found.append(n.at)
        return found

    def tags(self, node: Node | None, env: dict[str, frozenset[str]], seen: frozenset[str] = frozenset()
             ) -> frozenset[str]:
        """What an expression holds, as value tags (see the module docstring)."""
        if node is None:
            return frozenset()
        node = strip(node)
        if isinstance(node, Leaf):
            w = self.src.word(node.at)
            if w == "threadIdx":
                return frozenset({THREAD})
            if w == "blockDim":
                return frozenset({GROUP})
            if w in WAVE_SIZE_NAMES:
                return frozenset({WAVE})
            if w in env:
                return env[w]
            if w in self.consts and w not in seen:
                return self.tags(self.consts[w], env, seen | {w})
            return frozenset()
        if isinstance(node, Member):
            return self.tags(node.base, env, seen)
        if isinstance(node, Call):
            callee = self.name(node.func)
            if callee in LANE_OPS and LANE_OPS[callee].kind in ("ballot", "activemask"):
                return frozenset({BALLOT})
            if callee == "__lane_id":
                return frozenset({LANEW})
            if callee in self.returns:
                return self.returns[callee]
            return frozenset()
        if isinstance(node, Cast):
            inner = self.tags(node.operand, env, seen)
            return inner - {BALLOT} if self.type_bits(node.types) in (8, 16, 32) else inner
        if isinstance(node, Unary):
            return self.tags(node.operand, env, seen) if node.op in ("~", "-", "+", "++", "--") else frozenset()
        if isinstance(node, Binary):
            return self._binary_tags(node, env, seen)
        return frozenset()

    def _binary_tags(self, node: Binary, env: dict[str, frozenset[str]], seen: frozenset[str]) -> frozenset[str]:
        op = node.op
        if op in ("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=", ","):
            return self.tags(node.right, env, seen)
        if op == "?":
            branches = node.right
            if isinstance(branches, Binary) and branches.op == ":":
                return self.tags(branches.left, env, seen) | self.tags(branches.right, env, seen)
            return self.tags(branches, env, seen)
        left, right = self.tags(node.left, env, seen), self.tags(node.right, env, seen)
        both = left | right
        threadish = bool(both & THREADISH)
        rc, lc = self.const(node.right), self.const(node.left)
        wave_r = WAVE in right
        if op == "%":
            if threadish and (rc is not None and 0 < rc <= 32):
                return frozenset({LANE32})
            if threadish and wave_r:
                return frozenset({LANEW})
            return frozenset({THREAD}) if threadish else frozenset()
        if op == "&":
            if BALLOT in both:
                return frozenset({BALLOT})
            small = [(rc is not None and 0 <= rc < 32), (lc is not None and 0 <= lc < 32),
                     LANE32 in left and not left & {THREAD, LANEW}, LANE32 in right and not right & {THREAD, LANEW}]
            if any(small):
                return frozenset({LANE32})
            if threadish and wave_r:
                return frozenset({LANEW})
            return frozenset({THREAD}) if threadish else frozenset()
        if op in ("/", ">>"):
            if BALLOT in left and op == ">>":
                return frozenset({BALLOT})
            if threadish:
                return frozenset({GROUP})
            return frozenset({WAVE}) if WAVE in left else frozenset()
        if op in ("|", "^"):
            if BALLOT in both:
                return frozenset({BALLOT})
            small = all(self.lt32(n, env) for n in (node.left, node.right))
            if small:
                return frozenset({LANE32})
            return frozenset({THREAD}) if threadish else frozenset()
        if op == "<<":
            return frozenset({BALLOT}) if BALLOT in left else (frozenset({THREAD}) if threadish else frozenset())
        if op in ("+", "-", "*"):
            out = set()
            if threadish:
                out.add(THREAD)
            if WAVE in both:
                out.add(WAVE)
            return frozenset(out)
        return frozenset()  # comparisons and logic give booleans

    def lt32(self, node: Node | None, env: dict[str, frozenset[str]]) -> bool:
        """Whether an expression provably lies in 0..31."""
        value = self.const(node)
        if value is not None:
            return 0 <= value < 32
        t = self.tags(node, env)
        return LANE32 in t and not t & {THREAD, LANEW, GROUP, WAVE, BALLOT}

    def type_bits(self, words: tuple[str, ...], seen: frozenset[str] = frozenset()) -> int | None:
        """Width of an integer type given by its words (None: not a plain integer type, or auto)."""
        words = tuple(w for w in words if w not in ("const", "volatile", "static", "constexpr", "register",
                                                    "__shared__", "extern", "inline", "__device__"))
        for w in words:
            if w in self.typedefs and w not in seen:
                return self.type_bits(self.typedefs[w], seen | {w})
        if not words or "auto" in words:
            return None
        if words.count("long") >= 1:
            return 64
        bits = [_INT_BITS[w] for w in words if w in _INT_BITS]
        return max(bits) if bits else None

    def text(self, node: Node) -> str:
        """The source text of an expression, as written."""
        covered = positions(node)
        start, end = self.src.sig[min(covered)], self.src.sig[max(covered)]
        return "".join(t.text for t in self.src.tokens[start:end + 1]).strip()



def positions(node: Node) -> set[int]:
    """Every significant position an expression covers."""
    found = set()
    for n in walk(node):
        found.add(n.at)
        if isinstance(n, Call):
            found.add(n.close)
    return found


@functools.lru_cache(maxsize=4096)
def int_value(spelling: str) -> int | None:
    """The value of a C++ integer literal, or None for floating-point literals and junk."""
    s = spelling.replace("'", "").lower()
    s = s.rstrip("ulz")
    try:
        if s.startswith("0x"):
            return int(s[2:], 16)
        if s.startswith("0b"):
            return int(s[2:], 2)
        if len(s) > 1 and s.startswith("0"):
            return int(s[1:], 8)
        return int(s, 10)
    except ValueError:
        return None
