"""Greedy generation with a Hugging Face transformers causal LM (small random-weight grouped-query Llama, bfloat16,
no downloads) under ``patch_sdpa``: the patch takes every prefill and decode call (batched, left-padded prompts, so
the calls carry padding masks), the greedy tokens agree with SDPA's up to a step where SDPA's two best logits lie
within bfloat16 noise of each other, and teacher-forced logits stay within that noise.

bfloat16 noise: the largest logit difference between SDPA's own bfloat16 and float32 runs of the same model on the
same tokens; portattn's logits may differ from SDPA's bfloat16 ones by at most twice it."""
import contextlib
import copy

import pytest
import torch

import portattn

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("on_target")]
LAYERS, NEW = 2, 24


def test_greedy_generation_under_the_patch(gen):
    torch.manual_seed(gen.initial_seed())
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=8,
                                      num_key_value_heads=2, head_dim=32, num_hidden_layers=LAYERS, vocab_size=512,
                                      attn_implementation="sdpa")
    model32 = transformers.LlamaForCausalLM(config).to("cuda").eval()
    model = copy.deepcopy(model32).to(torch.bfloat16)
    lengths = (40, 27, 9)
    n = max(lengths)
    ids = torch.randint(1, config.vocab_size, (len(lengths), n), device="cuda", generator=gen)
    mask = (torch.arange(n, device="cuda") >= n - torch.tensor(lengths, device="cuda").unsqueeze(1)).long()
    ids = ids * mask
    opts = dict(attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, return_dict_in_generate=True,
                output_logits=True)
    with torch.no_grad():
        ref = model.generate(ids, **opts)
        with portattn.patch_sdpa() as stats:
            got = model.generate(ids, **opts)
        assert stats.fallback == 0 and stats.portattn == LAYERS * NEW, stats

        full = torch.cat((mask, torch.ones_like(ref.sequences[:, n:])), dim=1)
        keep = full.bool().unsqueeze(-1)  # logits of padding positions are not compared

        def logits(m, patched=False):
            with portattn.patch_sdpa() if patched else contextlib.nullcontext() as s:
                out = m(ref.sequences, attention_mask=full).logits.float()
            assert not patched or (s.fallback == 0 and s.portattn == LAYERS), s
            return out

        def largest(diff):
            return float(torch.where(keep, diff.abs(), 0.0).max())

        sdpa16, sdpa32 = logits(model), logits(model32)
        noise = largest(sdpa16 - sdpa32)
        assert largest(logits(model, patched=True) - sdpa16) <= 2 * noise
    tokens, ref_tokens = got.sequences[:, n:], ref.sequences[:, n:]
    for b in range(len(lengths)):
        differ = (tokens[b] != ref_tokens[b]).nonzero()
        if len(differ):  # allowed only where SDPA's choice was a near tie
            step = int(differ[0])
            top2 = ref.logits[step][b].float().topk(2).values
            assert float(top2[0] - top2[1]) <= 2 * noise, (b, step, top2)
