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


# MoE architectures the CSV only names (its notes point to the Hugging Face configs): the model
# presets written from those configs (simulator/catalog/models.toml, parameter counts tested
# against the published totals). Nemotron 3 (hybrid Mamba-MoE) and DeepSeek-V4 Flash (no
# published config in the CSV's notes) stay unusable.
KNOWN_ARCHITECTURES: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        r"qwen3[-_ ]?30b[-_ ]?a3b",
        {"preset": "qwen3-30b-a3b"},
        "preset qwen3-30b-a3b (Qwen/Qwen3-30B-A3B config.json)",
    ),
    (
        r"qwen3[-_ ]?moe[-_ ]?30b",
        {"preset": "qwen3-30b-a3b"},
        "preset qwen3-30b-a3b (Qwen/Qwen3-30B-A3B config.json; NeMo AutoModel names it 'Qwen3 MoE 30B')",
    ),
    (
        r"qwen3[-_ ]?235b[-_ ]?a22b",
        {"preset": "qwen3-235b-a22b"},
        "preset qwen3-235b-a22b (Qwen/Qwen3-235B-A22B config.json)",
    ),
    (
        r"deepseek[-_ ]?v3.*w/o mtp",
        {"preset": "deepseek-v3", "mtp_layers": 0},
        "preset deepseek-v3 without its MTP module (deepseek-ai/DeepSeek-V3 config.json; '(w/o MTP)' as published)",
    ),
    (
        r"deepseek[-_ ]?v3",
        {"preset": "deepseek-v3"},
        "preset deepseek-v3 with its one MTP module (deepseek-ai/DeepSeek-V3 config.json; the published "
        "TFLOP/s per token match the '(w/ MTP)' rows)",
    ),
    (r"kimi[-_ ]?k2", {"preset": "kimi-k2"}, "preset kimi-k2 (moonshotai/Kimi-K2-Instruct config.json)"),
    (
        r"gpt[-_ ]?oss[-_ ]?20b",
        {"preset": "gpt-oss-20b"},
        "preset gpt-oss-20b (openai/gpt-oss-20b config.json) with its 128-token sliding window on "
        "every other layer",
    ),
    (
        r"gpt[-_ ]?oss[-_ ]?120b",
        {"preset": "gpt-oss-120b"},
        "preset gpt-oss-120b (openai/gpt-oss-120b config.json) with its 128-token sliding window on "
        "every other layer: attention costed as cuDNN fused attention (windowed on those layers) with "
        "its sinks' gradient reduction, the backend every GPT-OSS container ran (Transformer Engine disables "
        "FlashAttention for sinks, cuDNN >= 9.13.1 takes them; the containers ship cuDNN 9.13.1-9.21.1, "
        "docs/accuracy.md)",
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
