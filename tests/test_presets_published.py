"""Model presets for published training runs (simulator/catalog/models.toml): each against the
parameter counts its authors published (tolerance 0.5%, widened by half the unit the figure was
rounded to, as tests/test_moe.py), each equal to its config.json import where the hub file is a
fixture, each simulating, and each saying what it leaves out (exact or said, never silently
different)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from simulator import flops as F
from simulator.errors import ConfigError
from simulator.loading import model_from_table, model_preset, scenario_from_dict
from simulator.simulate import simulate

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _close(value: float, published: float, rounding: float = 0.0, rel: float = 0.005) -> bool:
    """Within rel of the published figure, widened by half the unit it was rounded to."""
    return abs(value - published) <= rel * published + rounding / 2


# (preset, total published, its rounding, active published or None (dense), its rounding, counts
#  the input embedding in "active"); the source of each figure above its row
PUBLISHED: list[tuple[str, float, float, float | None, float, bool]] = [
    # LLaMA 1 (arXiv 2302.13971) Table 2: 6.7B, 13.0B, 32.5B, 65.2B
    ("llama-7b", 6.7e9, 0.1e9, None, 0.0, True),
    ("llama-13b", 13.0e9, 0.1e9, None, 0.0, True),
    ("llama-33b", 32.5e9, 0.1e9, None, 0.0, True),
    ("llama-65b", 65.2e9, 0.1e9, None, 0.0, True),
    # Nemotron-4 15B (arXiv 2402.16819) Table 1: 3.2B embedding + 12.5B non-embedding
    ("nemotron4-15b", 15.7e9, 0.1e9, None, 0.0, True),
    # Nemotron-4 340B report (arXiv 2406.11704) Table 1: 9.4B embedding + 331.6B non-embedding
    ("nemotron4-340b", 341.0e9, 0.1e9, None, 0.0, True),
    # Qwen2.5-7B / -72B model cards: 7.61B, 72.7B
    ("qwen2.5-7b", 7.61e9, 0.01e9, None, 0.0, True),
    ("qwen2.5-72b", 72.7e9, 0.1e9, None, 0.0, True),
    # Qwen3-8B / -32B model cards: 8.2B, 32.8B
    ("qwen3-8b", 8.2e9, 0.1e9, None, 0.0, True),
    ("qwen3-32b", 32.8e9, 0.1e9, None, 0.0, True),
    # Mistral AI, "Mistral 7B" announcement (2023-09-27): 7.3B parameters
    ("mistral-7b", 7.3e9, 0.1e9, None, 0.0, True),
    # OPT (arXiv 2205.01068) Table 1: 175B
    ("opt-175b", 175e9, 1e9, None, 0.0, True),
    # BLOOM model card (bigscience/bloom): 176,247,271,424 parameters (176B in arXiv 2211.05100)
    ("bloom-176b", 176_247_271_424, 0.0, None, 0.0, True),
    # GPT-NeoX-20B model card (EleutherAI/gpt-neox-20b): 20,554,567,680 (arXiv 2204.06745: 20B)
    ("gpt-neox-20b", 20_554_567_680, 0.0, None, 0.0, True),
    # Mistral AI (2023-12-11, "Mixtral of experts"): 46.7B total, 12.9B active (both embeddings)
    ("mixtral-8x7b", 46.7e9, 0.1e9, 12.9e9, 0.1e9, True),
    # Qwen2 technical report (arXiv 2407.10671) Table 1: 57B total, 14B activated
    ("qwen2-57b-a14b", 57e9, 1e9, 14e9, 1e9, True),
    # Qwen1.5-MoE-A2.7B model card / Qwen blog (2024-03-28): 14.3B total, 2.7B activated
    ("qwen1.5-moe-a2.7b", 14.3e9, 0.1e9, 2.7e9, 0.1e9, True),
    # Meta Llama 4 model card: Scout 17B active; its "109B total" counts the vision encoder (34 ViT
    # layers of 1408, ~0.87B) that only the text model here leaves out (as tests/test_moe.py)
    ("llama4-scout", 109e9 - 0.87e9, 1e9, 17e9, 1e9, True),
    # DeepSeek-V2 (arXiv 2405.04434) abstract: 236B total, 21B activated per token, counted as
    # DeepSeek counts (no input embedding: 20.85B; with it 21.38B, both round to 21B)
    ("deepseek-v2", 236e9, 1e9, 21e9, 1e9, False),
    # DeepSeek-V2 paper Appendix B (DeepSeek-V2-Lite): 15.7B total, 2.4B activated; only the
    # DeepSeek convention (no input embedding: 2.45B) gives it (with it: 2.66B)
    ("deepseek-v2-lite", 15.7e9, 0.1e9, 2.4e9, 0.1e9, False),
    # OLMoE (arXiv 2409.02060) Table 1: 6.9B total, 1.3B active (both embeddings: 1.28B; without
    # the input one 1.18B would miss it)
    ("olmoe-1b-7b", 6.9e9, 0.1e9, 1.3e9, 0.1e9, True),
    # Databricks, "Introducing DBRX" (2024-03-27) / model card: 132B total, 36B active (36.47B with
    # both embeddings, 35.85B without the input one: both round to 36B)
    ("dbrx", 132e9, 1e9, 36e9, 1e9, True),
]

# non-embedding parameters where the source gives them apart
NON_EMBEDDING = [
    ("nemotron4-15b", 12.5e9, 0.1e9),  # arXiv 2402.16819 Table 1
    ("nemotron4-340b", 331.6e9, 0.1e9),  # arXiv 2406.11704 Table 1
    ("qwen2.5-7b", 6.53e9, 0.01e9),  # model card
    ("qwen2.5-72b", 70.0e9, 0.1e9),  # model card
    ("qwen3-8b", 6.95e9, 0.01e9),  # model card
    ("qwen3-32b", 31.2e9, 0.1e9),  # model card
]

# the presets this file adds; each must have its published figure above
ADDED = (
    "llama-7b",
    "llama-13b",
    "llama-33b",
    "llama-65b",
    "nemotron4-15b",
    "nemotron4-340b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "mistral-7b",
    "opt-175b",
    "bloom-176b",
    "gpt-neox-20b",
    "qwen2-57b-a14b",
    "qwen1.5-moe-a2.7b",
    "llama4-scout",
    "deepseek-v2",
    "deepseek-v2-lite",
    "olmoe-1b-7b",
    "dbrx",
)


@pytest.mark.parametrize(("preset", "total", "t_round", "active", "a_round", "with_input_emb"), PUBLISHED)
def test_params_match_published(
    preset: str, total: float, t_round: float, active: float | None, a_round: float, with_input_emb: bool
) -> None:
    m = model_preset(preset)
    assert _close(F.total_params(m), total, t_round), F.total_params(m) / 1e9
    assert (active is None) == (not m.is_moe)
    if active is not None:
        act = F.active_params(m) - (0 if with_input_emb else m.vocab * m.hidden)
        assert _close(act, active, a_round), act / 1e9


@pytest.mark.parametrize(("preset", "non_embedding", "rounding"), NON_EMBEDDING)
def test_non_embedding_params_match_published(preset: str, non_embedding: float, rounding: float) -> None:
    m = model_preset(preset)
    assert _close(F.non_embedding_params(m), non_embedding, rounding), F.non_embedding_params(m) / 1e9


def test_every_added_preset_is_checked() -> None:
    assert set(ADDED) <= {row[0] for row in PUBLISHED}


# ----------------------------------------------------------------------------- config.json imports
# (fixture, preset, allow_unmodeled); each field of the import equals the preset's (head_dim and
# the expert width compared as the widths they resolve to)
IMPORTS = [
    ("llama4_scout.json", "llama4-scout", ["vision_config", "no_rope_layers"]),
    ("qwen2_57b_a14b.json", "qwen2-57b-a14b", []),
    ("qwen2_moe.json", "qwen1.5-moe-a2.7b", []),
    ("mixtral_8x7b.json", "mixtral-8x7b", []),
]
# qwen2_moe.json is trimmed of attention_dropout (the hub's Qwen1.5-MoE-A2.7B config.json says
# 0.0): the import takes transformers Qwen2MoeConfig's default 0.0, equal to the preset's


@pytest.mark.parametrize(("config", "preset", "allow"), IMPORTS)
def test_hf_import_equals_preset(config: str, preset: str, allow: list[str]) -> None:
    p = model_preset(preset)
    m = model_from_table({"hf_config": config, "seq_len": p.seq_len, "allow_unmodeled": allow}, FIXTURES)
    skip = {"name", "notes", "head_dim", "expert_ffn_hidden"}
    differ = [f.name for f in fields(p) if f.name not in skip and getattr(m, f.name) != getattr(p, f.name)]
    assert differ == []
    assert (m.dim_per_head, m.expert_ffn) == (p.dim_per_head, p.expert_ffn)
    assert F.total_params(m) == F.total_params(p)
    assert F.active_params(m) == F.active_params(p)
    assert F.model_flops_per_sequence(m) == F.model_flops_per_sequence(p)
    # one line per allowed key, and the Qwen MoE shared-expert gate said as the preset says it
    gate = [n for n in m.notes if "shared expert's sigmoid output gate" in n]
    assert len(gate) == any("sigmoid output gate" in n for n in p.notes)
    assert len(m.notes) == len(allow) + len(gate)


# ----------------------------------------------------------------------------- architecture details
def test_llama4_scout_every_layer_moe_with_shared_expert() -> None:
    """Scout's shared expert (what a SPEC-only scenario cannot name) is in the preset: 16 routed
    experts + 1 shared of 8192 on every one of the 48 layers."""
    m = model_preset("llama4-scout")
    assert m.num_moe_layers == 48 and all(m.is_moe_layer(i) for i in range(48))
    moe = F.layer_params(m, 0) - F.attention_params(m) - 2 * m.hidden
    assert moe == 17 * 3 * 5120 * 8192 + 16 * 5120
    no_shared = F.active_params(m) - 48 * 3 * 5120 * 8192
    assert not _close(no_shared, 17e9, 1e9)  # without it the published 17B active is missed


def test_deepseek_v2_lite_mla_without_q_compression_closed_form() -> None:
    """MLA with q_lora_rank 0 (DeepSeek-V2 §2.1.2 without the query down-projection): one
    h × heads·(nope + rope) query projection, kv down + its norm, kv up, output."""
    m = model_preset("deepseek-v2-lite")
    h, heads = 2048, 16
    mla = h * heads * 192 + h * (512 + 64) + 512 + 512 * heads * (128 + 128) + heads * 128 * h
    assert F.attention_params(m) == mla
    assert m.num_moe_layers == 26 and not m.is_moe_layer(0)


def test_deepseek_v2_closed_form() -> None:
    m = model_preset("deepseek-v2")
    h = 5120
    mla = h * 1536 + 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 + 512 * 128 * 256 + 128 * 128 * h
    assert F.attention_params(m) == mla
    moe_layer = mla + 160 * 3 * h * 1536 + 3 * h * 3072 + 160 * h + 2 * h
    dense_layer = mla + 3 * h * 12288 + 2 * h
    assert F.total_params(m) == 59 * moe_layer + dense_layer + h + 2 * 102400 * h


@pytest.mark.parametrize(
    ("preset", "activation", "gated", "bias", "tied", "positions"),
    [
        ("opt-175b", "", False, True, True, True),  # ReLU costed as the GELU pass (same bytes)
        # GPT-3 = GPT-2's block (biased Conv1D projections, logits from wte) and Megatron-LM's GPT
        # (bias=True parallel linears, logits from the word embedding): biased, tied, learned positions
        *[
            (p, "", False, True, True, True)
            for p in (
                "gpt3-175b",
                "gpt3-1.3b",
                "gpt3-2.7b",
                "gpt3-6.7b",
                "gpt3-13b",
                "gpt3-530b",
                "megatron-1t",
            )
        ],
        ("bloom-176b", "", False, True, True, False),
        ("gpt-neox-20b", "", False, True, False, False),
        ("nemotron4-15b", "squared_relu", False, False, False, False),
        ("nemotron4-340b", "squared_relu", False, False, False, False),
        ("llama-65b", "", True, False, False, False),
        ("qwen3-32b", "", True, False, False, False),
    ],
)
def test_dense_architecture_switches(
    preset: str, activation: str, gated: bool, bias: bool, tied: bool, positions: bool
) -> None:
    m = model_preset(preset)
    assert (m.activation, m.gated_mlp, m.linear_bias, m.tied_embeddings, m.position_embeddings) == (
        activation,
        gated,
        bias,
        tied,
        positions,
    )


# ----------------------------------------------------------------------------- exact or said
# what each preset cannot represent, said in one warning line per item whenever it is used
UNMODELED = {
    "bloom-176b": ("ALiBi", "LayerNorm after the word embedding"),
    "gpt-neox-20b": ("parallel attention + MLP",),
    "opt-175b": ("attention dropout 0",),
    "dbrx": ("clip_qkv",),
    "llama4-scout": ("NoPE layers",),
    "qwen2-57b-a14b": ("shared expert's sigmoid output gate",),
    "qwen1.5-moe-a2.7b": ("shared expert's sigmoid output gate",),
}


@pytest.mark.parametrize("preset", ADDED)
def test_preset_says_what_it_leaves_out(preset: str) -> None:
    notes = model_preset(preset).notes
    said = UNMODELED.get(preset, ())
    assert len(notes) == len(said)
    for what, note in zip(said, notes, strict=True):
        assert preset in note and "not modeled" in note and what in note


# (preset, parallel layout on DGX H100s); each runs a full training step
SMOKE = {
    "llama-7b": {"num_gpus": 8, "tp": 1},
    "llama-13b": {"num_gpus": 8, "tp": 2},
    "llama-33b": {"num_gpus": 16, "tp": 4},
    "llama-65b": {"num_gpus": 32, "tp": 8, "pp": 2},
    "nemotron4-15b": {"num_gpus": 16, "tp": 4},
    "nemotron4-340b": {"num_gpus": 64, "tp": 8, "pp": 8},
    "qwen2.5-7b": {"num_gpus": 8, "tp": 2},
    "qwen2.5-72b": {"num_gpus": 32, "tp": 8, "pp": 2},
    "qwen3-8b": {"num_gpus": 8, "tp": 2},
    "qwen3-32b": {"num_gpus": 16, "tp": 8},
    "mistral-7b": {"num_gpus": 8, "tp": 1},
    "opt-175b": {"num_gpus": 64, "tp": 8, "pp": 8},
    "bloom-176b": {"num_gpus": 56, "tp": 8, "pp": 7},
    "gpt-neox-20b": {"num_gpus": 16, "tp": 2, "pp": 4},
    "qwen2-57b-a14b": {"num_gpus": 16, "tp": 2, "ep": 8},
    "qwen1.5-moe-a2.7b": {"num_gpus": 8, "ep": 4},
    "llama4-scout": {"num_gpus": 32, "tp": 4, "ep": 8},
    "deepseek-v2": {"num_gpus": 64, "pp": 8, "ep": 8},
    "deepseek-v2-lite": {"num_gpus": 8, "ep": 8},
    "olmoe-1b-7b": {"num_gpus": 8, "ep": 8},
    "dbrx": {"num_gpus": 32, "tp": 4, "ep": 8},
}


@pytest.mark.parametrize("preset", ADDED)
def test_preset_simulates(preset: str) -> None:
    parallel = dict(SMOKE[preset])
    num_gpus = parallel.pop("num_gpus")
    scn = scenario_from_dict(
        {
            "name": preset,
            "model": {"preset": preset},
            "cluster": {"topology": "dgx-h100", "num_gpus": num_gpus},
            "parallel": {
                "global_batch": 64,
                "micro_batch": 1,
                "sequence_parallel": parallel.get("tp", 1) > 1,
                "recompute": "selective",
                "zero": 1,
                **parallel,
            },
        }
    )
    report = simulate(scn).report
    assert report.step_time_s > 0 and 0.05 < report.mfu < 0.8
    # every token of the step is the preset's model: the FLOPs are its own
    assert report.model_flops_per_step == pytest.approx(64 * F.model_flops_per_sequence(scn.model), rel=1e-9)


def test_hf_import_dbrx_refused() -> None:
    """DBRX's config.json (n_layers, d_model, n_heads; its 16 experts, top-4 and KV heads in nested
    ffn_config / attn_config tables) is refused, never read as a dense MHA model: the dbrx preset
    is the exact model."""
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": "dbrx.json", "seq_len": 4096}, FIXTURES)
    assert info.value.key == "model.hf_config" and "dbrx.json" in str(info.value.file)
    assert (model_preset("dbrx").num_experts, model_preset("dbrx").num_kv_heads) == (16, 8)


# ----------------------------------------------------------------------------- exact or said (older presets)
# the presets before the added ones that leave something out, and what their warning names
OLDER_UNMODELED = {
    "mpt-7b": ("ALiBi",),
    "llama4-maverick": ("NoPE layers",),
}


@pytest.mark.parametrize("preset", sorted(OLDER_UNMODELED))
def test_older_preset_says_what_it_leaves_out(preset: str) -> None:
    notes = model_preset(preset).notes
    said = OLDER_UNMODELED[preset]
    assert len(notes) == len(said)
    for what, note in zip(said, notes, strict=True):
        assert preset in note and "not modeled" in note and what in note


# ----------------------------------------------------------------------------- dropout of an import
def _config(tmp_path: Path, **cfg: object) -> Path:
    base = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps({**base, **cfg}))
    return tmp_path


@pytest.mark.parametrize(
    ("model_type", "extra", "dropout"),
    [
        # transformers configuration_*.py defaults for a key config.json leaves out
        ("llama", {"hidden_act": "silu", "intermediate_size": 512}, 0.0),  # LlamaConfig attention_dropout 0.0
        ("qwen2_moe", {"hidden_act": "silu", "intermediate_size": 512}, 0.0),
        ("gpt_oss", {"intermediate_size": 512}, 0.0),
        ("gpt2", {}, 0.1),  # GPT2Config resid_pdrop = attn_pdrop = 0.1
        # GPTNeoXConfig hidden/attention dropout 0.0 (its parallel block allowed)
        ("gpt_neox", {"hidden_act": "gelu", "use_parallel_residual": False}, 0.0),
        ("bloom", {}, 0.0),  # BloomConfig 0.0 (its ALiBi allowed below)
    ],
)
def test_hf_import_absent_dropout_is_the_config_class_default(
    tmp_path: Path, model_type: str, extra: dict[str, object], dropout: float
) -> None:
    allow = ["alibi"] if model_type == "bloom" else []
    m = model_from_table(
        {
            "hf_config": str(_config(tmp_path, model_type=model_type, **extra)),
            "seq_len": 512,
            "allow_unmodeled": allow,
        },
        tmp_path,
    )
    assert m.dropout == dropout


def test_hf_import_opt_hidden_dropout_read_and_the_two_said(tmp_path: Path) -> None:
    """OPT's hidden dropout is `dropout` (0.1), its attention dropout 0.0: both read, the larger
    costed for both, and said."""
    path = _config(tmp_path, model_type="opt", activation_function="relu", dropout=0.1, attention_dropout=0.0)
    m = model_from_table({"hf_config": str(path), "seq_len": 512}, tmp_path)
    assert m.dropout == 0.1
    assert any("attention_dropout 0" in n and "dropout 0.1" in n for n in m.notes)


def test_hf_import_unknown_family_without_dropout_says_so(tmp_path: Path) -> None:
    path = _config(tmp_path, model_type="somefamily", hidden_act="gelu")
    m = model_from_table({"hf_config": str(path), "seq_len": 512}, tmp_path)
    assert m.dropout == 0.1
    assert any("no dropout key" in n and "somefamily" in n for n in m.notes)


# ----------------------------------------------------------------------------- families read by common keys
@pytest.mark.parametrize(
    ("model_type", "extra", "key"),
    [
        ("bloom", {}, "alibi"),  # BloomModel: ALiBi always (no key)
        ("falcon", {"alibi": True, "parallel_attn": False}, "alibi"),
        ("gpt_neox", {"hidden_act": "gelu"}, "use_parallel_residual"),  # GPTNeoXConfig default true
        ("falcon", {}, "parallel_attn"),  # FalconConfig default true
        ("falcon", {"parallel_attn": False, "new_decoder_architecture": True}, "parallel_attn"),
    ],
)
def test_hf_import_family_architecture_refused_by_key(
    tmp_path: Path, model_type: str, extra: dict[str, object], key: str
) -> None:
    """ALiBi and the parallel attention + MLP block, also where the transformers class implies
    them without a key (BLOOM) or by default (GPT-NeoX, Falcon), were costed as RoPE and as the
    sequential block: refused naming the key, one warning line when allowed."""
    path = str(_config(tmp_path, model_type=model_type, **extra))
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": path, "seq_len": 512}, tmp_path)
    assert info.value.key == key
    m = model_from_table({"hf_config": path, "seq_len": 512, "allow_unmodeled": [key]}, tmp_path)
    assert any(f"'{key}'" in n for n in m.notes)


@pytest.mark.parametrize(
    ("model_type", "extra", "positions", "bias"),
    [
        ("gpt2", {}, True, True),  # GPT2Model wpe; Conv1D biases
        ("gpt_bigcode", {}, True, True),
        ("opt", {"activation_function": "relu"}, True, True),  # OPTConfig enable_bias true
        ("opt", {"activation_function": "relu", "enable_bias": False}, True, False),
        ("gpt_neox", {"hidden_act": "gelu", "use_parallel_residual": False}, False, True),
        ("falcon", {"parallel_attn": False}, False, False),  # FalconConfig bias false
        ("falcon", {"parallel_attn": False, "bias": True}, False, True),
    ],
)
def test_hf_import_family_positions_and_biases(
    tmp_path: Path, model_type: str, extra: dict[str, object], positions: bool, bias: bool
) -> None:
    path = str(_config(tmp_path, model_type=model_type, **extra))
    m = model_from_table({"hf_config": path, "seq_len": 512}, tmp_path)
    assert (m.position_embeddings, m.linear_bias) == (positions, bias)


def test_hf_import_gpt_neox_attention_without_bias_refused(tmp_path: Path) -> None:
    """GPTNeoXConfig attention_bias false leaves its MLP biased: not all or none."""
    path = str(
        _config(
            tmp_path,
            model_type="gpt_neox",
            hidden_act="gelu",
            use_parallel_residual=False,
            attention_bias=False,
        )
    )
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": path, "seq_len": 512}, tmp_path)
    assert info.value.key == "attention_bias"
