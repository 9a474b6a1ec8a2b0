"""Host time of the attention calls in greedy generation with a Hugging Face transformers Llama (the model of
``bench_generate.py``: 12 layers, 16 query heads on 4 key/value heads, d = 128, random weights, bfloat16), with SDPA
(its default backend) and under ``portattn.patch_sdpa``. A wrapper around ``F.scaled_dot_product_attention`` times
each call on the host (wall clock, no synchronization); per run of 64 new tokens it prints the decode calls' median,
the mean of each step's first call (a new key length) and the calls' host time per token, next to the time per token.
Before that, the decode call alone in a loop (one sequence, 600 keys), SDPA, patched and ``portattn.attention``.

    PYTHONPATH=. python3 scripts/host_cost_generation.py
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
import transformers
from bench_generate import NEW, llama_config  # scripts/bench_generate.py: the same model and token count

import portattn

LOOP_CALLS = 2000


def loop_us(fn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """Microseconds per call of ``fn`` on the decode call's arguments, over LOOP_CALLS calls after 200 untimed."""
    for _ in range(200):
        fn(q, k, v, attn_mask=None, dropout_p=0.0, scale=None, is_causal=False, enable_gqa=True)
    start = time.perf_counter()
    for _ in range(LOOP_CALLS):
        fn(q, k, v, attn_mask=None, dropout_p=0.0, scale=None, is_causal=False, enable_gqa=True)
    return (time.perf_counter() - start) / LOOP_CALLS * 1e6


def decode_call_loop() -> None:
    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 4, 600, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for r in range(3):
        sdpa = loop_us(F.scaled_dot_product_attention, q, k, v)
        with portattn.patch_sdpa():
            patched = loop_us(F.scaled_dot_product_attention, q, k, v)
        direct = loop_us(lambda q, k, v, **_: portattn.attention(q, k, v), q, k, v)
        print(f"decode call in a loop, round {r}: SDPA {sdpa:.1f} µs, patched {patched:.1f} µs "
              f"({patched / sdpa:.2f}x), portattn.attention {direct:.1f} µs", flush=True)


def generation(model: transformers.LlamaForCausalLM, ids: torch.Tensor, patched: bool) -> tuple[float, list]:
    """Seconds of one greedy generation of NEW tokens, and (query rows, seconds) of each attention call."""
    calls = []
    with torch.no_grad(), portattn.patch_sdpa() if patched else contextlib.nullcontext():
        inner = F.scaled_dot_product_attention

        def timed(q: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            start = time.perf_counter()
            out = inner(q, *args, **kwargs)
            calls.append((q.shape[2], time.perf_counter() - start))
            return out

        F.scaled_dot_product_attention = timed
        try:
            torch.cuda.synchronize()
            start = time.perf_counter()
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                           do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            return time.perf_counter() - start, calls
        finally:
            F.scaled_dot_product_attention = inner


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.no_grad():
        decode_call_loop()
    config = llama_config()
    config._attn_implementation = "sdpa"
    layers = config.num_hidden_layers
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    print("| prompt | batch | run | ms per token | decode call µs (median) | first call of a step µs (mean) "
          "| attention host ms per token |")
    print("|---|---|---|---|---|---|---|")
    for prompt, batch in ((512, 1), (4096, 8)):
        ids = torch.randint(1, config.vocab_size, (batch, prompt), device="cuda")
        for patched in (False, True):
            generation(model, ids, patched)  # warm-up: kernels compiled and loaded, launches planned
        for r in range(2):
            for patched in (False, True):
                seconds, calls = generation(model, ids, patched)
                decode = [s for rows, s in calls if rows == 1]
                steps = len(decode) // layers
                print(f"| {prompt} | {batch} | {'patch_sdpa' if patched else 'SDPA'} {r} | "
                      f"{seconds / NEW * 1e3:.2f} | {statistics.median(decode) * 1e6:.1f} | "
                      f"{statistics.mean(decode[::layers]) * 1e6:.0f} | {sum(decode) / steps * 1e3:.3f} |", flush=True)


if __name__ == "__main__":
    main()
