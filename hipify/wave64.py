"""What a file's cross-lane code means on a 64-lane wave: the analysis behind the wave64 verdicts.

CUDA code written for 32-lane warps keeps its meaning on AMD's 64-lane waves when it never depends on the lane
count, or when it says which lane groups it means. The analysis reads each function as expression trees (``expr``)
over its statements (``body``), and decides from what the code computes, not from how a number is spelled:

- Values are tagged: thread indices (``threadIdx``), lane numbers modulo 32 (``threadIdx.x % 32``, ``& 31``), lane
  numbers modulo the wave (``% warpSize``), group numbers (``/ 32``, ``>> 5``, ``/ warpSize``), ballots.
- Evidence of the lane count a function assumes: warpSize / PA_WARP_SIZE ("wave"), explicit 32-lane numbering of
  thread indices ("32-lane groups"), and shuffle trees that start at 16 or end below 32 ("32-lane trees").
- Functions that share cross-lane work through calls form one unit; its evidence decides: only "wave" (or none)
  is portable as it is; explicit 32-lane groups without "wave" are rewritten to shuffles of width 32 (then every
  aligned half of a wave behaves as a CUDA warp); both together are refused, as is a 32-lane tree whose result is
  broadcast, or read at lane 0, of a group wider than 32.
- Ballots are 64-bit on a 64-lane wave: storing one in 32 bits, counting it with ``__popc`` or comparing it with
  ``0xffffffff`` is refused, as are ``1u << lane`` masks when the lane can reach 63.

Every verdict has an action (translate, rewrite, refuse), a check id (``CHECKS``), a position and a reason.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .body import Body, Loop, Root, declarators, read_body
from .expr import Binary, Call, Cast, Leaf, Member, Node, Unary, first, parse, strip, walk
from .lexer import IDENT, NUMBER
from .source import Function, SourceFile

TRANSLATE = "translate"
REWRITE = "rewrite"
REFUSE = "refuse"

WAVE_SIZE_NAMES = frozenset({"warpSize", "PA_WARP_SIZE"})
FULL_MASK_32 = 0xFFFFFFFF
_BIT_OPS_32 = frozenset({"__popc", "__ffs", "__clz", "__brev"})
_HALF_TYPES = frozenset({"__half", "__half2", "half", "half2"})
_INT_BITS = {
    "char": 8, "short": 16, "int": 32, "unsigned": 32, "signed": 32, "uint": 32, "int8_t": 8, "uint8_t": 8,
    "int16_t": 16, "uint16_t": 16, "int32_t": 32, "uint32_t": 32, "int64_t": 64, "uint64_t": 64, "size_t": 64,
    "long": 64, "ushort": 16,
}

# the checks and notes of this module (the translator merges them into its CHECKS)
CHECKS: dict[str, str] = {
    "wave32-tree-broadcast": "a shuffle tree over 32 lanes (starting at offset 16) whose result is broadcast, or "
    "read at lane 0, of a group wider than 32 lanes",
    "wave32-last-lane": "a broadcast from lane 31 (the last lane of a 32-lane warp) without a width",
    "lane-constant-mixed": "32-lane numbering or a 32-lane tree mixed with warpSize in the same cross-lane code",
    "shfl-lane-mod32": "an indexed shuffle whose source lane is taken modulo 32, without a width, in code that "
    "numbers lanes with warpSize",
    "vote-in-32-lane-groups": "a vote, ballot or active mask in code written for 32-lane groups",
    "shfl-src-range": "an indexed shuffle in 32-lane-group code whose source lane may lie outside 0..31",
    "shfl-offset-range": "a shuffle offset of 32 or more without a width",
    "ballot-32bit-store": "a ballot or active mask stored in a 32-bit integer",
    "ballot-32bit-op": "a ballot or active mask counted or compared with a 32-bit operation",
    "lanemask-32bit-shift": "a 32-bit lane bit (1u << lane) where the lane can reach 63",
    "shfl-half": "a shuffle of a __half or __half2 value (hiprtc 5.2 has no such overload)",
    "add-width-32": "rewrite: width 32 added to a shuffle in code written for 32-lane groups",
    "portable-wave": "note: cross-lane code that numbers lanes with warpSize",
    "portable-warp": "note: whole-warp cross-lane code that never depends on the lane count",
    "portable-width": "note: a shuffle with an explicit width of at most 32",
    "portable-32-xor": "note: an xor shuffle below 32 in 32-lane-group code (stays inside its aligned half)",
    "not-a-lane-count": "note: a constant 32, 31 or 0xffffffff that is not a lane count or lane mask",
}

_HINT_TREE = ("reduce the whole wave (start at warpSize / 2, or loop while offset < warpSize), or number 32-lane "
              "groups explicitly (lane = threadIdx.x % 32) and pass width 32 to every shuffle")
_HINT_MIXED = "use one lane count throughout: warpSize everywhere, or 32-lane groups with width 32 on every shuffle"
_HINT_BALLOT = "keep ballots and active masks in unsigned long long (or auto) and count them with __popcll / __ffsll"
_HINT_SHIFT = "build lane bits as 1ull << lane"


@dataclass(frozen=True)
class LaneOp:
    """A cross-lane intrinsic: its kind and argument layout (``mask``: the first argument is a lane mask)."""

    kind: str  # shfl, shfl_up, shfl_down, shfl_xor, ballot, any, all, activemask
    mask: bool

    @property
    def is_shuffle(self) -> bool:
        return self.kind.startswith("shfl")

    @property
    def is_vote(self) -> bool:
        return not self.is_shuffle


LANE_OPS: dict[str, LaneOp] = {
    "__shfl_sync": LaneOp("shfl", True), "__shfl_up_sync": LaneOp("shfl_up", True),
    "__shfl_down_sync": LaneOp("shfl_down", True), "__shfl_xor_sync": LaneOp("shfl_xor", True),
    "__shfl": LaneOp("shfl", False), "__shfl_up": LaneOp("shfl_up", False),
    "__shfl_down": LaneOp("shfl_down", False), "__shfl_xor": LaneOp("shfl_xor", False),
    "__ballot_sync": LaneOp("ballot", True), "__ballot": LaneOp("ballot", False),
    "__any_sync": LaneOp("any", True), "__all_sync": LaneOp("all", True),
    "__any": LaneOp("any", False), "__all": LaneOp("all", False),
    "__activemask": LaneOp("activemask", False),
}

# value tags
THREAD = "thread"  # depends on the thread index, not reduced to a lane (may reach 64 and more)
LANE32 = "lane32"  # a lane number in 0..31
LANEW = "laneW"  # a lane number modulo the wave size
GROUP = "group"  # a group (warp) number or count
WAVE = "wave"  # the wave size or an expression of it
BALLOT = "ballot"  # holds a ballot or active mask
_THREADISH = frozenset({THREAD, LANE32, LANEW, GROUP})


@dataclass(frozen=True)
class Verdict:
    """One decision: ``action`` translate / rewrite / refuse, at significant position ``at``. A rewrite inserts
    ``insert[1]`` before significant position ``insert[0]``."""

    action: str
    check: str
    at: int
    reason: str
    hint: str = ""
    insert: tuple[int, str] | None = None


@dataclass(frozen=True)
class LaneCall:
    """A call of a cross-lane intrinsic, with its arguments sorted by role (None when absent)."""

    op: LaneOp
    node: Call
    func: str
    mask: Node | None
    value: Node | None
    lane: Node | None  # source lane, offset or lane mask
    width: Node | None


@dataclass(frozen=True)
class Tree:
    """A variable that holds the result of a shuffle tree over 32 lanes from position ``end`` on."""

    var: str
    start: int  # where the tree's 32-lane extent is written (offset 16, bound 32, width 32)
    end: int


@dataclass
class _Function:
    """What the analysis knows about one function (or function-like macro)."""

    fn: Function
    body: Body
    roots: list[tuple[Root, Node]]  # the body's expressions, parsed
    lane_calls: list[LaneCall]
    env: dict[str, frozenset[str]] = field(default_factory=dict)  # variable -> tags of every value it gets
    defs: list[tuple[str, Node, int, int]] = field(default_factory=list)  # (variable, value, position, statement end)
    ew: list[int] = field(default_factory=list)  # positions of wave-size evidence
    e32: list[int] = field(default_factory=list)  # explicit 32-lane numbering
    t32: list[int] = field(default_factory=list)  # 32-lane trees and lane-31 reads
    trees: list[Tree] = field(default_factory=list)
    ret_tags: frozenset[str] = frozenset()


class Analysis:
    """The wave64 analysis of one file; ``verdicts()`` gives its decisions."""

    def __init__(self, src: SourceFile) -> None:
        self.src = src
        self.consts = self._constants()
        self.typedefs = self._typedefs()
        self.offsets: dict[int, int | None] = {}  # largest offset of each shuffle call (by node id)
        self.out: list[Verdict] = []
        self.funcs = [self._read(fn) for fn in src.functions]
        self.by_name = {f.fn.name: f for f in self.funcs}
        self.lane_fns = self._lane_functions()
        for _ in range(2):  # return values flow into callers (and callers of callers)
            for f in self.funcs:
                self._tag(f)
        self._all_evidence()

    # ---- reading ----

    def _read(self, fn: Function) -> _Function:
        body = read_body(self.src, fn)
        roots = [(r, parse(self.src, *r.span)) for r in body.roots]
        calls = [c for _, node in roots for c in self._lane_calls(node)]
        return _Function(fn, body, roots, calls)

    def _lane_functions(self) -> set[str]:
        """Functions that do cross-lane work, themselves or through the functions they call."""
        found = {f.fn.name for f in self.funcs if f.lane_calls}
        calls = {f.fn.name: {self.name(n.func) for _, node in f.roots for n in walk(node) if isinstance(n, Call)}
                 for f in self.funcs}
        while True:
            more = {name for name, callees in calls.items() if callees & found} - found
            if not more:
                return found
            found |= more

    def _lane_calls(self, node: Node) -> list[LaneCall]:
        found = []
        for n in walk(node):
            if isinstance(n, Call) and isinstance(n.func, Leaf) and self.src.word(n.func.at) in LANE_OPS:
                name = self.src.word(n.func.at)
                op = LANE_OPS[name]
                args = list(n.args)
                mask = args.pop(0) if op.mask and args else None
                value = args[0] if args and op.kind != "activemask" else None
                lane = args[1] if len(args) > 1 and op.is_shuffle else None
                width = args[2] if len(args) > 2 and op.is_shuffle else None
                found.append(LaneCall(op, n, name, mask, value, lane, width))
        return found

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

    # ---- values ----

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
            if callee in self.by_name:
                return self.by_name[callee].ret_tags
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
        threadish = bool(both & _THREADISH)
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

    # ---- tags of variables and functions ----

    def _tag(self, f: _Function) -> None:
        defs: list[tuple[str, Node, int, int]] = []
        for root, node in f.roots:
            end = root.span[1]
            if root.kind == "init":
                defs.append((root.target, node, root.target_at, end))
            for n in walk(node):
                if isinstance(n, Binary) and n.op in _ASSIGN and self.name(n.left):
                    defs.append((self.name(n.left), n.right, n.at, end))
        for loop in f.body.loops:
            if loop.var and loop.init[0] < loop.init[1]:
                defs.append((loop.var, parse(self.src, *loop.init), loop.at, loop.body[1]))
        f.defs = defs
        env: dict[str, frozenset[str]] = {}
        for _ in range(3):
            for var, value, _, _ in defs:
                env[var] = env.get(var, frozenset()) | self.tags(value, env)
        f.env = env
        f.ret_tags = frozenset().union(*(self.tags(n, env) for r, n in f.roots if r.kind == "return"))
        if f.fn.is_macro and f.roots:
            f.ret_tags |= self.tags(f.roots[-1][1], env)

    # ---- evidence of the lane count ----

    def _evidence(self, f: _Function, counted: set[int]) -> None:
        """Collect the lane-count evidence of ``f``: the wave size wherever it is used, 32-lane numbering in the
        nodes ``counted`` (where it meets cross-lane work, see ``_relevance``), and 32-lane trees."""
        widths = {p for c in f.lane_calls if c.width is not None for p in _positions(c.width)}
        for root, node in f.roots:
            for p in self.wave_leaves(node):
                if p not in widths:
                    f.ew.append(p)
            for n in walk(node):
                if isinstance(n, Binary) and id(n) in counted:
                    self._numbering(f, n, root.kind == "cond")
        for c in f.lane_calls:
            if c.lane is not None:
                for n in walk(c.lane):
                    if isinstance(n, Binary) and (n.op, self.const(n.right)) in (("%", 32), ("&", 31)):
                        f.e32.append(first(n.right))
            if c.op.kind == "shfl" and self.const(c.lane) == 31 and not self._has_width(c):
                f.t32.append(first(c.lane))
        self._trees(f)
        f.e32 = sorted(set(f.e32))
        f.ew = sorted(set(f.ew))

    def _all_evidence(self) -> None:
        """Evidence of every function; the return values of functions whose result meets cross-lane work count
        too (``lane_id()`` returning ``threadIdx.x & 31``)."""
        returns: set[str] = set()
        while True:
            found = {f.fn.name: self._relevance(f, f.fn.name in returns) for f in self.funcs}
            more = set().union(*(callees for _, callees in found.values())) - returns
            if not more:
                break
            returns |= more
        for f in self.funcs:
            self._evidence(f, found[f.fn.name][0])

    def _relevance(self, f: _Function, returns_matter: bool) -> tuple[set[int], set[str]]:
        """Where lane numbers matter in ``f``: (ids of the nodes in which a 32-lane numbering counts, names of the
        called functions whose return values count). A numbering counts

        1. in an expression that does cross-lane work (itself or through a call), and in the values of the
           variables that expression uses;
        2. in the condition of an ``if`` around cross-lane work or around a use of a cross-lane result;
        3. in what runs under a condition that is itself cross-lane (a vote) or uses a cross-lane result;
        4. in where a cross-lane result is stored (``partial[warp] = sum``).

        Elsewhere, say as an array index or a tile edge, a thread index modulo 32 means the same on every wave."""
        def names(node: Node) -> set[str]:
            return {self.src.word(n.at) for n in walk(node) if isinstance(n, Leaf)}

        results: set[str] = set()  # variables that hold a cross-lane result
        for _, node in f.roots:  # identifiers passed to a cross-lane function or macro may be changed by it
            for n in walk(node):
                if isinstance(n, Call) and self.name(n.func) in self.lane_fns:
                    results |= {self.name(a) for a in n.args if self.name(a)}
        while True:
            more = {var for var, value, _, _ in f.defs if var not in results and
                    (any(self._crosses_lanes(n) for n in walk(value)) or names(value) & results)}
            if not more:
                break
            results |= more
        crossing = [any(self._crosses_lanes(n) for n in walk(node)) or bool(names(node) & results)
                    for _, node in f.roots]
        marked = {i for i, (_, node) in enumerate(f.roots) if any(self._crosses_lanes(n) for n in walk(node))}
        if returns_matter:
            marked |= {i for i, (root, _) in enumerate(f.roots) if root.kind == "return"}
        for g in f.body.guards:
            span = g.rest if g.exits else g.body
            inside = {i for i, (root, _) in enumerate(f.roots) if span[0] <= root.span[0] < span[1]}
            cond = {i for i, (root, _) in enumerate(f.roots) if root.kind == "cond" and root.span == g.cond}
            if any(crossing[i] for i in inside):
                marked |= cond
            if any(crossing[i] for i in cond):
                marked |= inside
        counted = {id(n) for i in marked for n in walk(f.roots[i][1])}
        used = set().union(*(names(f.roots[i][1]) for i in marked)) if marked else set()
        for _, node in f.roots:
            for n in walk(node):
                if isinstance(n, Binary) and n.op in _ASSIGN and names(n.right) & results:
                    counted |= {id(m) for m in walk(n.left)}
                    used |= names(n.left)
        while True:
            values = [value for var, value, _, _ in f.defs if var in used]
            more = set().union(*(names(v) for v in values)) - used if values else set()
            counted |= {id(n) for v in values for n in walk(v)}
            if not more:
                break
            used |= more
        callees = {self.name(n.func) for _, node in f.roots for n in walk(node)
                   if id(n) in counted and isinstance(n, Call) and self.name(n.func) in self.by_name}
        return counted, callees

    def _crosses_lanes(self, node: Node) -> bool:
        """Whether a node is a call of a cross-lane intrinsic or of a function that does cross-lane work."""
        return isinstance(node, Call) and (self.name(node.func) in LANE_OPS or self.name(node.func) in self.lane_fns)

    def _numbering(self, f: _Function, n: Binary, in_condition: bool) -> None:
        """Explicit 32-lane numbering: thread index % 32, & 31, / 32, >> 5, or compared with 32 / 31 in a
        condition."""
        left = self.tags(n.left, f.env)
        if not left & _THREADISH:
            return
        value = self.const(n.right)
        if (n.op in ("%", "/") and value == 32) or (n.op == "&" and value == 31) or (n.op == ">>" and value == 5) \
                or (in_condition and n.op in ("<", "<=", ">", ">=", "==", "!=") and value in (31, 32)):
            f.e32.append(first(n.right))

    def _has_width(self, c: LaneCall) -> bool:
        """Whether a shuffle says its segment width (a constant of at most 32; a wave-size width says nothing)."""
        value = self.const(c.width)
        return value is not None and value <= 32

    def _loop_of(self, f: _Function, var: str, at: int) -> Loop | None:
        for loop in f.body.loops:
            if loop.var == var and loop.body[0] <= at < loop.body[1]:
                return loop
        return None

    def _max_offset(self, f: _Function, c: LaneCall) -> tuple[int | None, int]:
        """The largest offset a shuffle uses and the position of the constant that sets it ((None, -1) when
        unknown): a constant, or the variable of a halving loop (its start) or doubling loop (below its bound)."""
        value = self.const(c.lane)
        if value is not None:
            return value, first(c.lane)
        loop = self._loop_of(f, self.name(c.lane), c.node.at) if c.lane is not None else None
        if loop is None:
            return None, -1
        words = [self.src.word(q) for q in range(*loop.step)]
        if any(w in words for w in ("/=", ">>=", "/", ">>")) and loop.init[0] < loop.init[1]:
            init = parse(self.src, *loop.init)
            value = self.const(init)
            return (value, first(init)) if value is not None else (None, -1)
        if any(w in words for w in ("*=", "<<=", "*", "<<")):
            cond = strip(parse(self.src, *loop.cond))
            if isinstance(cond, Binary) and self.name(cond.left) == loop.var:
                bound = self.const(cond.right)
                if bound is not None and cond.op in ("<", "<="):
                    top = 1
                    while top * 2 < bound or (cond.op == "<=" and top * 2 == bound):
                        top *= 2
                    return top, first(cond.right)
        return None, -1

    def _trees(self, f: _Function) -> None:
        """Record shuffle steps that reach offset 32 or more, and 32-lane trees (largest offset 16) with the
        variable that holds their result. A step of 32 or more under a wave-size test (``if (warpSize > 32)``) is
        meant for 64-lane waves: it is accepted, and a tree on the same variable then spans the whole wave."""
        steps = []
        for c in f.lane_calls:
            if c.op.kind in ("shfl_xor", "shfl_down", "shfl_up") and not self._has_width(c) and c.lane is not None:
                top, at = self._max_offset(f, c)
                self.offsets[id(c.node)] = top
                steps.append((c, top, at))
        wide = set()
        for c, top, at in steps:
            if top is None or top < 32:
                continue
            if self._wave_guarded(f, c.node.at):
                wide.add(self._accumulator(f, c))
            else:
                self.refuse("shfl-offset-range", at, f"{c.func} reaches offset {top} without a width: outside a "
                            "32-lane warp (the lane keeps its own value) but inside a 64-lane wave (it reads the other "
                            "half)", "pass an explicit width, keep offsets below 32, or test the wave size first "
                            "(if (warpSize > 32) ...)")
        for c, top, at in steps:
            target = self._accumulator(f, c) if c.op.kind != "shfl_up" else ""
            if top != 16 or (target and target in wide):
                continue
            f.t32.append(at)
            if target:
                f.trees.append(Tree(target, at, self._tree_end(f, c)))
        for c in f.lane_calls:  # trees that say width 32: their result is complete in 32-lane groups too
            if c.op.kind in ("shfl_xor", "shfl_down") and self.const(c.width) == 32:
                target = self._accumulator(f, c)
                if target and self._max_offset(f, c)[0] == 16:
                    f.trees.append(Tree(target, first(c.width), self._tree_end(f, c)))

    def _tree_end(self, f: _Function, c: LaneCall) -> int:
        """Where a tree step's result is complete: after its loop, or after its statement."""
        loop = self._loop_of(f, self.name(c.lane), c.node.at) if c.lane is not None else None
        return loop.body[1] if loop else self._statement_end(f, c.node.at)

    def _wave_guarded(self, f: _Function, at: int) -> bool:
        """Whether position ``at`` only runs under an ``if`` that tests the wave size."""
        return any(g.body[0] <= at < g.body[1] and self.mentions_wave(parse(self.src, *g.cond))
                   for g in f.body.guards)

    def _statement_end(self, f: _Function, at: int) -> int:
        for root, _ in f.roots:
            if root.span[0] <= at < root.span[1]:
                return root.span[1]
        return at + 1

    def _accumulator(self, f: _Function, c: LaneCall) -> str:
        """The variable that a shuffle step accumulates into (``v += shfl(v, o)``, ``v = max(v, shfl(v, o))``)."""
        used = {self.src.word(n.at) for n in walk(c.value)} if c.value is not None else set()
        for var, value, _, _ in f.defs:
            if var in used and any(n is c.node for n in walk(value)):
                return var
        return ""

    # ---- verdicts ----

    def refuse(self, check: str, at: int, reason: str, hint: str = "") -> None:
        self.out.append(Verdict(REFUSE, check, at, reason, hint))

    def note(self, action: str, check: str, at: int, reason: str, insert: tuple[int, str] | None = None) -> None:
        self.out.append(Verdict(action, check, at, reason, "", insert))

    def where(self, p: int) -> str:
        tok = self.src.tok(p)
        return f"{tok.line}:{tok.col}"

    def verdicts(self) -> list[Verdict]:
        """All decisions for the file, sorted by position (refusals, rewrites and notes)."""
        for f in self.funcs:
            self._ballots(f)
            self._shifts(f)
            self._half_shuffles(f)
        for context in self._contexts():
            self._decide(context)
        self._constants_notes()
        unique = {(v.at, v.check): v for v in self.out}
        changed = {v.at for v in unique.values() if v.action != TRANSLATE}
        kept = [v for v in unique.values() if v.action != TRANSLATE or v.at not in changed]
        return sorted(kept, key=lambda v: (v.at, v.check))

    def _calls(self, f: _Function) -> set[str]:
        """Names of the file's functions that ``f`` calls."""
        return {self.name(n.func) for _, node in f.roots for n in walk(node) if isinstance(n, Call)} & \
            set(self.by_name)

    def _contexts(self) -> list[list[_Function]]:
        """The groups of functions that are decided together: each function that no other function of its unit
        calls (a kernel), with everything it calls. A helper shared by two kernels is decided once for each: one
        kernel's 32-lane groups do not make another kernel's whole-warp code right."""
        contexts = []
        for unit in self._units():
            names = {f.fn.name for f in unit}
            calls = {f.fn.name: self._calls(f) & names for f in unit}
            called = set().union(*calls.values())
            roots = [f.fn.name for f in unit if f.fn.name not in called] or [unit[0].fn.name]
            for name in roots:
                reach, todo = {name}, [name]
                while todo:
                    for callee in calls[todo.pop()] - reach:
                        reach.add(callee)
                        todo.append(callee)
                contexts.append([f for f in unit if f.fn.name in reach])
        return contexts

    def _units(self) -> list[list[_Function]]:
        """Functions joined by calls (either way) into groups that do cross-lane work: a caller that numbers lanes
        and the helper that shuffles, or a helper that numbers lanes for its caller, decide together."""
        parent = {f.fn.name: f.fn.name for f in self.funcs}

        def root(x: str) -> str:
            while parent[x] != x:
                x = parent[x]
            return x

        for f in self.funcs:
            for callee in self._calls(f):
                parent[root(f.fn.name)] = root(callee)
        units: dict[str, list[_Function]] = {}
        for f in self.funcs:
            units.setdefault(root(f.fn.name), []).append(f)
        return [u for u in units.values() if any(f.lane_calls for f in u)]

    def _decide(self, unit: list[_Function]) -> None:
        ew = sorted(p for f in unit for p in f.ew)
        e32 = any(f.e32 for f in unit)
        explicit32 = e32 and not ew
        returns_tree = self._tree_returns(unit)
        explained: set[int] = set()
        for f in unit:
            for tree, consumer, reason in self._consumers(f, returns_tree):
                if explicit32:
                    continue
                explained.add(tree.start)
                self.refuse("wave32-tree-broadcast", consumer, reason +
                            f"; the tree at {self.where(tree.start)} only combines 32 lanes", _HINT_TREE)
            for c in f.lane_calls:
                if c.op.kind == "shfl" and self.const(c.lane) == 31 and not self._has_width(c) and not explicit32:
                    explained.add(first(c.lane))
                    self.refuse("wave32-last-lane", c.node.at, f"{c.func} reads lane 31, the last lane of a 32-lane "
                                "warp; on a 64-lane wave the last lane is 63",
                                "read lane warpSize - 1, or pass width 32")
        declared = all(self._has_width(c) for f in unit for c in f.lane_calls if c.op.is_shuffle) and \
            not self._votes(unit)
        if ew and not declared:  # when every shuffle says width <= 32, lane numbers only matter to the readers
            for f in unit:
                marks = sorted(p for p in set(f.e32) | set(f.t32) if p not in explained)
                if marks:
                    self._mixed(f, marks[0], ew[0])
        if explicit32:
            self._groups32(unit)
        self._portable_notes(unit, ew, explicit32)

    def _tree_returns(self, unit: list[_Function]) -> dict[str, int]:
        """The unit's functions that return a 32-lane tree's result, with the position of that tree."""
        found: dict[str, int] = {}
        for _ in range(len(unit) + 1):
            for f in unit:
                trees = self._call_trees(f, found)
                for root, node in f.roots:
                    tree = self._tree_in(node, root.span[0], trees, found)
                    if root.kind == "return" and tree is not None:
                        found.setdefault(f.fn.name, tree.start)
        return found

    def _call_trees(self, f: _Function, returns_tree: dict[str, int]) -> list[Tree]:
        """Trees of ``f`` and variables that receive a tree's result from a call."""
        trees = list(f.trees)
        for var, value, _, end in f.defs:
            for n in walk(value):
                if isinstance(n, Call) and self.name(n.func) in returns_tree:
                    trees.append(Tree(var, returns_tree[self.name(n.func)], end))
        return trees

    def _tree_in(self, node: Node, at: int, trees: list[Tree], returns_tree: dict[str, int]) -> Tree | None:
        """The tree whose result an expression at ``at`` uses (a variable after its tree, or a call), or None."""
        for n in walk(node):
            if isinstance(n, Call) and self.name(n.func) in returns_tree:
                return Tree(self.name(n.func), returns_tree[self.name(n.func)], n.at)
            if isinstance(n, Leaf):
                for t in trees:
                    if t.var == self.src.word(n.at) and t.end <= at:
                        return t
        return None

    def _consumers(self, f: _Function, returns_tree: dict[str, int]) -> list[tuple[Tree, int, str]]:
        """Where a 32-lane tree's result is broadcast or read at lane 0 of a wider group: (tree, position, reason)."""
        trees = self._call_trees(f, returns_tree)
        found = []

        def tree_at(node: Node, at: int) -> Tree | None:
            return self._tree_in(node, at, trees, returns_tree)

        for c in f.lane_calls:
            if c.op.kind == "shfl" and not self._has_width(c) and c.value is not None:
                tree = tree_at(c.value, c.node.at)
                if tree is not None:
                    found.append((tree, c.node.at, f"{c.func} broadcasts a 32-lane tree's result across a 64-lane "
                                  "wave: lanes 32-63 get the other half's value"))
        for g in f.body.guards:
            zero = self._lane_zero(f, g.cond, g.exits)
            if zero is None:
                continue
            span = g.rest if g.exits else g.body
            for root, node in f.roots:
                if span[0] <= root.span[0] < span[1]:
                    tree = tree_at(node, root.span[0])
                    if tree is not None:
                        found.append((tree, zero[0], zero[1]))
                        break
        for root, node in f.roots:
            for n in walk(node):
                if isinstance(n, Binary) and n.op == "?" and isinstance(n.right, Binary) and n.right.op == ":":
                    zero = self._lane_zero(f, None, False, n.left)
                    if zero is not None and tree_at(n.right.left, root.span[0]) is not None:
                        found.append((tree_at(n.right.left, root.span[0]), zero[0], zero[1]))
        return found

    def _lane_zero(self, f: _Function, cond: tuple[int, int] | None, exits: bool,
                   node: Node | None = None) -> tuple[int, str] | None:
        """If a condition singles out lane 0 of a group wider than 32 lanes (or of an unknown group): (position,
        reason). With ``exits`` the guarded statement leaves, so the rest runs where the condition is false."""
        node = parse(self.src, *cond) if node is None else node
        for n in walk(node):
            subject = None
            if isinstance(n, Binary):
                lz, rz = self.const(n.left) == 0, self.const(n.right) == 0
                if (n.op == "==" and not exits) or (n.op in ("!=", ">") and exits):
                    subject = n.left if rz else (n.right if lz and n.op != ">" else None)
            elif isinstance(n, Unary) and n.op == "!" and not exits:
                subject = n.operand
            if subject is None:
                continue
            subject = strip(subject)
            t = self.tags(subject, f.env)
            pos = first(subject)
            text = self._text(subject)
            if LANE32 in t and not t & {THREAD, LANEW}:
                return None
            if LANEW in t:
                return pos, f"'{text}' is a lane of the 64-lane wave: its lane 0 misses lanes 32-63"
            if THREAD in t:
                return pos, (f"'{text}' == 0 picks one thread of a group as wide as the block, which holds more than "
                             "32 lanes on a 64-lane wave (cannot tell the block size)")
            if GROUP in t:
                continue
            if self.name(subject) and (self.name(subject) in f.body.declared):
                return pos, (f"'{text}' == 0: cannot tell how '{text}' numbers lanes (it does not come from "
                             "threadIdx in this function)")
        return None

    def _text(self, node: Node) -> str:
        """The source text of an expression, as written."""
        positions = _positions(node)
        start, end = self.src.sig[min(positions)], self.src.sig[max(positions)]
        return "".join(t.text for t in self.src.tokens[start:end + 1]).strip()

    def _mixed(self, f: _Function, mark: int, wave_at: int) -> None:
        in_src = any(c.op.kind == "shfl" and c.lane is not None and mark in _positions(c.lane)
                     for c in f.lane_calls)
        if in_src:
            self.refuse("shfl-lane-mod32", mark, f"source lane taken modulo 32 without a width, while lanes are "
                        f"numbered with warpSize (at {self.where(wave_at)}): on a 64-lane wave lanes 32-63 read from "
                        "lanes 0-31", "pass width 32 to the shuffle, or take the lane modulo warpSize")
            return
        self.refuse("lane-constant-mixed", mark, f"'{self.src.word(mark)}' counts lanes in 32-lane groups, but this "
                    f"cross-lane code also uses the wave size (at {self.where(wave_at)}), which is 64 on AMD",
                    _HINT_MIXED)

    def _votes(self, unit: list[_Function]) -> list[LaneCall]:
        """Votes, ballots and active masks whose value is used (not only passed as another call's lane mask)."""
        masks = {id(n) for f in unit for c in f.lane_calls if c.mask is not None for n in walk(c.mask)}
        return [c for f in unit for c in f.lane_calls if c.op.is_vote and id(c.node) not in masks]

    def _groups32(self, unit: list[_Function]) -> None:
        """32-lane-group code: votes are refused, shuffles get width 32."""
        for c in self._votes(unit):
            self.refuse("vote-in-32-lane-groups", c.node.at, f"{c.func} covers the whole 64-lane wave, but this code "
                        "works in 32-lane groups (it numbers lanes modulo 32)", "compute the vote per 32-lane group "
                        "with shuffles of width 32, or number lanes with warpSize")
        for f in unit:
            for c in f.lane_calls:
                if not c.op.is_shuffle or c.width is not None:
                    continue
                if c.op.kind == "shfl" and not self.lt32(c.lane, f.env):
                    self.refuse("shfl-src-range", c.node.at, f"{c.func} with width 32 would read lane "
                                f"'{self._text(c.lane) if c.lane else '?'}' without reducing it modulo 32 (CUDA "
                                "does; HIP reads the other half)", "take the source lane modulo 32")
                    continue
                top = self.offsets.get(id(c.node))
                if c.op.kind == "shfl_xor" and top is not None and top < 32:
                    self.note(TRANSLATE, "portable-32-xor", c.node.at, f"{c.func} offset below 32 stays inside "
                              "its aligned 32-lane half")
                    continue
                self.note(REWRITE, "add-width-32", c.node.at, f"{c.func} in code written for 32-lane groups: width "
                          "32 makes each aligned half of the 64-lane wave act as a CUDA warp", (c.node.close, ", 32"))

    def _portable_notes(self, unit: list[_Function], ew: list[int], explicit32: bool) -> None:
        for f in unit:
            for c in f.lane_calls:
                if self._has_width(c):
                    self.note(TRANSLATE, "portable-width", c.node.at, f"{c.func} with width "
                              f"{self.const(c.width)}: segments of that many lanes on both vendors")
                elif explicit32:
                    continue
                elif ew:
                    self.note(TRANSLATE, "portable-wave", c.node.at, f"{c.func}: lanes are numbered with the wave "
                              "size, which HIP gives as 64")
                else:
                    self.note(TRANSLATE, "portable-warp", c.node.at, f"{c.func} acts on the whole warp, which "
                              "becomes the whole wave")

    # ---- ballots, lane bits, half shuffles ----

    def _ballot_source(self, node: Node, env: dict[str, frozenset[str]]) -> int:
        for n in walk(node):
            if BALLOT in self.tags(n, env) and isinstance(strip(n), (Leaf, Call)):
                return first(n)
        return first(node)

    def _ballots(self, f: _Function) -> None:
        env = f.env
        for root, node in f.roots:
            if root.kind == "init" and BALLOT in self.tags(node, env) and \
                    self.type_bits(f.body.declared.get(root.target, ())) in (8, 16, 32):
                self._store(root.target, self._ballot_source(node, env), f.body.declared[root.target])
            if root.kind == "return" and BALLOT in self.tags(node, env):
                words = tuple(self.src.word(q) for q in range(f.fn.head, f.fn.name_at) if self.src.is_ident(q))
                if self.type_bits(words) in (8, 16, 32):
                    self._store(f.fn.name + "()", self._ballot_source(node, env), words)
            for n in walk(node):
                if isinstance(n, Binary) and n.op == "=" and self.name(n.left) in f.body.declared and \
                        BALLOT in self.tags(n.right, env) and \
                        self.type_bits(f.body.declared[self.name(n.left)]) in (8, 16, 32):
                    self._store(self.name(n.left), self._ballot_source(n.right, env),
                                f.body.declared[self.name(n.left)])
                elif isinstance(n, Cast) and BALLOT in self.tags(n.operand, env) and \
                        self.type_bits(n.types) in (8, 16, 32):
                    self._store(f"({' '.join(n.types)})", n.at, n.types)
                elif isinstance(n, Call) and self.name(n.func) in _BIT_OPS_32 and n.args and \
                        BALLOT in self.tags(n.args[0], env):
                    name = self.name(n.func)
                    self.refuse("ballot-32bit-op", n.at, f"{name} takes 32 bits: it sees only lanes 0-31 of a "
                                "64-lane ballot", f"use {name}ll")
                elif isinstance(n, Binary) and n.op in ("==", "!=", "&", "|", "^"):
                    for mask, other in ((n.left, n.right), (n.right, n.left)):
                        if self.const(mask) == FULL_MASK_32 and BALLOT in self.tags(other, env):
                            self.refuse("ballot-32bit-op", first(mask), f"'{self._text(mask)}' is all lanes of a "
                                        "32-lane warp; a 64-lane ballot has 64 bits", "compare with ~0ull, or "
                                        "with the ballot of all active lanes")

    def _store(self, target: str, at: int, types: tuple[str, ...]) -> None:
        self.refuse("ballot-32bit-store", at, f"a ballot or active mask has 64 bits on a 64-lane wave; '{target}' is "
                    f"'{' '.join(types)}' and keeps only lanes 0-31", _HINT_BALLOT)

    def _shifts(self, f: _Function) -> None:
        for root, node in f.roots:
            has_ballot = any(BALLOT in self.tags(n, f.env) for n in walk(node) if isinstance(n, (Leaf, Call)))
            for n in walk(node):
                if not (isinstance(n, Binary) and n.op == "<<"):
                    continue
                left = strip(n.left)
                bits = None
                if isinstance(left, Leaf) and self.src.tok(left.at).kind == NUMBER:
                    bits = 64 if "l" in self.src.word(left.at).lower() else 32
                elif isinstance(left, Cast):
                    bits = self.type_bits(left.types)
                if bits not in (8, 16, 32):
                    continue
                t = self.tags(n.right, f.env)
                if self.lt32(n.right, f.env):
                    continue
                text = self._text(n.right)
                if t & {LANEW, THREAD}:
                    self.refuse("lanemask-32bit-shift", first(n.left), f"'{self._text(n.left)} << {text}' is 32 bits "
                                f"wide, but '{text}' reaches 63 on a 64-lane wave", _HINT_SHIFT)
                elif has_ballot:
                    self.refuse("lanemask-32bit-shift", first(n.left), f"'{self._text(n.left)} << {text}' is 32 bits "
                                f"wide next to a 64-lane ballot; cannot tell that '{text}' stays below 32",
                                _HINT_SHIFT)

    def _half_shuffles(self, f: _Function) -> None:
        for c in f.lane_calls:
            if c.op.is_shuffle and c.value is not None and self.name(c.value) and \
                    set(f.body.declared.get(self.name(c.value), ())) & _HALF_TYPES:
                self.refuse("shfl-half", c.node.at, f"{c.func} of a 16-bit value: hiprtc (ROCm 5.2) has no __half "
                            "or __half2 shuffle", "shuffle the 32-bit pattern (e.g. through __half2 <-> unsigned "
                            "with memcpy) and convert back")

    def _constants_notes(self) -> None:
        """Notes for lane-looking constants that are not lane counts (explain mode)."""
        used = {p for f in self.funcs for p in (*f.e32, *f.t32)}
        lane_fns = {id(f) for u in self._units() for f in u}
        for p in range(len(self.src.sig)):
            tok = self.src.tok(p)
            if tok.kind != NUMBER or int_value(tok.text) not in (31, 32, FULL_MASK_32) or p in used:
                continue
            owner = next((f for f in self.funcs if f.fn.body[0] <= p < f.fn.body[1]), None)
            if owner is None:
                why = "it defines a constant, which is judged where it is used"
            elif id(owner) not in lane_fns:
                why = "no cross-lane operation depends on it"
            elif any(c.mask is not None and p in _positions(c.mask) for c in owner.lane_calls):
                why = "a lane mask argument, which HIP's mask-free calls drop"
            else:
                why = "not used as a lane number, lane mask or shuffle offset (a size, tile edge or count)"
            self.note(TRANSLATE, "not-a-lane-count", p, f"'{tok.text}': {why}")


_ASSIGN = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: int(a / b), "%": lambda a, b: a % b, "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
}


def _positions(node: Node) -> set[int]:
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


def analyse(src: SourceFile) -> list[Verdict]:
    """The wave64 verdicts of a file (see the module docstring)."""
    return Analysis(src).verdicts()


__all__ = ["CHECKS", "LANE_OPS", "REFUSE", "REWRITE", "TRANSLATE", "Verdict", "analyse", "int_value"]
