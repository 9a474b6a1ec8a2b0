"""Float64 reference attention, used by the tests, the demo and the benchmark checks."""
from __future__ import annotations

import torch


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact softmax attention in float64; returns (out, natural-log LSE). Inputs ``[B, H, N, d]``."""
    d = q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float64, device=q.device)
    nq, nk = q.shape[2], k.shape[2]
    mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h].double() @ k[b, h // group].double().T) * scale
            if mask is not None:
                s = s.masked_fill(mask, float("-inf"))
            m = s.amax(-1, keepdim=True)
            e = torch.exp(s - m)
            total = e.sum(-1, keepdim=True)
            out[b, h] = (e / total) @ v[b, h // group].double()
            lse[b, h] = (m + torch.log(total)).squeeze(-1)
    return out, lse


def relative_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """‖x − ref‖ / ‖ref‖ in float64; NaN when x has NaN where ref has none."""
    x64 = x.double()
    if bool((torch.isnan(x64) & ~torch.isnan(ref)).any()):
        return float("nan")
    finite = torch.isfinite(ref)
    num = torch.linalg.vector_norm((x64 - ref)[finite])
    den = torch.linalg.vector_norm(ref[finite])
    return float(num / den) if den > 0 else float(num)


def reference_gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, causal: bool = False,
                        scale: float | None = None,
                        grad_lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of exact softmax attention in float64 (autograd through the math): (dq, dk, dv) for the output
    gradient ``dout`` and, when given, the gradient ``grad_lse`` of the natural-log LSE. Grouped-query K/V are
    repeated for the product and their gradients summed back by autograd. Inputs ``[B, H, N, d]``."""
    d = q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = q64 @ k64.repeat_interleave(group, 1).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = torch.softmax(s, -1) @ v64.repeat_interleave(group, 1)
    loss = (out * dout.double()).sum() + ((lse * grad_lse.double()).sum() if grad_lse is not None else 0.0)
    dq, dk, dv = torch.autograd.grad(loss, (q64, k64, v64))
    return dq, dk, dv


def reference_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                     bottom_right: bool = False, window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                     alibi_slopes: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
                     scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention in float64 with portattn's masks (``portattn.attention``'s arguments), differentiable
    through autograd; returns (out, natural-log LSE). A row that sees no key gives zeros and LSE -inf. Inputs
    ``[B, H, N, d]`` (float64 leaves keep their gradients)."""
    d = q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    nq, nk = q.shape[2], k.shape[2]
    q64, k64, v64 = (t if t.dtype == torch.float64 else t.double() for t in (q, k, v))
    s = q64 @ k64.repeat_interleave(group, 1).transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    rows = torch.arange(nq, device=q.device).unsqueeze(1) + (nk - nq if bottom_right else 0)
    cols = torch.arange(nk, device=q.device).unsqueeze(0)
    if alibi_slopes is not None:
        slopes = alibi_slopes.double().reshape(-1 if alibi_slopes.dim() == 2 else 1, q.shape[1], 1, 1)
        s = s - slopes * (rows - cols).abs()
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.double()
    left, right = window
    hidden = torch.zeros(nq, nk, dtype=torch.bool, device=q.device)
    if causal or right >= 0:
        hidden |= cols > rows + (0 if causal else right)
    if left >= 0:
        hidden |= cols < rows - left
    s = s.masked_fill(hidden, float("-inf"))
    # Rows that see no key take zeros in place of their scores, so that no -inf - -inf reaches the gradients (an
    # additive -inf mask passes them on to q and k); their output and its gradients are then 0, and their LSE -inf.
    seen = (s > float("-inf")).any(-1, keepdim=True)
    s = torch.where(seen, s, 0.0)
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.where(seen, torch.exp(s - lse), 0.0)
    return p @ v64.repeat_interleave(group, 1), torch.where(seen, lse, float("-inf")).squeeze(-1)
