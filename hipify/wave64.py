"""What a file's cross-lane code means on a 64-lane wave: the analysis behind the wave64 verdicts.

CUDA code written for 32-lane warps keeps its meaning on AMD's 64-lane waves when it never depends on the lane
count, or when it says which lane groups it means. The analysis reads each function as expression trees (``expr``)
over its statements (``body``), and decides from what the code computes, not from how a number is spelled:

- Values are tagged (``values.py``): thread indices, lane numbers modulo 32 or modulo the wave, group numbers,
  the wave size, ballots; variables and function returns carry the tags of what they get (``facts.py``).
- Evidence of the lane count a function assumes: warpSize / PA_WARP_SIZE ("wave"), 32-lane numbering of thread
  indices where it meets cross-lane work ("32-lane groups"), and shuffle trees whose largest offset is 16, or that
  end below 32, without a width ("32-lane trees").
- Each kernel (a function that no other function calls) is decided with everything it calls: only "wave" (or
  none) is portable as it is; 32-lane groups without "wave" get width 32 on their shuffles (then every aligned
  half of a wave behaves as a CUDA warp); both together are refused, as is a 32-lane tree whose result is
  broadcast, or read at lane 0, of a group wider than 32.
- Ballots, lane bits and 16-bit shuffles are checked whatever the lane count (``ballots.py``).

Every verdict has an action (translate, rewrite, refuse), a check id (``CHECKS``), a position and a reason.
"""
from __future__ import annotations

from . import ballots
from .ballots import FULL_MASK_32, check_bit_widths
from .body import Loop
from .expr import Binary, Call, Leaf, Node, Unary, first, parse, strip, walk
from .facts import FunctionFacts, Tree, read_facts, tag_facts
from .lane_ops import LANE_OPS, LaneCall
from .lexer import NUMBER
from .source import SourceFile
from .values import ASSIGN_OPS, GROUP, LANE32, LANEW, THREAD, THREADISH, Values, int_value, positions
from .verdict import REFUSE, REWRITE, TRANSLATE, Verdict

# the checks and notes of the analysis (the translator merges them into its CHECKS)
CHECKS: dict[str, str] = {
    **ballots.CHECKS,
    "wave32-tree-broadcast": "a shuffle tree over 32 lanes (starting at offset 16) whose result is broadcast, or "
    "read at lane 0, of a group wider than 32 lanes",
    "wave32-last-lane": "a broadcast from lane 31 (the last lane of a 32-lane warp) without a width",
    "lane-constant-mixed": "32-lane numbering or a 32-lane tree mixed with warpSize in the same cross-lane code",
    "shfl-lane-mod32": "an indexed shuffle whose source lane is taken modulo 32, without a width, in code that "
    "numbers lanes with warpSize",
    "vote-in-32-lane-groups": "a vote, ballot or active mask in code written for 32-lane groups",
    "shfl-src-range": "an indexed shuffle in 32-lane-group code whose source lane may lie outside 0..31",
    "shfl-offset-range": "a shuffle offset of 32 or more without a width",
    "add-width-32": "rewrite: width 32 added to a shuffle in code written for 32-lane groups",
    "portable-wave": "note: cross-lane code that numbers lanes with warpSize",
    "portable-warp": "note: whole-warp cross-lane code that never depends on the lane count",
    "portable-width": "note: a shuffle with an explicit width of at most 32",
    "portable-32-xor": "note: an xor shuffle below 32 in 32-lane-group code (stays inside its aligned half)",
    "not-a-lane-count": "note: a constant 32, 31 or 0xffffffff that is not a lane count or lane mask",
}

_HINT_TREE = ("reduce the whole wave (start at warpSize / 2, or loop while offset < warpSize), or number 32-lane "
              "groups explicitly (lane = threadIdx.x % 32) and pass width 32 to every shuffle")
_HINT_GROUP_READ = ("read each 32-lane group's result at its own lane 0 (threadIdx.x % 32 == 0), or reduce the whole "
                    "wave (width warpSize, from warpSize / 2)")
_HINT_MIXED = "use one lane count throughout: warpSize everywhere, or 32-lane groups with width 32 on every shuffle"


class Analysis:
    """The wave64 analysis of one file; ``verdicts()`` gives its decisions."""

    def __init__(self, src: SourceFile) -> None:
        self.src = src
        self.values = Values(src)
        self.offsets: dict[int, int | None] = {}  # largest offset of each shuffle call (by node id)
        self.out: list[Verdict] = []
        self.funcs = [read_facts(src, fn) for fn in src.functions]
        self.by_name = {f.fn.name: f for f in self.funcs}
        self.lane_fns = self._lane_functions()
        for _ in range(2):  # return values flow into callers (and callers of callers)
            for f in self.funcs:
                tag_facts(self.values, f)
                self.values.returns[f.fn.name] = f.ret_tags
        self._all_evidence()

    def _lane_functions(self) -> set[str]:
        """Functions that do cross-lane work, themselves or through the functions they call."""
        found = {f.fn.name for f in self.funcs if f.lane_calls}
        calls = {f.fn.name: self._calls(f) for f in self.funcs}
        while True:
            more = {name for name, callees in calls.items() if callees & found} - found
            if not more:
                return found
            found |= more

    # ---- evidence of the lane count ----

    def _evidence(self, f: FunctionFacts, counted: set[int]) -> None:
        """Collect the lane-count evidence of ``f``: the wave size wherever it is used, 32-lane numbering in the
        nodes ``counted`` (where it meets cross-lane work, see ``_relevance``), and 32-lane trees."""
        widths = {p for c in f.lane_calls if c.width is not None for p in positions(c.width)}
        for root, node in f.roots:
            for p in self.values.wave_leaves(node):
                if p not in widths:
                    f.ew.append(p)
            for n in walk(node):
                if isinstance(n, Binary) and id(n) in counted:
                    self._numbering(f, n, root.kind == "cond")
        for c in f.lane_calls:
            if c.lane is not None:
                for n in walk(c.lane):
                    if isinstance(n, Binary) and (n.op, self.values.const(n.right)) in (("%", 32), ("&", 31)):
                        f.e32.append(first(n.right))
            if c.op.kind == "shfl" and self.values.const(c.lane) == 31 and not self._has_width(c):
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

    def _relevance(self, f: FunctionFacts, returns_matter: bool) -> tuple[set[int], set[str]]:
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
                if isinstance(n, Call) and self.values.name(n.func) in self.lane_fns:
                    results |= {self.values.name(a) for a in n.args if self.values.name(a)}
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
                if isinstance(n, Binary) and n.op in ASSIGN_OPS and names(n.right) & results:
                    counted |= {id(m) for m in walk(n.left)}
                    used |= names(n.left)
        while True:
            values = [value for var, value, _, _ in f.defs if var in used]
            more = set().union(*(names(v) for v in values)) - used if values else set()
            counted |= {id(n) for v in values for n in walk(v)}
            if not more:
                break
            used |= more
        callees = {self.values.name(n.func) for _, node in f.roots for n in walk(node)
                   if id(n) in counted and isinstance(n, Call) and self.values.name(n.func) in self.by_name}
        return counted, callees

    def _crosses_lanes(self, node: Node) -> bool:
        """Whether a node is a call of a cross-lane intrinsic or of a function that does cross-lane work."""
        return isinstance(node, Call) and (self.values.name(node.func) in LANE_OPS or
                                           self.values.name(node.func) in self.lane_fns)

    def _numbering(self, f: FunctionFacts, n: Binary, in_condition: bool) -> None:
        """Explicit 32-lane numbering: thread index % 32, & 31, / 32, >> 5, or compared with 32 / 31 in a
        condition."""
        left = self.values.tags(n.left, f.env)
        if not left & THREADISH:
            return
        value = self.values.const(n.right)
        if (n.op in ("%", "/") and value == 32) or (n.op == "&" and value == 31) or (n.op == ">>" and value == 5) \
                or (in_condition and n.op in ("<", "<=", ">", ">=", "==", "!=") and value in (31, 32)):
            f.e32.append(first(n.right))

    def _has_width(self, c: LaneCall) -> bool:
        """Whether a shuffle says its segment width (a constant of at most 32; a wave-size width says nothing)."""
        value = self.values.const(c.width)
        return value is not None and value <= 32

    def _loop_of(self, f: FunctionFacts, var: str, at: int) -> Loop | None:
        for loop in f.body.loops:
            if loop.var == var and loop.body[0] <= at < loop.body[1]:
                return loop
        return None

    def _max_offset(self, f: FunctionFacts, c: LaneCall) -> tuple[int | None, int]:
        """The largest offset a shuffle uses and the position of the constant that sets it ((None, -1) when
        unknown): a constant, or the variable of a halving loop (its start) or doubling loop (below its bound)."""
        value = self.values.const(c.lane)
        if value is not None:
            return value, first(c.lane)
        loop = self._loop_of(f, self.values.name(c.lane), c.node.at) if c.lane is not None else None
        if loop is None:
            return None, -1
        words = [self.src.word(q) for q in range(*loop.step)]
        if any(w in words for w in ("/=", ">>=", "/", ">>")) and loop.init[0] < loop.init[1]:
            init = parse(self.src, *loop.init)
            value = self.values.const(init)
            return (value, first(init)) if value is not None else (None, -1)
        if any(w in words for w in ("*=", "<<=", "*", "<<")):
            cond = strip(parse(self.src, *loop.cond))
            if isinstance(cond, Binary) and self.values.name(cond.left) == loop.var:
                bound = self.values.const(cond.right)
                if bound is not None and cond.op in ("<", "<="):
                    top = 1
                    while top * 2 < bound or (cond.op == "<=" and top * 2 == bound):
                        top *= 2
                    return top, first(cond.right)
        return None, -1

    def _trees(self, f: FunctionFacts) -> None:
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
            if c.op.kind in ("shfl_xor", "shfl_down") and self.values.const(c.width) == 32:
                target = self._accumulator(f, c)
                if target and self._max_offset(f, c)[0] == 16:
                    f.trees.append(Tree(target, first(c.width), self._tree_end(f, c), width_given=True))

    def _tree_end(self, f: FunctionFacts, c: LaneCall) -> int:
        """Where a tree step's result is complete: after its loop, or after its statement."""
        loop = self._loop_of(f, self.values.name(c.lane), c.node.at) if c.lane is not None else None
        return loop.body[1] if loop else self._statement_end(f, c.node.at)

    def _wave_guarded(self, f: FunctionFacts, at: int) -> bool:
        """Whether position ``at`` only runs under an ``if`` that tests the wave size."""
        return any(g.body[0] <= at < g.body[1] and self.values.mentions_wave(parse(self.src, *g.cond))
                   for g in f.body.guards)

    def _statement_end(self, f: FunctionFacts, at: int) -> int:
        for root, _ in f.roots:
            if root.span[0] <= at < root.span[1]:
                return root.span[1]
        return at + 1

    def _accumulator(self, f: FunctionFacts, c: LaneCall) -> str:
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
            self.out += check_bit_widths(self.values, f)
        for context in self._contexts():
            self._decide(context)
        self._constants_notes()
        unique = {(v.at, v.check): v for v in self.out}
        changed = {v.at for v in unique.values() if v.action != TRANSLATE}
        kept = [v for v in unique.values() if v.action != TRANSLATE or v.at not in changed]
        return sorted(kept, key=lambda v: (v.at, v.check))

    def _calls(self, f: FunctionFacts) -> set[str]:
        """Names of the file's functions that ``f`` calls."""
        return {self.values.name(n.func) for _, node in f.roots for n in walk(node) if isinstance(n, Call)} & \
            set(self.by_name)

    def _contexts(self) -> list[list[FunctionFacts]]:
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

    def _units(self) -> list[list[FunctionFacts]]:
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
        units: dict[str, list[FunctionFacts]] = {}
        for f in self.funcs:
            units.setdefault(root(f.fn.name), []).append(f)
        return [u for u in units.values() if any(f.lane_calls for f in u)]

    def _decide(self, unit: list[FunctionFacts]) -> None:
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
                            f"; the tree at {self.where(tree.start)} only combines 32 lanes",
                            _HINT_GROUP_READ if tree.width_given else _HINT_TREE)
            for c in f.lane_calls:
                if c.op.kind == "shfl" and self.values.const(c.lane) == 31 and not self._has_width(c) and \
                        not explicit32:
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

    def _tree_returns(self, unit: list[FunctionFacts]) -> dict[str, tuple[int, bool]]:
        """The unit's functions that return a 32-lane tree's result, with the position of that tree and whether its
        shuffles say width 32."""
        found: dict[str, tuple[int, bool]] = {}
        for _ in range(len(unit) + 1):
            for f in unit:
                trees = self._call_trees(f, found)
                for root, node in f.roots:
                    tree = self._tree_in(node, root.span[0], trees, found)
                    if root.kind == "return" and tree is not None:
                        found.setdefault(f.fn.name, (tree.start, tree.width_given))
        return found

    def _call_trees(self, f: FunctionFacts, returns_tree: dict[str, tuple[int, bool]]) -> list[Tree]:
        """Trees of ``f`` and variables that receive a tree's result from a call."""
        trees = list(f.trees)
        for var, value, _, end in f.defs:
            for n in walk(value):
                if isinstance(n, Call) and self.values.name(n.func) in returns_tree:
                    start, given = returns_tree[self.values.name(n.func)]
                    trees.append(Tree(var, start, end, given))
        return trees

    def _tree_in(self, node: Node, at: int, trees: list[Tree], returns_tree: dict[str, tuple[int, bool]]
                 ) -> Tree | None:
        """The tree whose result an expression at ``at`` uses (a variable after its tree, or a call), or None."""
        for n in walk(node):
            if isinstance(n, Call) and self.values.name(n.func) in returns_tree:
                start, given = returns_tree[self.values.name(n.func)]
                return Tree(self.values.name(n.func), start, n.at, given)
            if isinstance(n, Leaf):
                for t in trees:
                    if t.var == self.src.word(n.at) and t.end <= at:
                        return t
        return None

    def _consumers(self, f: FunctionFacts, returns_tree: dict[str, tuple[int, bool]]
                   ) -> list[tuple[Tree, int, str]]:
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

    def _lane_zero(self, f: FunctionFacts, cond: tuple[int, int] | None, exits: bool,
                   node: Node | None = None) -> tuple[int, str] | None:
        """If a condition singles out lane 0 of a group wider than 32 lanes (or of an unknown group): (position,
        reason). With ``exits`` the guarded statement leaves, so the rest runs where the condition is false."""
        node = parse(self.src, *cond) if node is None else node
        for n in walk(node):
            subject = None
            if isinstance(n, Binary):
                lz, rz = self.values.const(n.left) == 0, self.values.const(n.right) == 0
                if (n.op == "==" and not exits) or (n.op in ("!=", ">") and exits):
                    subject = n.left if rz else (n.right if lz and n.op != ">" else None)
            elif isinstance(n, Unary) and n.op == "!" and not exits:
                subject = n.operand
            if subject is None:
                continue
            subject = strip(subject)
            t = self.values.tags(subject, f.env)
            pos = first(subject)
            text = self.values.text(subject)
            if LANE32 in t and not t & {THREAD, LANEW}:
                return None
            if LANEW in t:
                return pos, f"'{text}' is a lane of the 64-lane wave: its lane 0 misses lanes 32-63"
            if THREAD in t:
                return pos, (f"'{text}' == 0 takes the result from thread 0 of the block, and a block can hold a "
                             "whole 64-lane wave (cannot tell its size)")
            if GROUP in t:
                continue
            if self.values.name(subject) in f.body.params:
                return pos, (f"'{text}' == 0: cannot tell how the parameter '{text}' numbers lanes (it does not come "
                             "from threadIdx in this function)")
        return None

    def _mixed(self, f: FunctionFacts, mark: int, wave_at: int) -> None:
        in_src = any(c.op.kind == "shfl" and c.lane is not None and mark in positions(c.lane)
                     for c in f.lane_calls)
        if in_src:
            self.refuse("shfl-lane-mod32", mark, f"source lane taken modulo 32 without a width, while lanes are "
                        f"numbered with warpSize (at {self.where(wave_at)}): on a 64-lane wave lanes 32-63 read from "
                        "lanes 0-31", "pass width 32 to the shuffle, or take the lane modulo warpSize")
            return
        what = "starts a shuffle tree over 32 lanes" if mark in f.t32 else "counts lanes in 32-lane groups"
        self.refuse("lane-constant-mixed", mark, f"'{self.src.word(mark)}' {what}, but this cross-lane code also "
                    f"uses the wave size (at {self.where(wave_at)}), which is 64 on AMD", _HINT_MIXED)

    def _votes(self, unit: list[FunctionFacts]) -> list[LaneCall]:
        """Votes, ballots and active masks whose value is used (not only passed as another call's lane mask)."""
        masks = {id(n) for f in unit for c in f.lane_calls if c.mask is not None for n in walk(c.mask)}
        return [c for f in unit for c in f.lane_calls if c.op.is_vote and id(c.node) not in masks]

    def _groups32(self, unit: list[FunctionFacts]) -> None:
        """32-lane-group code: votes are refused, shuffles get width 32."""
        for c in self._votes(unit):
            self.refuse("vote-in-32-lane-groups", c.node.at, f"{c.func} covers the whole 64-lane wave, but this code "
                        "works in 32-lane groups (it numbers lanes modulo 32)", "compute the vote per 32-lane group "
                        "with shuffles of width 32, or number lanes with warpSize")
        for f in unit:
            for c in f.lane_calls:
                if not c.op.is_shuffle or c.width is not None:
                    continue
                if c.op.kind == "shfl" and not self.values.lt32(c.lane, f.env):
                    self.refuse("shfl-src-range", c.node.at, f"{c.func} with width 32 would read lane "
                                f"'{self.values.text(c.lane) if c.lane else '?'}' without reducing it modulo 32 (CUDA "
                                "does; HIP reads the other half)", "take the source lane modulo 32")
                    continue
                top = self.offsets.get(id(c.node))
                if c.op.kind == "shfl_xor" and top is not None and top < 32:
                    self.note(TRANSLATE, "portable-32-xor", c.node.at, f"{c.func} offset below 32 stays inside "
                              "its aligned 32-lane half")
                    continue
                self.note(REWRITE, "add-width-32", c.node.at, f"{c.func} in code written for 32-lane groups: width "
                          "32 makes each aligned half of the 64-lane wave act as a CUDA warp", (c.node.close, ", 32"))

    def _portable_notes(self, unit: list[FunctionFacts], ew: list[int], explicit32: bool) -> None:
        for f in unit:
            for c in f.lane_calls:
                if self._has_width(c):
                    self.note(TRANSLATE, "portable-width", c.node.at, f"{c.func} with width "
                              f"{self.values.const(c.width)}: segments of that many lanes on both vendors")
                elif explicit32:
                    continue
                elif ew:
                    self.note(TRANSLATE, "portable-wave", c.node.at, f"{c.func}: lanes are numbered with the wave "
                              "size, which HIP gives as 64")
                else:
                    self.note(TRANSLATE, "portable-warp", c.node.at, f"{c.func} acts on the whole warp, which "
                              "becomes the whole wave")

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
            elif any(c.mask is not None and p in positions(c.mask) for c in owner.lane_calls):
                why = "a lane mask argument, which HIP's mask-free calls drop"
            else:
                why = "not used as a lane number, lane mask or shuffle offset (a size, tile edge or count)"
            self.note(TRANSLATE, "not-a-lane-count", p, f"'{tok.text}': {why}")


def analyse(src: SourceFile) -> list[Verdict]:
    """The wave64 verdicts of a file (see the module docstring)."""
    return Analysis(src).verdicts()


__all__ = ["CHECKS", "REFUSE", "REWRITE", "TRANSLATE", "Verdict", "analyse"]
