"""Greedy generation speed with a Hugging Face transformers Llama (12 layers, 16 query heads on 4 key/value heads,
d = 128, hidden 2048, random weights, bfloat16): tokens per second of ``model.generate`` with SDPA (its default
backend), under ``portattn.patch_sdpa`` and with ``attn_implementation="portattn"``, same process and prompts.
Each of 7 rounds (after a warmup round) runs the three in turn; the table gives each configuration's median
tokens/s and the median of its per-round ratios to SDPA (a ratio of runs made seconds apart: the host's speed
drifts between rounds, for all configurations alike). Prints a Markdown table."""
from __future__ import annotations

import statistics
import time

import torch
import transformers

import portattn
import portattn.integrations.transformers  # noqa: F401  (registers attn_implementation="portattn")

NEW = 64


def generate_tokens_per_s(model, ids: torch.Tensor, patched: bool) -> float:
    """Tokens per second of one greedy generation of NEW tokens."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    with portattn.patch_sdpa() if patched else torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                       do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return ids.shape[0] * NEW / (time.perf_counter() - start)


def medians(runs: dict[str, tuple], rounds: int = 7) -> tuple[dict[str, float], dict[str, float]]:
    """Median tokens/s of each configuration (model, ids, patched) over ``rounds`` rounds that run every
    configuration once in turn, after one warmup round, and the median of each configuration's per-round ratio to
    the first configuration."""
    for args in runs.values():
        generate_tokens_per_s(*args)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, args in runs.items():
            samples[name].append(generate_tokens_per_s(*args))
    base = samples[next(iter(runs))]
    ratios = {name: statistics.median(x / b for x, b in zip(values, base)) for name, values in samples.items()}
    return {name: statistics.median(values) for name, values in samples.items()}, ratios


def main() -> None:
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=16,
                                      num_key_value_heads=4, head_dim=128, num_hidden_layers=12, vocab_size=32000,
                                      max_position_embeddings=8192)
    torch.manual_seed(0)
    models = {}
    for impl in ("sdpa", "portattn"):
        config._attn_implementation = impl
        models[impl] = transformers.LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    models["portattn"].load_state_dict(models["sdpa"].state_dict())
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}")
    print("| prompt | batch | SDPA tok/s | patch_sdpa tok/s | ratio | attn_implementation=portattn tok/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for prompt in (512, 4096):
        for batch in (1, 8):
            ids = torch.randint(1, config.vocab_size, (batch, prompt), device="cuda")
            with torch.no_grad():
                speed, ratio = medians({"sdpa": (models["sdpa"], ids, False),
                                        "patched": (models["sdpa"], ids, True),
                                        "native": (models["portattn"], ids, False)})
            print(f"| {prompt} | {batch} | {speed['sdpa']:.0f} | {speed['patched']:.0f} | {ratio['patched']:.2f} | "
                  f"{speed['native']:.0f} | {ratio['native']:.2f} |")


if __name__ == "__main__":
    main()
