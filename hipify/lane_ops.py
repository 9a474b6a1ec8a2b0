"""The cross-lane intrinsics the lane analysis knows (CUDA's ``*_sync`` forms and HIP's mask-free forms), and the
role of each argument of a call."""
from __future__ import annotations

from dataclasses import dataclass

from .expr import Call, Leaf, Node, walk
from .source import SourceFile


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


def find_lane_calls(src: SourceFile, node: Node) -> list[LaneCall]:
    """The cross-lane calls in an expression, with their arguments sorted by role."""
    found = []
    for n in walk(node):
        if isinstance(n, Call) and isinstance(n.func, Leaf) and src.word(n.func.at) in LANE_OPS:
            name = src.word(n.func.at)
            op = LANE_OPS[name]
            args = list(n.args)
            mask = args.pop(0) if op.mask and args else None
            value = args[0] if args and op.kind != "activemask" else None
            lane = args[1] if len(args) > 1 and op.is_shuffle else None
            width = args[2] if len(args) > 2 and op.is_shuffle else None
            found.append(LaneCall(op, n, name, mask, value, lane, width))
    return found
