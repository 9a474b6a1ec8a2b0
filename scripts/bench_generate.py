"""Greedy generation speed with a Hugging Face transformers Llama (12 layers, 16 query heads on 4 key/value heads,
d = 128, hidden 2048, random weights, bfloat16): tokens per second of ``model.generate`` with SDPA (its default
backend), under ``portattn.patch_sdpa`` and with ``attn_implementation="portattn"``, same process and prompts.
After a warmup round, each of ``ROUNDS`` rounds runs the three in turn, in the opposite order every other round (so
that a steady drift of the host's speed weighs on each alike). The table gives each configuration's median tokens/s
and, per configuration, the median of its per-round ratios to SDPA with their lower and upper quartiles: a ratio
compares runs made seconds apart, and the quartiles show how far the host's noise moves it. Prints a Markdown
table."""
from __future__ import annotations

import statistics
import time

import torch
import transformers

import portattn
import portattn.integrations.transformers  # noqa: F401  (registers attn_implementation="portattn")

NEW = 64
ROUNDS = 16


def generate_tokens_per_s(model, ids: torch.Tensor, patched: bool) -> float:
    """Tokens per second of one greedy generation of NEW tokens."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    with portattn.patch_sdpa() if patched else torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                       do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return ids.shape[0] * NEW / (time.perf_counter() - start)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile of ``values``."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def measure(runs: dict[str, tuple], rounds: int = ROUNDS) -> tuple[dict[str, float], dict[str, tuple]]:
    """Median tokens/s of each configuration (model, ids, patched) over ``rounds`` rounds that run every
    configuration once, in turn, forward and backward in alternate rounds, after one warmup round; and the quartiles of
    each configuration's per-round ratio to the first configuration."""
    for args in runs.values():
        generate_tokens_per_s(*args)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            samples[name].append(generate_tokens_per_s(*runs[name]))
    base = samples[names[0]]
    ratios = {name: quartiles([x / b for x, b in zip(values, base)]) for name, values in samples.items()}
    return {name: statistics.median(values) for name, values in samples.items()}, ratios


def llama_config() -> transformers.LlamaConfig:
    """The benchmark's model: 12 layers, 16 query heads on 4 key/value heads, d = 128, hidden 2048."""
    return transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=16,
                                    num_key_value_heads=4, head_dim=128, num_hidden_layers=12, vocab_size=32000,
                                    max_position_embeddings=8192)


def main() -> None:
    config = llama_config()
    torch.manual_seed(0)
    models = {}
    for impl in ("sdpa", "portattn"):
        config._attn_implementation = impl
        models[impl] = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    models["portattn"].load_state_dict(models["sdpa"].state_dict())
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}")
    print("| prompt | batch | SDPA tok/s | patch_sdpa tok/s | ratio (quartiles) | attn_implementation=portattn tok/s "
          "| ratio (quartiles) |")
    print("|---|---|---|---|---|---|---|")
    for prompt in (512, 4096):
        for batch in (1, 8):
            ids = torch.randint(1, config.vocab_size, (batch, prompt), device="cuda")
            with torch.no_grad():
                speed, ratio = measure({"sdpa": (models["sdpa"], ids, False),
                                        "patched": (models["sdpa"], ids, True),
                                        "native": (models["portattn"], ids, False)})
            cells = [f"{speed[name]:.0f} | {ratio[name][1]:.3f} ({ratio[name][0]:.3f}–{ratio[name][2]:.3f})"
                     for name in ("patched", "native")]
            print(f"| {prompt} | {batch} | {speed['sdpa']:.0f} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
