"""The torch operators behind portattn.attention, without a GPU: fake (meta) implementations, tracing with
torch.export / torch.compile (forward and backward), and the clear refusals (no LSE, out=, double backward)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import portattn
from portattn.ops.attention import NO_MASKS

ATTENTION = torch.ops.portattn.attention.default
ATTENTION_OUT = torch.ops.portattn.attention_out.default
BACKWARD = torch.ops.portattn.attention_backward.default


def meta(*shape, **kw):
    return torch.empty(*shape, device="meta", **kw)


@pytest.mark.parametrize("return_lse", [False, True])
def test_fake_shapes_dtypes_and_layout(return_lse):
    with FakeTensorMode():
        q = torch.empty(2, 100, 8, 64, device="cuda").transpose(1, 2)  # [2, 8, 100, 64], BSHD view
        k = torch.empty(2, 2, 37, 64, device="cuda")
        v = torch.empty(2, 2, 37, 64, device="cuda")
        res = portattn.attention(q, k, v, causal=True, return_lse=return_lse)
        out, lse = res if return_lse else (res, None)
        assert out.shape == (2, 8, 100, 64) and out.dtype == torch.float32 and out.device.type == "cuda"
        assert out.stride() == q.stride(), "the output keeps the query's layout"
        if return_lse:
            assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32 and lse.device.type == "cuda"
        buf = torch.empty(2, 8, 100, 64, device="cuda")
        res = portattn.attention(q, k, v, out=buf, return_lse=return_lse)
        assert (res[0] if return_lse else res) is buf
        if return_lse:
            assert res[1].shape == (2, 8, 100) and res[1].dtype == torch.float32


def test_operator_lse_is_empty_unless_asked():
    q = meta(1, 4, 9, 32)
    out, lse = ATTENTION(q, q, q, False, 0.5, False, False, *NO_MASKS)
    assert out.shape == q.shape and lse.shape == (0,) and lse.dtype == torch.float32
    out, lse = ATTENTION(q, q, q, False, 0.5, True, False, *NO_MASKS)
    assert lse.shape == (1, 4, 9)
    assert ATTENTION_OUT(q, q, q, torch.empty_like(q), True, 0.5, True, *NO_MASKS).shape == (1, 4, 9)


@pytest.mark.parametrize("op, extra, tail", [(ATTENTION, (), (False,)), (ATTENTION_OUT, (meta(2, 4, 16, 64),), ())])
def test_opcheck_registration(op, extra, tail):
    q, kv = meta(2, 4, 16, 64), meta(2, 2, 16, 64)
    args = (q, kv, kv) + extra + (True, 0.125, True) + tail + NO_MASKS
    results = torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))
    assert all(r == "SUCCESS" for r in results.values()), results


def test_opcheck_backward_registration():
    q, kv = meta(2, 4, 16, 64), meta(2, 2, 16, 64)
    args = (meta(2, 4, 16, 64), q, kv, kv, meta(2, 4, 16, 64), meta(2, 4, 16), None, True, 0.125, False) + NO_MASKS
    results = torch.library.opcheck(BACKWARD, args, test_utils=("test_schema", "test_faketensor"))
    assert all(r == "SUCCESS" for r in results.values()), results
    dq, dk, dv = BACKWARD(*args)
    assert dq.shape == q.shape and dk.shape == kv.shape and dv.shape == kv.shape


def test_cpu_tensors_have_no_kernel():
    q = torch.zeros(1, 1, 4, 64)
    with pytest.raises(NotImplementedError, match="portattn::attention"):
        ATTENTION(q, q, q, False, 1.0, False, False, *NO_MASKS)


class Block(torch.nn.Module):
    """Attention between two elementwise ops, on [batch, seq, heads, head_dim] inputs."""

    def forward(self, q, k, v):
        out, lse = portattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                                      return_lse=True)
        return out.transpose(1, 2) * 2.0, lse + 1.0


class IntoBuffer(torch.nn.Module):
    def forward(self, q, k, v, out):
        portattn.attention(q, k, v, out=out, scale=0.2)
        return out + 1.0


def _export(module, args):
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = tuple(torch.empty(a, device="cuda") for a in args)
        return torch.export.export(module, fake, strict=True)


def test_export_traces_one_operator_call():
    ep = _export(Block(), [(2, 50, 8, 64), (2, 60, 2, 64), (2, 60, 2, 64)])
    calls = [n for n in ep.graph.nodes if n.target is ATTENTION]
    assert len(calls) == 1
    assert calls[0].args[3:] == (True, 0.125, True, False) + NO_MASKS
    output = next(n for n in ep.graph.nodes if n.op == "output")
    out, lse = (n.meta["val"] for n in output.args[0])
    assert out.shape == (2, 50, 8, 64) and lse.shape == (2, 8, 50)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # raised inside torch.export by some torch versions
def test_export_of_out_argument_declares_the_mutation():
    shape = (1, 4, 33, 128)
    ep = _export(IntoBuffer(), [shape] * 4)
    calls = [n for n in ep.graph.nodes if n.target is ATTENTION_OUT]
    assert len(calls) == 1 and calls[0].args[3].name == "out" and calls[0].args[4:] == (False, 0.2, False) + NO_MASKS
    functional = ep.run_decompositions()  # mutations become outputs written back to the inputs
    assert list(functional.graph_signature.user_inputs_to_mutate.values()) == ["out"]


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compile_traces_forward_and_backward_operators(fullgraph):
    """AOTAutograd traces the forward operator and, for the backward graph, the backward operator (meta tensors
    run their fake implementations)."""
    torch._dynamo.reset()
    seen = []

    def backend(gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified

        def record(graph, _):
            seen.extend(n.target for n in graph.graph.nodes if n.op == "call_function")
            return make_boxed_func(graph)

        return aot_module_simplified(gm, example_inputs, fw_compiler=record, bw_compiler=record)

    q = meta(1, 4, 8, 64, requires_grad=True)
    k, v = meta(1, 2, 8, 64, requires_grad=True), meta(1, 2, 8, 64, requires_grad=True)
    f = torch.compile(lambda q, k, v: ATTENTION(q, k, v, True, 0.125, True, False, *NO_MASKS)[0] * 2, backend=backend,
                      fullgraph=fullgraph)
    out = f(q, k, v)
    out.sum().backward()
    assert ATTENTION in seen and BACKWARD in seen
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_out_with_grad_is_refused():
    q = meta(1, 2, 8, 64)
    with pytest.raises(RuntimeError, match="out= is not differentiable"):
        portattn.attention(q, q, q, out=meta(1, 2, 8, 64, requires_grad=True))
    with pytest.raises(RuntimeError, match="out= is not differentiable"):
        portattn.attention(q.requires_grad_(), q, q, out=meta(1, 2, 8, 64))
    with torch.no_grad():
        with pytest.raises(ValueError, match="portattn runs on a GPU"):  # past the grad check
            portattn.attention(q, q, q, out=meta(1, 2, 8, 64))


def test_operator_backward_without_lse_is_refused():
    q = meta(1, 2, 8, 64, requires_grad=True)
    out, _ = ATTENTION(q, q, q, False, 0.125, False, False, *NO_MASKS)
    with pytest.raises(RuntimeError, match="return_lse=False"):
        out.sum().backward()


def test_double_backward_is_refused():
    q = meta(1, 2, 8, 64, requires_grad=True)
    out, _ = ATTENTION(q, q, q, False, 0.125, True, False, *NO_MASKS)
    (grad_q,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="no double backward"):
        grad_q.sum().backward()
