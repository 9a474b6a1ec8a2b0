"""What the lane analysis knows about one function (or function-like macro): its statements parsed into expression
trees, its cross-lane calls, the values its variables get with their tags, and the lane-count evidence that
``wave64.py`` collects into it."""
from __future__ import annotations

from dataclasses import dataclass, field

from .body import Body, Root, read_body
from .expr import Binary, Node, parse, walk
from .lane_ops import LaneCall, find_lane_calls
from .source import Function, SourceFile
from .values import ASSIGN_OPS, Values


@dataclass(frozen=True)
class Tree:
    """A variable that holds the result of a shuffle tree over 32 lanes from position ``end`` on."""

    var: str
    start: int  # where the tree's 32-lane extent is written (offset 16, bound 32, width 32)
    end: int
    width_given: bool = False  # the tree's shuffles say width 32


@dataclass
class FunctionFacts:
    fn: Function
    body: Body
    roots: list[tuple[Root, Node]]  # the body's expressions, parsed
    lane_calls: list[LaneCall]
    env: dict[str, frozenset[str]] = field(default_factory=dict)  # variable -> tags of every value it gets
    defs: list[tuple[str, Node, int, int]] = field(default_factory=list)  # (variable, value, position, statement end)
    ret_tags: frozenset[str] = frozenset()
    ew: list[int] = field(default_factory=list)  # positions of wave-size evidence
    e32: list[int] = field(default_factory=list)  # explicit 32-lane numbering
    t32: list[int] = field(default_factory=list)  # 32-lane trees and lane-31 reads
    trees: list[Tree] = field(default_factory=list)


def read_facts(src: SourceFile, fn: Function) -> FunctionFacts:
    """Parse a function's statements and find its cross-lane calls."""
    body = read_body(src, fn)
    roots = [(r, parse(src, *r.span)) for r in body.roots]
    return FunctionFacts(fn, body, roots, [c for _, node in roots for c in find_lane_calls(src, node)])


def tag_facts(values: Values, f: FunctionFacts) -> None:
    """Fill in the values each variable gets (declarations, assignments, loop starts), their tags and the tags of
    what the function returns (a macro "returns" its last expression)."""
    defs: list[tuple[str, Node, int, int]] = []
    for root, node in f.roots:
        end = root.span[1]
        if root.kind == "init":
            defs.append((root.target, node, root.target_at, end))
        for n in walk(node):
            if isinstance(n, Binary) and n.op in ASSIGN_OPS and values.name(n.left):
                defs.append((values.name(n.left), n.right, n.at, end))
    for loop in f.body.loops:
        if loop.var and loop.init[0] < loop.init[1]:
            defs.append((loop.var, parse(values.src, *loop.init), loop.at, loop.body[1]))
    f.defs = defs
    env: dict[str, frozenset[str]] = {}
    for _ in range(3):  # a variable's value may use variables defined later in a loop
        for var, value, _, _ in defs:
            env[var] = env.get(var, frozenset()) | values.tags(value, env)
    f.env = env
    f.ret_tags = frozenset().union(*(values.tags(n, env) for r, n in f.roots if r.kind == "return"))
    if f.fn.is_macro and f.roots:
        f.ret_tags |= values.tags(f.roots[-1][1], env)
