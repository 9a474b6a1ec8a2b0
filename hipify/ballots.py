"""Checks that hold whatever lane count the code assumes: on a 64-lane wave a ballot or active mask has 64 bits, so
keeping it in 32 bits, counting it with a 32-bit operation, comparing it with 0xffffffff or building lane bits
with a 32-bit ``1u << lane`` loses lanes 32-63; and hiprtc (ROCm 5.2) has no 16-bit shuffles."""
from __future__ import annotations

from .expr import Binary, Call, Cast, Leaf, Node, first, strip, walk
from .facts import FunctionFacts
from .lexer import NUMBER
from .values import BALLOT, LANEW, THREAD, Values
from .verdict import REFUSE, Verdict

FULL_MASK_32 = 0xFFFFFFFF
_BIT_OPS_32 = frozenset({"__popc", "__ffs", "__clz", "__brev"})
_HALF_TYPES = frozenset({"__half", "__half2", "half", "half2"})
_NARROW = (8, 16, 32)

CHECKS: dict[str, str] = {
    "ballot-32bit-store": "a ballot or active mask stored in a 32-bit integer",
    "ballot-32bit-op": "a ballot or active mask counted or compared with a 32-bit operation",
    "lanemask-32bit-shift": "a 32-bit lane bit (1u << lane) where the lane can reach 63",
    "shfl-half": "a shuffle of a __half or __half2 value (hiprtc 5.2 has no such overload)",
}

_HINT_BALLOT = "keep ballots and active masks in unsigned long long (or auto) and count them with __popcll / __ffsll"
_HINT_SHIFT = "build lane bits as 1ull << lane"


def check_bit_widths(values: Values, f: FunctionFacts) -> list[Verdict]:
    """The refusals of this module for one function."""
    return _ballots(values, f) + _shifts(values, f) + _half_shuffles(values, f)


def _refuse(check: str, at: int, reason: str, hint: str) -> Verdict:
    return Verdict(REFUSE, check, at, reason, hint)


def _store(target: str, at: int, types: tuple[str, ...]) -> Verdict:
    return _refuse("ballot-32bit-store", at, f"a ballot or active mask has 64 bits on a 64-lane wave; '{target}' is "
                   f"'{' '.join(types)}' and keeps only lanes 0-31", _HINT_BALLOT)


def _ballot_source(values: Values, node: Node, env: dict[str, frozenset[str]]) -> int:
    """Position of the ballot (call or variable) inside an expression."""
    for n in walk(node):
        if BALLOT in values.tags(n, env) and isinstance(strip(n), (Leaf, Call)):
            return first(n)
    return first(node)


def _ballots(values: Values, f: FunctionFacts) -> list[Verdict]:
    env, declared, src = f.env, f.body.declared, values.src
    found = []
    for root, node in f.roots:
        if root.kind == "init" and BALLOT in values.tags(node, env) and \
                values.type_bits(declared.get(root.target, ())) in _NARROW:
            found.append(_store(root.target, _ballot_source(values, node, env), declared[root.target]))
        if root.kind == "return" and BALLOT in values.tags(node, env):
            words = tuple(src.word(q) for q in range(f.fn.head, f.fn.name_at) if src.is_ident(q))
            if values.type_bits(words) in _NARROW:
                found.append(_store(f.fn.name + "()", _ballot_source(values, node, env), words))
        for n in walk(node):
            if isinstance(n, Binary) and n.op == "=" and values.name(n.left) in declared and \
                    BALLOT in values.tags(n.right, env) and values.type_bits(declared[values.name(n.left)]) in _NARROW:
                target = values.name(n.left)
                found.append(_store(target, _ballot_source(values, n.right, env), declared[target]))
            elif isinstance(n, Cast) and BALLOT in values.tags(n.operand, env) and values.type_bits(n.types) in _NARROW:
                found.append(_store(f"({' '.join(n.types)})", n.at, n.types))
            elif isinstance(n, Call) and values.name(n.func) in _BIT_OPS_32 and n.args and \
                    BALLOT in values.tags(n.args[0], env):
                name = values.name(n.func)
                found.append(_refuse("ballot-32bit-op", n.at, f"{name} takes 32 bits: it sees only lanes 0-31 of a "
                                     "64-lane ballot", f"use {name}ll"))
            elif isinstance(n, Binary) and n.op in ("==", "!=", "&", "|", "^"):
                for mask, other in ((n.left, n.right), (n.right, n.left)):
                    if values.const(mask) == FULL_MASK_32 and BALLOT in values.tags(other, env):
                        found.append(_refuse("ballot-32bit-op", first(mask), f"'{values.text(mask)}' is all lanes "
                                             "of a 32-lane warp; a 64-lane ballot has 64 bits",
                                             "compare with ~0ull, or with the ballot of all active lanes"))
    return found


def _shifts(values: Values, f: FunctionFacts) -> list[Verdict]:
    found = []
    for _, node in f.roots:
        has_ballot = any(BALLOT in values.tags(n, f.env) for n in walk(node) if isinstance(n, (Leaf, Call)))
        for n in walk(node):
            if not (isinstance(n, Binary) and n.op == "<<"):
                continue
            left = strip(n.left)
            bits = None
            if isinstance(left, Leaf) and values.src.tok(left.at).kind == NUMBER:
                bits = 64 if "l" in values.src.word(left.at).lower() else 32
            elif isinstance(left, Cast):
                bits = values.type_bits(left.types)
            if bits not in _NARROW or values.lt32(n.right, f.env):
                continue
            shift = f"'{values.text(n.left)} << {values.text(n.right)}' is 32 bits wide"
            if values.tags(n.right, f.env) & {LANEW, THREAD}:
                found.append(_refuse("lanemask-32bit-shift", first(n.left), f"{shift}, but '{values.text(n.right)}' "
                                     "reaches 63 on a 64-lane wave", _HINT_SHIFT))
            elif has_ballot:
                found.append(_refuse("lanemask-32bit-shift", first(n.left), f"{shift} next to a 64-lane ballot; "
                                     f"cannot tell that '{values.text(n.right)}' stays below 32", _HINT_SHIFT))
    return found


def _half_shuffles(values: Values, f: FunctionFacts) -> list[Verdict]:
    return [_refuse("shfl-half", c.node.at, f"{c.func} of a 16-bit value: hiprtc (ROCm 5.2) has no __half or "
                    "__half2 shuffle", "shuffle the 32-bit pattern (e.g. through __half2 <-> unsigned with memcpy) and "
                    "convert back")
            for c in f.lane_calls
            if c.op.is_shuffle and c.value is not None and values.name(c.value) and
            set(f.body.declared.get(values.name(c.value), ())) & _HALF_TYPES]
