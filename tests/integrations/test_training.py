"""A real training check: a small transformer language model written with F.scaled_dot_product_attention, trained
from the same seed with SDPA and under portattn.patch_sdpa; the loss curves agree within the noise of bf16 training
(measured here as the distance between SDPA's default backend and its math backend) and the patch takes every
attention call."""
import pytest
import torch
import torch.nn.functional as F

import portattn

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, SEQ, BATCH, STEPS = 64, 256, 4, 2, 2, 128, 16, 300


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.q = torch.nn.Linear(WIDTH, WIDTH)
        self.kv = torch.nn.Linear(WIDTH, 2 * WIDTH * KV_HEADS // HEADS)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, n, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, n, HEADS, -1).transpose(1, 2)
        k, v = self.kv(h).view(b, n, 2, KV_HEADS, -1).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, WIDTH))
        return x + self.mlp(self.norm2(x))


class LanguageModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(seed: int):
    """Sequences where each token is the sum of the two before it, modulo VOCAB (learnable, not trivial)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for _ in range(STEPS):
        ids = torch.empty(BATCH, SEQ + 1, dtype=torch.long, device="cuda")
        ids[:, :2] = torch.randint(0, VOCAB, (BATCH, 2), device="cuda", generator=gen)
        for t in range(2, SEQ + 1):
            ids[:, t] = (ids[:, t - 1] + ids[:, t - 2]) % VOCAB
        yield ids[:, :-1], ids[:, 1:]


def train(seed: int) -> list[float]:
    torch.manual_seed(seed)
    model = LanguageModel().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for inputs, targets in batches(seed):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def smoothed(losses: list[float], window: int = 20) -> torch.Tensor:
    x = torch.tensor(losses)
    return x.unfold(0, window, 1).mean(-1)


def test_training_under_the_patch_matches_sdpa(gen):
    seed = gen.initial_seed() % 2**31
    from torch.nn.attention import SDPBackend, sdpa_kernel

    default = train(seed)  # SDPA's own choice of backend
    with sdpa_kernel(SDPBackend.MATH):
        math = train(seed)
    with portattn.patch_sdpa() as stats:
        ours = train(seed)
    assert stats.fallback == 0 and stats.portattn == STEPS * LAYERS, stats
    for curve in (default, math, ours):
        assert curve[-1] == curve[-1] and smoothed(curve)[-1] < 0.5 * smoothed(curve)[0], "the model must learn"
    noise = (smoothed(default) - smoothed(math)).abs().max().item()
    gap = (smoothed(ours) - smoothed(default)).abs().max().item()
    assert gap <= 3 * noise + 0.05, f"portattn vs SDPA {gap:.4f}, SDPA default vs math {noise:.4f}"
