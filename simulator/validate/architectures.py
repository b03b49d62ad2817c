"""Model names of published runs -> presets or published architectures."""

from __future__ import annotations

import copy
import re
from typing import Any

PRESET_ALIASES = (
    (r"^llama[-_ ]?2[-_ ]?7b$", "llama2-7b"),
    (r"^llama[-_ ]?2[-_ ]?13b$", "llama2-13b"),
    (r"^llama[-_ ]?2[-_ ]?70b$", "llama2-70b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?8b$", "llama3-8b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?70b$", "llama3-70b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?405b$", "llama3-405b"),
    (r"^gpt-?3[-_ ]?175b$", "gpt3-175b"),
    (r"^mixtral[-_ ]?8x7b$", "mixtral-8x7b"),
    (r"^mpt[-_ ]?7b$", "mpt-7b"),
)
GATED_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "yi-", "internlm", "olmo")
MOE_MARKERS = (
    "moe",
    "mixtral",
    "deepseek",
    "qwen3_30b",
    "qwen3_235b",
    "a3b",
    "a22b",
    "gpt oss",
    "gpt-oss",
    "gptoss",
    "kimi",
    "nemotron_3_",
    "nemotron-3-",
    "nemotron 3 ",
    "dbrx",
    "grok",
)
FAMILY_VOCAB = (
    (
        "nemotron",
        256000,
        "Nemotron vocabulary 256,000 (Nemotron-4 SentencePiece; the published TFLOP/s ÷ tokens/s ratio implies ≈ 256k)",
    ),
    (
        "gpt",
        51200,
        "GPT vocabulary 51,200 (GPT-2 BPE padded, as Megatron/Narayanan; the NeMo TFLOP/s ÷ tokens/s ratio implies ≈ 51k)",
    ),
)


# MoE architectures the CSV only names (its notes point to the Hugging Face configs). Standard
# GQA attention + routed experts only: DeepSeek-V3/Kimi-K2 (MLA, dense first layers), GPT-OSS
# (attention sinks, sliding windows, biases) and Nemotron 3 Nano (hybrid Mamba) stay unusable.
KNOWN_ARCHITECTURES: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        r"qwen3[-_ ]?30b[-_ ]?a3b",
        {
            "layers": 48,
            "hidden": 2048,
            "heads": 32,
            "kv_heads": 4,
            "head_dim": 128,
            "ffn_hidden": 6144,
            "vocab": 151936,
            "gated_mlp": True,
            "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden": 768},
        },
        "Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048, 32 heads x 128, 4 KV heads, "
        "128 experts of 768, top-8, vocab 151,936)",
    ),
    (
        r"qwen3[-_ ]?235b[-_ ]?a22b",
        {
            "layers": 94,
            "hidden": 4096,
            "heads": 64,
            "kv_heads": 4,
            "head_dim": 128,
            "ffn_hidden": 12288,
            "vocab": 151936,
            "gated_mlp": True,
            "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden": 1536},
        },
        "Qwen/Qwen3-235B-A22B config.json (94 layers, hidden 4096, 64 heads x 128, 4 KV heads, "
        "128 experts of 1536, top-8, vocab 151,936)",
    ),
)


def known_architecture(model_name: str) -> tuple[dict[str, Any], str] | None:
    name = model_name.strip().lower()
    for pattern, table, citation in KNOWN_ARCHITECTURES:
        if re.search(pattern, name):
            return copy.deepcopy(table), citation
    return None


def preset_for(model_name: str) -> str | None:
    from ..loading import load_model_presets

    name = model_name.strip().lower().split(" (")[0]
    presets = load_model_presets()
    if name in presets:
        return name
    for pattern, preset in PRESET_ALIASES:
        if re.match(pattern, name) and preset in presets:
            return preset
    return None
