"""MoE at the frontier (issue 13): architectures (MLA, shared experts, dense first layers,
interleaved layers, MTP) with parameter counts against the published figures, config.json imports
(exact or refused), one home for per-rank parameters, etp, EP overlap, routing skew, node-limited
routing, low-precision recipes, offloading and pipeline layouts with embedding/loss slots."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from simulator import flops as F
from simulator.comm import default_comm_model
from simulator.costs import TILE_M, Device, grouped_matmul_time_s, matmul_time_s, memory_op_time_s
from simulator.ep_dispatch import expected_groups_hit
from simulator.errors import ConfigError
from simulator.loading import load_gpu_catalog, model_from_table, model_preset, scenario_from_dict
from simulator.memory import memory_footprint, stage_params_of_chunks
from simulator.program import (
    FP8_CURRENT_KERNELS_PER_TENSOR,
    TE_GEMM_STREAMS,
    _Coster,
    build_program,
    quant_bytes_per_element,
)
from simulator.schedules import chunk_layers
from simulator.simulate import simulate
from simulator.specs import Scenario

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _close(value: float, published: float, rounding: float = 0.0, rel: float = 0.005) -> bool:
    """Within rel of the published figure, widened by half the unit it was rounded to."""
    return abs(value - published) <= rel * published + rounding / 2


# ----------------------------------------------------------------------------- parameter counts
# (preset, total published, its rounding, active published, its rounding, counts the input
#  embedding in "active", source)
PUBLISHED = [
    # DeepSeek-V3 report (arXiv 2412.19437) abstract: 671B total; README_WEIGHTS.md of the released
    # weights: 36.6B activated "including 0.9B for the output head" (input embedding not counted)
    ("deepseek-v3", 671e9, 1e9, 36.6e9, 0.1e9, False),
    # Qwen3 technical report (arXiv 2505.09388) Table 2: 235B total, 22B activated
    ("qwen3-235b-a22b", 235e9, 1e9, 22e9, 1e9, True),
    # Qwen3 report Table 2 / model card: 30.5B total, 3.3B activated
    ("qwen3-30b-a3b", 30.5e9, 0.1e9, 3.3e9, 0.1e9, True),
    # Meta Llama 4 announcement (2025-04-05): Maverick 400B total, 17B active
    ("llama4-maverick", 400e9, 1e9, 17e9, 1e9, True),
    # OpenAI gpt-oss model card (2025-08-05) Table 1: 116.83B total, 5.13B active per token
    # (unembedding counted, embedding not)
    ("gpt-oss-120b", 116.83e9, 0.01e9, 5.13e9, 0.01e9, False),
    # same card, Table 1: gpt-oss-20b 20.91B total, 3.61B active
    ("gpt-oss-20b", 20.91e9, 0.01e9, 3.61e9, 0.01e9, False),
    # Mistral AI Mixtral 8x22B announcement (2024-04-17): 141B total, 39B active
    ("mixtral-8x22b", 141e9, 1e9, 39e9, 1e9, True),
    # Kimi K2 model card (moonshotai/Kimi-K2-Instruct): 1T total, 32B activated, counted as
    # DeepSeek-V3 counts (no input embedding: 31.7B; with it 32.9B). Its technical report
    # (arXiv 2507.20534) says 1.04T; the config.json gives 1.026T, 1.3% below that figure.
    ("kimi-k2", 1e12, 0.1e12, 32e9, 1e9, False),
]


@pytest.mark.parametrize(("preset", "total", "t_round", "active", "a_round", "with_input_emb"), PUBLISHED)
def test_params_match_published(
    preset: str, total: float, t_round: float, active: float, a_round: float, with_input_emb: bool
) -> None:
    m = model_preset(preset)
    assert _close(F.total_params(m), total, t_round), F.total_params(m) / 1e9
    act = F.active_params(m) - (0 if with_input_emb else m.vocab * m.hidden)
    assert _close(act, active, a_round), act / 1e9


def test_deepseek_v3_closed_form() -> None:
    """MLA + MoE parameters from the config's numbers, term by term (DeepSeek-V2 §2.1)."""
    m = model_preset("deepseek-v3")
    h = 7168
    mla = h * 1536 + 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 + 512 * 128 * 256 + 128 * 128 * h
    assert F.attention_params(m) == mla
    expert = 3 * h * 2048
    moe_layer = mla + 257 * expert + 256 * h + 2 * h
    dense_layer = mla + 3 * h * 18432 + 2 * h
    assert F.total_params(m) == 58 * moe_layer + 3 * dense_layer + h + 2 * 129280 * h
    assert m.num_moe_layers == 58 and not m.is_moe_layer(2) and m.is_moe_layer(3)
    # the MTP module: one more MoE layer + the 2h -> h projection and norms (README: 11.5B unique)
    assert F.mtp_params(m) == moe_layer + 2 * h * h + 3 * h
    assert _close(F.mtp_params(m), 11.5e9, 0.1e9, rel=0.01)


def test_llama4_interleaved_layers() -> None:
    m = model_preset("llama4-maverick")
    assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    dense, moe = F.layer_params(m, 0), F.layer_params(m, 1)
    assert dense - F.attention_params(m) - 2 * m.hidden == 3 * 5120 * 16384
    assert moe - F.attention_params(m) - 2 * m.hidden == 129 * 3 * 5120 * 8192 + 128 * 5120


def test_mla_flops_closed_form() -> None:
    """Forward FLOPs of an MLA layer: 2 × every projection + scores over nope+rope + values over v."""
    m = model_preset("deepseek-v3")
    s = m.seq_len
    f = F.layer_forward_flops(m, 0)
    assert f.qkv + f.out_proj == 2 * s * F.attention_params(m) - 2 * s * (1536 + 512)  # norms: no FLOPs
    assert f.attn_scores == 2 * s * s * 128 * 192
    assert f.attn_values == 2 * s * s * 128 * 128


def test_mtp_adds_flops_not_params() -> None:
    m = model_preset("deepseek-v3")
    no_mtp = replace(m, mtp_layers=0)
    assert F.total_params(m) == F.total_params(no_mtp)
    extra = F.model_flops_per_sequence(m) - F.model_flops_per_sequence(no_mtp)
    s = m.seq_len
    expected = 3 * (2 * s * 2 * m.hidden**2 + F.layer_forward_flops(m, 60).total + F.logits_forward_flops(m))
    assert extra == pytest.approx(expected, rel=1e-12)


# ----------------------------------------------------------------------------- config.json imports
IMPORTS = [
    ("deepseek_v3.json", "deepseek-v3", []),
    ("kimi_k2.json", "kimi-k2", []),
    ("qwen3_moe.json", "qwen3-235b-a22b", []),
    ("mixtral.json", "mixtral-8x22b", []),
    ("llama4.json", "llama4-maverick", ["vision_config", "no_rope_layers"]),
    ("gpt_oss.json", "gpt-oss-120b", []),
]


@pytest.mark.parametrize(("config", "preset", "allow"), IMPORTS)
def test_hf_import_equals_preset(config: str, preset: str, allow: list[str]) -> None:
    m = model_from_table({"hf_config": config, "seq_len": 4096, "allow_unmodeled": allow}, FIXTURES)
    p = model_preset(preset)
    assert F.total_params(m) == F.total_params(p)
    assert F.active_params(m) == F.active_params(p)
    assert F.model_flops_per_sequence(m) == F.model_flops_per_sequence(p)
    assert (m.activation, m.linear_bias) == (p.activation, p.linear_bias)
    assert m.rope_mscale == pytest.approx(p.rope_mscale, rel=1e-4)
    assert m.attention_sinks == p.attention_sinks
    # one warning line per allowed key (gpt_oss's sinks are modeled: no feature line)
    assert len(m.notes) == len(allow)
    assert all(config in n for n in m.notes)


# Hub-style config.json files (keys sorted, every field the released file has that bears on the
# architecture: Llama 4's moe_layers / no_rope_layers / llama3 rope_scaling / vision_config,
# GPT-OSS's layer_types and quantization_config, Qwen's sliding_window with use_sliding_window
# false), against the published totals: (file, allow_unmodeled, total, its rounding, active,
# its rounding, counts the input embedding in "active", source)
HUB_IMPORTS = [
    # Mistral AI (2023-12-11, "Mixtral of experts"): 46.7B total, 12.9B active
    ("mixtral_8x7b.json", [], 46.7e9, 0.1e9, 12.9e9, 0.1e9, True),
    # Qwen2 technical report (arXiv 2407.10671) Table 1: 57B total, 14B activated
    ("qwen2_57b_a14b.json", [], 57e9, 1e9, 14e9, 1e9, True),
    # Qwen3 report Table 2 / model card: 30.5B total, 3.3B activated
    ("qwen3_30b_a3b.json", [], 30.5e9, 0.1e9, 3.3e9, 0.1e9, True),
    # OpenAI gpt-oss model card Table 1: gpt-oss-20b 20.91B total, 3.61B active (unembedding
    # counted, embedding not); its 128-token window on every other layer modeled
    ("gpt_oss_20b.json", [], 20.91e9, 0.01e9, 3.61e9, 0.01e9, False),
    # Meta Llama 4 model card: Scout 17B active; its "109B total" counts the vision encoder
    # (34 ViT layers of 1408, ~0.87B) that only the text model here leaves out: 107.8B simulated
    ("llama4_scout.json", ["vision_config", "no_rope_layers"], 109e9 - 0.87e9, 1e9, 17e9, 1e9, True),
]


@pytest.mark.parametrize(
    ("config", "allow", "total", "t_round", "active", "a_round", "with_input_emb"), HUB_IMPORTS
)
def test_hf_import_hub_configs_match_published(
    config: str,
    allow: list[str],
    total: float,
    t_round: float,
    active: float,
    a_round: float,
    with_input_emb: bool,
) -> None:
    m = model_from_table({"hf_config": config, "seq_len": 4096, "allow_unmodeled": allow}, FIXTURES)
    assert _close(F.total_params(m), total, t_round), F.total_params(m) / 1e9
    act = F.active_params(m) - (0 if with_input_emb else m.vocab * m.hidden)
    assert _close(act, active, a_round), act / 1e9
    # GPT-OSS's sinks are modeled (attention_sinks): no feature line; Qwen2-MoE's shared-expert
    # gate is not: one line, as its presets say
    gate = "qwen2" in config and "moe" in m.name.lower()
    assert len(m.notes) == len(allow) + gate
    assert m.attention_sinks == (m.activation == "clamped_quick_geglu")
    if allow:  # each allowed key is needed: without it the import is refused naming one
        with pytest.raises(ConfigError) as info:
            model_from_table({"hf_config": config, "seq_len": 4096}, FIXTURES)
        assert info.value.key in allow


def test_hf_import_hub_nemotron_h_refused_by_its_layer_pattern() -> None:
    """The hub's Nemotron-H-8B config.json (alphabetical keys, Mamba fields, time_step_limit with
    Infinity): refused naming hybrid_override_pattern, never imported as a 52-layer transformer."""
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": "nemotron_h_8b_hub.json", "seq_len": 8192}, FIXTURES)
    assert info.value.key == "hybrid_override_pattern"
    assert "nemotron_h_8b_hub.json" in str(info.value.file)


def test_hf_import_qwen2_moe_published() -> None:
    """Qwen1.5-MoE-A2.7B (Qwen blog 2024-03-28): 14.3B total, 2.7B activated (shared expert 5632)."""
    m = model_from_table({"hf_config": "qwen2_moe.json", "seq_len": 4096}, FIXTURES)
    assert m.name == "Qwen/Qwen1.5-MoE-A2.7B" and m.shared_expert_ffn_hidden == 5632
    assert _close(F.total_params(m), 14.3e9, 0.1e9) and _close(F.active_params(m), 2.7e9, 0.1e9)


def test_hf_import_deepseek_fields() -> None:
    m = model_from_table({"hf_config": "deepseek_v3.json", "seq_len": 4096}, FIXTURES)
    assert m.mla is not None and m.mla.q_lora_rank == 1536 and m.mtp_layers == 1
    assert m.first_dense_layers == 3 and m.shared_expert_ffn_hidden == 2048
    assert m.max_nodes_per_token == 4  # topk_group of 8 groups
    assert m.name == "deepseek-ai/DeepSeek-V3"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ("nemotron_h.json", "hybrid_override_pattern"),
        ("llama4.json", "vision_config"),
    ],
)
def test_hf_import_unmodeled_refused(config: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": config, "seq_len": 4096}, FIXTURES)
    assert info.value.key == key and config in str(info.value.file)


def test_hf_import_window_at_least_seq_len_is_exact(tmp_path: Path) -> None:
    """A sliding window / chunk no shorter than the sequence is plain causal attention; a longer
    sequence chunks the layers Llama 4 chunks (its RoPE layers: here every layer)."""
    cfg = json.loads((FIXTURES / "llama4.json").read_text())
    del cfg["vision_config"]
    cfg["text_config"]["no_rope_layers"] = [1] * 48  # RoPE on every layer: no NoPE layer to allow
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    m = model_from_table({"hf_config": "c.json", "seq_len": 8192}, tmp_path)
    assert m.notes == () and not m.has_local_attention
    long = model_from_table({"hf_config": "c.json", "seq_len": 16384}, tmp_path)
    assert {long.attention_window(i) for i in range(48)} == {("chunked", 8192)}


@pytest.mark.parametrize("config", ["llama4.json", "llama4_scout.json"])
def test_hf_import_llama4_nope_layers_refused(config: str) -> None:
    """Llama 4's NoPE layers (no_rope_layers 0 = no RoPE; an empty list = every 4th layer,
    transformers Llama4TextConfig no_rope_layer_interval 4) are costed as RoPE layers: refused
    naming no_rope_layers unless allowed, then one warning line."""
    with pytest.raises(ConfigError) as info:
        model_from_table(
            {"hf_config": config, "seq_len": 4096, "allow_unmodeled": ["vision_config"]}, FIXTURES
        )
    assert info.value.key == "no_rope_layers"
    m = model_from_table(
        {"hf_config": config, "seq_len": 4096, "allow_unmodeled": ["vision_config", "no_rope_layers"]},
        FIXTURES,
    )
    assert sum("no_rope_layers" in n and "NoPE" in n for n in m.notes) == 1


def test_hf_import_llama4_absent_chunk_is_the_class_default(tmp_path: Path) -> None:
    """Llama4TextConfig's attention_chunk_size defaults to 8192: a config.json without the key
    still has chunked attention on its RoPE layers (an explicit null: none)."""
    cfg = json.loads((FIXTURES / "llama4.json").read_text())
    del cfg["vision_config"], cfg["text_config"]["attention_chunk_size"]
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    allow = ["no_rope_layers"]
    m = model_from_table({"hf_config": "c.json", "seq_len": 16384, "allow_unmodeled": allow}, tmp_path)
    assert m.attention_chunk_size == 8192
    assert [m.attention_window(i)[0] for i in range(4)] == ["chunked", "chunked", "chunked", "full"]
    cfg["text_config"]["attention_chunk_size"] = None
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    m = model_from_table({"hf_config": "c.json", "seq_len": 16384, "allow_unmodeled": allow}, tmp_path)
    assert not m.has_local_attention


def test_allow_unmodeled_names_a_key_not_needed() -> None:
    """A listed key the config does not have (a typo) or that is modeled exactly is one warning
    line, so the user learns the list does nothing."""
    m = model_from_table(
        {"hf_config": "mixtral.json", "seq_len": 4096, "allow_unmodeled": ["vison_config"]}, FIXTURES
    )
    assert len(m.notes) == 1 and "vison_config" in m.notes[0] and "nothing to ignore" in m.notes[0]


def test_hf_config_may_name_the_downloaded_model_folder(tmp_path: Path) -> None:
    """A Hugging Face snapshot folder stands for its config.json; a hub id that is no local path
    is refused with the hint that the import is offline."""
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    (folder / "config.json").write_text((FIXTURES / "deepseek_v3.json").read_text())
    m = model_from_table({"hf_config": "DeepSeek-V3", "seq_len": 4096}, tmp_path)
    assert F.total_params(m) == F.total_params(model_preset("deepseek-v3"))
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": "deepseek-ai/DeepSeek-V3", "seq_len": 4096}, tmp_path)
    assert info.value.key == "model.hf_config" and "offline" in info.value.message


def test_hf_import_seq_len_warning() -> None:
    m = model_from_table({"hf_config": "deepseek_v3.json"}, FIXTURES)
    assert m.seq_len == 4096  # rope_scaling.original_max_position_embeddings, not 163,840
    assert len(m.notes) == 1 and "seq_len" in m.notes[0]


def test_allow_unmodeled_needs_hf_config() -> None:
    with pytest.raises(ConfigError) as info:
        model_from_table({"preset": "deepseek-v3", "allow_unmodeled": ["x"]}, FIXTURES)
    assert info.value.key == "model.allow_unmodeled"


@pytest.mark.parametrize(
    ("moe", "key"),
    [
        ({"shared_expert_ffn_hidden": -1}, "model.moe.shared_expert_ffn_hidden"),
        ({"expert_ffn_hidden": 1.5}, "model.moe.expert_ffn_hidden"),
        ({"num_experts": -4}, "model.moe.num_experts"),
        ({"layer_interval": 0}, "model.moe.layer_interval"),
        ({"layer_interval": 48}, "model.moe.layer_interval"),  # 46 layers past 2 dense: none MoE
    ],
)
def test_moe_table_errors_name_the_key_as_written(moe: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        model_from_table({"preset": "qwen3-30b-a3b", "moe": {"first_dense_layers": 2, **moe}}, FIXTURES)
    assert info.value.key == key


def _edited_config(tmp_path: Path, fixture: str, sort_keys: bool = False, **changes: object) -> str:
    """A copy of a fixture config.json with keys changed (None deletes), keys sorted as the
    Hugging Face hub's files are."""
    cfg = json.loads((FIXTURES / fixture).read_text())
    target = cfg["text_config"] if "text_config" in cfg else cfg
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    (tmp_path / "c.json").write_text(json.dumps(cfg, sort_keys=sort_keys))
    return "c.json"


def test_hf_import_nemotron_h_refusal_names_the_layer_pattern(tmp_path: Path) -> None:
    """The hub's Nemotron-H config.json lists its keys alphabetically: the refusal still names
    the hybrid layer pattern, not the first Mamba field, and lists the other keys to allow."""
    name = _edited_config(tmp_path, "nemotron_h.json", sort_keys=True)
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": name, "seq_len": 4096}, tmp_path)
    assert info.value.key == "hybrid_override_pattern"
    assert "conv_kernel" in info.value.message and "mamba_head_dim" in info.value.message
    with pytest.raises(ConfigError) as info:
        model_from_table(
            {"hf_config": name, "seq_len": 4096, "allow_unmodeled": ["hybrid_override_pattern"]}, tmp_path
        )
    assert info.value.key == "conv_kernel"


def test_hf_import_layer_types_exact_when_windows_cover_the_sequence(tmp_path: Path) -> None:
    """GPT-OSS's sliding/full alternation is plain causal attention when the window covers
    seq_len and windowed on the even layers when it does not; a layer_types list that does not
    give every layer is refused; linear attention always is."""
    name = _edited_config(tmp_path, "gpt_oss.json", sliding_window=8192)
    m = model_from_table({"hf_config": name, "seq_len": 4096}, tmp_path)
    assert F.total_params(m) == F.total_params(model_preset("gpt-oss-120b"))
    assert not m.has_local_attention
    long = model_from_table({"hf_config": name, "seq_len": 16384}, tmp_path)
    assert long.attention_window(0) == ("sliding", 8192) and long.attention_window(1) == ("full", 0)
    allow = ["vision_config", "no_rope_layers"]
    short = _edited_config(
        tmp_path, "llama4.json", layer_types=["chunked_attention"] * 3 + ["full_attention"]
    )
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": short, "seq_len": 8192, "allow_unmodeled": allow}, tmp_path)
    assert info.value.key == "layer_types"
    llama = _edited_config(
        tmp_path, "llama4.json", layer_types=(["chunked_attention"] * 3 + ["full_attention"]) * 12
    )
    ok = model_from_table({"hf_config": llama, "seq_len": 8192, "allow_unmodeled": allow}, tmp_path)
    assert ok.num_moe_layers == 24
    linear = _edited_config(tmp_path, "gpt_oss.json", layer_types=["linear_attention", "full_attention"] * 18)
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": linear, "seq_len": 64}, tmp_path)
    assert info.value.key == "layer_types"


def test_hf_import_deepseek_moe_layer_freq_refused(tmp_path: Path) -> None:
    """DeepSeek's moe_layer_freq counts from layer 0 (i % freq == 0), the other phase of the
    simulator's every-k-th layer: refused, not silently shifted."""
    name = _edited_config(tmp_path, "deepseek_v3.json", moe_layer_freq=2)
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": name, "seq_len": 4096}, tmp_path)
    assert info.value.key == "moe_layer_freq"


def test_hf_import_llama4_moe_layers_must_match_the_interleave(tmp_path: Path) -> None:
    allow = {"seq_len": 4096, "allow_unmodeled": ["vision_config", "no_rope_layers"]}
    good = _edited_config(tmp_path, "llama4.json", moe_layers=list(range(1, 48, 2)))
    assert model_from_table({"hf_config": good, **allow}, tmp_path).num_moe_layers == 24
    bad = _edited_config(tmp_path, "llama4.json", moe_layers=list(range(0, 48, 2)))
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": bad, **allow}, tmp_path)
    assert info.value.key == "moe_layers"


@pytest.mark.parametrize(
    ("fixture", "key", "value"),
    [
        ("qwen3_moe.json", "head_dim", 0),  # was read as "derive hidden / heads"
        ("deepseek_v3.json", "n_shared_experts", "x"),  # was: no shared expert
        ("deepseek_v3.json", "topk_group", "a"),  # was: no node limit
        ("deepseek_v3.json", "moe_intermediate_size", 0),  # was: experts as wide as the dense MLP
        ("llama4.json", "interleave_moe_layer_step", 0),  # was: every layer MoE
        ("deepseek_v3.json", "kv_lora_rank", -3),  # was blamed on the scenario's model.mla
        ("mixtral.json", "intermediate_size", None),  # was: 4 x hidden, not Mixtral's width
    ],
)
def test_hf_import_bad_widths_refused_by_config_key(
    tmp_path: Path, fixture: str, key: str, value: object
) -> None:
    """A width or count the import would read as "absent" when 0, null or not an integer is
    refused naming the config.json key, never replaced by a default."""
    cfg = json.loads((FIXTURES / fixture).read_text())
    (cfg.get("text_config") or cfg)[key] = value
    cfg.pop("vision_config", None)
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as info:
        model_from_table({"hf_config": "c.json", "seq_len": 4096}, tmp_path)
    assert info.value.key == key and str(info.value.file).endswith("c.json")
    if key == "intermediate_size":  # the scenario may give the width the config leaves out
        m = model_from_table({"hf_config": "c.json", "seq_len": 4096, "ffn_hidden": 16384}, tmp_path)
        assert F.total_params(m) == F.total_params(model_preset("mixtral-8x22b"))


def test_hf_import_group_limited_routing_counts_the_nodes_a_group_spans() -> None:
    """DeepSeek-V3's config: 8 expert groups, 4 per token (DeepSeek-V3 §3.2.1). Over EP 64 on 8
    nodes a group is a node: at most 4 nodes per token. Over EP 128 on 16 nodes a group spans 2
    nodes: up to 8, with a warning line. A max_nodes_per_token the scenario gives is kept."""

    def scn(ep: int, moe: dict | None = None) -> Scenario:
        model = {"hf_config": "deepseek_v3.json", "seq_len": 4096} | ({"moe": moe} if moe else {})
        data = {
            "name": "t",
            "model": model,
            "cluster": {"topology": "dgx-h100", "num_gpus": 8 * ep},
            "parallel": {"ep": ep, "global_batch": 8 * ep},
        }
        return scenario_from_dict(data, base_dir=FIXTURES)

    assert scn(64).model.max_nodes_per_token == 4 and not any("topk_group" in w for w in scn(64).warnings())
    wide = scn(128)
    assert wide.model.max_nodes_per_token == 8
    assert sum("topk_group = 4" in w for w in wide.warnings()) == 1
    assert scn(128, {"max_nodes_per_token": 4}).model.max_nodes_per_token == 4


def test_hf_import_tied_embeddings_defaults(tmp_path: Path) -> None:
    """tie_word_embeddings from the top level when text_config lacks it; absent everywhere, the
    transformers class default (GPT-2 ties, Mixtral does not)."""
    cfg = json.loads((FIXTURES / "llama4.json").read_text())
    cfg["text_config"].pop("tie_word_embeddings")
    cfg["tie_word_embeddings"] = True
    del cfg["vision_config"]
    (tmp_path / "l.json").write_text(json.dumps(cfg))
    allow = ["no_rope_layers"]
    assert model_from_table(
        {"hf_config": "l.json", "seq_len": 4096, "allow_unmodeled": allow}, tmp_path
    ).tied_embeddings
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257}
    (tmp_path / "g.json").write_text(json.dumps(gpt2))
    m = model_from_table({"hf_config": "g.json", "seq_len": 1024}, tmp_path)
    assert m.tied_embeddings and _close(F.total_params(m), 124.4e6, rel=0.01)  # GPT-2 small: 124M
    mixtral = _edited_config(tmp_path, "mixtral.json", tie_word_embeddings=None)
    assert not model_from_table({"hf_config": mixtral, "seq_len": 4096}, tmp_path).tied_embeddings


def test_hf_import_rope_parameters_as_rope_scaling(tmp_path: Path) -> None:
    """transformers v5 writes rope_parameters where v4 wrote rope_scaling: YaRN's factor and the
    pre-training length are read from either."""
    cfg = json.loads((FIXTURES / "deepseek_v3.json").read_text())
    cfg["rope_parameters"] = {**cfg.pop("rope_scaling"), "rope_theta": 10000}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    m = model_from_table({"hf_config": "c.json"}, tmp_path)
    assert m.seq_len == 4096
    assert m.rope_mscale == model_from_table({"hf_config": "deepseek_v3.json"}, FIXTURES).rope_mscale


# ----------------------------------------------------------------------------- scenarios
def _scn(model: dict, parallel: dict, gpu: str = "h100-sxm", topology: str = "dgx-h100", **extra) -> Scenario:
    num_gpus = parallel.pop("num_gpus")
    data = {
        "name": "t",
        "model": model,
        "cluster": {"topology": topology, "num_gpus": num_gpus, "gpu": gpu},
        "parallel": {"global_batch": 64, **parallel},
        **extra,
    }
    return scenario_from_dict(data)


def _step(scn: Scenario):
    return simulate(scn).report


QWEN30 = {"preset": "qwen3-30b-a3b", "seq_len": 4096}


def test_per_rank_params_one_home_tp_above_kv_heads() -> None:
    """llama3-70b at tp = 16 (8 KV heads): each rank keeps one whole KV head (Megatron replicates
    them), so attention per rank is h·(q/16 + 2·128) + q/16·h -- in cost and memory alike."""
    scn = _scn({"preset": "llama3-70b"}, {"tp": 16, "num_gpus": 16, "global_batch": 16})
    m = scn.model
    expected = m.hidden * (m.q_dim / 16 + 2 * 128) + m.q_dim / 16 * m.hidden
    assert F.attention_params_per_rank(m, 16) == pytest.approx(expected)
    prog = build_program(scn)
    per_layer_cost = prog.stages[0].chunks[0].params_local
    mem = stage_params_of_chunks(m, scn.parallel, 0, [list(range(m.layers))])
    assert per_layer_cost == pytest.approx(mem.dense + mem.expert, rel=1e-12)


@pytest.mark.parametrize("etp", [1, 2])
def test_per_rank_params_expert_tp(etp: int) -> None:
    """Qwen3-235B at tp 2, ep 32: experts per rank = 128/32 of 3·h·f, split again by etp;
    the cost model's chunk parameters equal the memory model's stage parameters."""
    scn = _scn(
        {"preset": "qwen3-235b-a22b", "seq_len": 4096},
        {
            "tp": 2,
            "pp": 4,
            "ep": 32,
            "etp": etp,
            "num_gpus": 256,
            "global_batch": 256,
            "sequence_parallel": True,
        },
    )
    m, par = scn.model, scn.parallel
    rank = F.layer_params_per_rank(m, par, moe=True)
    assert rank.expert == pytest.approx(4 * 3 * 4096 * 1536 / etp)
    prog = build_program(scn)
    for s, chunks in enumerate(chunk_layers(par.schedule, m.layers, par.pp, par.vp)):
        mem = stage_params_of_chunks(m, par, s, chunks)
        assert sum(c.params_local for c in prog.stages[s].chunks) == pytest.approx(mem.dense + mem.expert)
    assert par.expert_dp == 2 * 32 // (32 * etp)


def test_etp_halves_expert_memory() -> None:
    base = {"tp": 2, "pp": 4, "ep": 32, "num_gpus": 256, "global_batch": 256, "sequence_parallel": True}
    model = {"preset": "qwen3-235b-a22b", "seq_len": 4096}
    one, two = (_scn(model, {**base, "etp": etp}) for etp in (1, 2))
    w1, w2 = (memory_footprint(s).parts_bytes["weights"] for s in (one, two))
    chunks = chunk_layers("1f1b", 94, 4, 1)[0]
    experts = stage_params_of_chunks(one.model, one.parallel, 0, chunks).expert
    assert stage_params_of_chunks(two.model, two.parallel, 0, chunks).expert == pytest.approx(experts / 2)
    assert w1 - w2 == pytest.approx(2 * experts / 2, rel=1e-9)  # 16-bit weights


def test_etp_must_fit_the_group() -> None:
    with pytest.raises(ConfigError) as info:
        _scn(QWEN30, {"ep": 8, "etp": 2, "num_gpus": 8})
    assert info.value.key == "parallel.etp"


def test_ep_overlap_hides_only_the_excess() -> None:
    par = {"ep": 8, "num_gpus": 16, "global_batch": 64}
    off = _step(_scn(QWEN30, dict(par)))
    on = _step(_scn(QWEN30, {**par, "ep_comm_overlap": True}))
    assert off.breakdown_s["ep_comm"] > 0
    assert on.breakdown_s["ep_comm"] < off.breakdown_s["ep_comm"]
    assert on.step_time_s < off.step_time_s
    # hiding costs SMs: never faster than the step without any all-to-all time at all
    assert on.step_time_s > off.step_time_s - off.breakdown_s["ep_comm"]


def test_dropless_skew_slows_expert_work() -> None:
    par = {"ep": 8, "num_gpus": 8, "global_batch": 64}
    exact = _step(_scn({**QWEN30, "moe": {"load_imbalance": 1.0}}, dict(par)))
    bal = _step(_scn({**QWEN30, "moe": {"routing": "balanced"}}, dict(par)))
    drop = _step(_scn({**QWEN30, "moe": {"routing": "dropless"}}, dict(par)))
    skew2 = _step(_scn({**QWEN30, "moe": {"load_imbalance": 2.0}}, dict(par)))
    assert exact.step_time_s < bal.step_time_s < drop.step_time_s < skew2.step_time_s
    # Qwen3-30B (128 experts, top-8) on EP8, 4,096 tokens per rank (routing_skew.py): forced
    # balancing's sampling spread alone, dropless adds the trained router's skew
    factor = _scn({**QWEN30, "moe": {"routing": "dropless"}}, dict(par)).expert_load_imbalance
    forced = _scn({**QWEN30, "moe": {"routing": "balanced"}}, dict(par)).expert_load_imbalance
    assert 1.10 < factor < 1.15
    assert 1.005 < forced < 1.01
    for report, f in ((bal, forced), (drop, factor), (skew2, 2.0)):
        assert report.breakdown_s["ep_comm"] == pytest.approx(f * exact.breakdown_s["ep_comm"], rel=1e-9)


def test_fp8_dispatch_cuts_dispatch_bytes() -> None:
    par = {"ep": 8, "num_gpus": 16, "global_batch": 64}
    bf16 = _step(_scn(QWEN30, dict(par)))
    fp8 = _step(_scn({**QWEN30, "moe": {"dispatch_dtype": "fp8"}}, dict(par)))
    assert fp8.breakdown_s["ep_comm"] < bf16.breakdown_s["ep_comm"]
    # combine stays bf16: more than half of the bf16 all-to-all time remains
    assert fp8.breakdown_s["ep_comm"] > 0.5 * bf16.breakdown_s["ep_comm"]


def test_node_limited_routing_cuts_ib_traffic() -> None:
    """EP 64 over 8 DGX nodes: top-8 experts reach ~5.3 of 8 nodes; limited to 2 nodes (with
    per-node deduplication) the inter-node all-to-all carries 2/8 of the copies."""
    model = {"preset": "deepseek-v3", "seq_len": 4096, "mtp_layers": 0}
    par = {"pp": 16, "ep": 64, "num_gpus": 1024, "global_batch": 64}
    free = _step(_scn({**model, "moe": {"max_nodes_per_token": 0}}, dict(par), gpu="h800"))
    limited = _step(_scn({**model, "moe": {"max_nodes_per_token": 2}}, dict(par), gpu="h800"))
    assert limited.breakdown_s["ep_comm"] < 0.5 * free.breakdown_s["ep_comm"]


def test_grouped_gemm_ragged_tokens_cost_more() -> None:
    """Dropless routing runs m/TILE_M + 1/2 row tiles per expert on average: between the whole-tile
    shapes, and dearer than balanced routing's exact tiles at a tile multiple."""
    d = Device(load_gpu_catalog()["h100-sxm"], "bf16")
    even = grouped_matmul_time_s(d, 4 * TILE_M, 1536, 2048, 16)
    assert even == matmul_time_s(d, 4 * TILE_M, 1536, 2048, 16)
    ragged = grouped_matmul_time_s(d, 4 * TILE_M, 1536, 2048, 16, uneven=True)
    five = matmul_time_s(d, 5 * TILE_M, 1536, 2048, 16)
    assert ragged == pytest.approx((even + five) / 2)
    assert even < ragged < five
    launch = d.gpu.efficiency.kernel_launch_s  # about linear in row tiles at this size
    assert (ragged - launch) / (even - launch) == pytest.approx(4.5 / 4, rel=0.05)


@pytest.mark.parametrize(("gpu", "dtype"), [("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("b200", "mxfp8")])
@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("streams", [0, TE_GEMM_STREAMS])
def test_grouped_gemm_never_faster_with_more_tokens(gpu: str, dtype: str, uneven: bool, streams: int) -> None:
    """More tokens on an expert (load_imbalance, bigger micro-batches) never make its grouped GEMM
    faster: token rows are padded to the recipe's alignment (TE Fp8Padding), not charged an
    unaligned-shape penalty that a larger aligned count escapes (m = 15 vs 16 used to differ by
    1/0.65), and ragged tiles interpolate between whole-tile shapes (m = 128 used to cost more
    than m = 192)."""
    d = Device(load_gpu_catalog()[gpu], dtype)
    for n, k, groups in ((256, 64, 2), (1536, 2048, 16), (5760, 2880, 4)):
        times = [grouped_matmul_time_s(d, m, n, k, groups, uneven, streams) for m in range(1, 700)]
        assert all(b >= a for a, b in zip(times, times[1:], strict=False)), (n, k, groups)


def test_te_grouped_linear_runs_expert_gemms_on_four_streams() -> None:
    """TE GroupedLinear (eager TEGroupedMLP) issues one cuBLASLt GEMM per expert, round-robin over 4
    streams (program.TE_MULTI_STREAM_NOTE): 16 experts cost 4 rounds of 4 concurrent GEMMs, a
    remainder its own round, at most 4 experts the one batch; always between one grouped kernel
    and the experts' GEMMs one after another."""
    assert TE_GEMM_STREAMS == 4
    for gpu, dtype in (("h100-sxm", "bf16"), ("b200", "mxfp8")):
        d = Device(load_gpu_catalog()[gpu], dtype)
        for m, n, k in ((512, 1536, 2048), (16384, 1536, 2048), (2048, 5760, 2880)):
            four = grouped_matmul_time_s(d, m, n, k, 4)
            assert grouped_matmul_time_s(d, m, n, k, 16, streams=4) == pytest.approx(4 * four, rel=1e-12)
            two = grouped_matmul_time_s(d, m, n, k, 2)
            assert grouped_matmul_time_s(d, m, n, k, 6, streams=4) == pytest.approx(four + two, rel=1e-12)
            assert grouped_matmul_time_s(d, m, n, k, 4, streams=4) == four
            assert grouped_matmul_time_s(d, m, n, k, 3, streams=4) == grouped_matmul_time_s(d, m, n, k, 3)
            batched = grouped_matmul_time_s(d, m, n, k, 16)
            serial = 16 * grouped_matmul_time_s(d, m, n, k, 1)
            assert batched <= grouped_matmul_time_s(d, m, n, k, 16, streams=4) <= serial


def _moe_segments(scn: Scenario) -> dict[str, list]:
    coster = _Coster(scn, default_comm_model(scn))
    fwd, b_in, b_w, _, _ = coster.layer(True)
    out: dict[str, list] = {}
    for s in fwd.parts + b_in.parts + b_w.parts:
        out.setdefault(s.name, []).append(s)
    return out


@pytest.mark.parametrize("fused", [False, True])
def test_eager_mxfp8_experts_quantize_and_multiply_per_expert(fused: bool) -> None:
    """Eager TE GroupedLinear under MXFP8: split_quantize runs one quantize kernel per local expert
    (cast.cpp multi_tensor_quantize_impl: no fused multi-tensor cast for MX quantizers) and the
    GEMMs run per expert on 4 streams; TE's fused grouped MLP does neither (one kernel each), and
    its CuTe DSL epilogues quantize fc2's input and fc1's output gradient inside the GEMMs
    (program.CUTEDSL_EPILOGUE_NOTE): two quantize kernels left of the four. FLOPs are the same."""
    # load_imbalance = 1: per_expert below is the mean rank's token copies
    model = {"preset": "qwen3-30b-a3b", "seq_len": 4096, "moe": {"load_imbalance": 1.0}}
    par = {"ep": 8, "num_gpus": 8, "global_batch": 64, "micro_batch": 8}
    scn = _scn(
        model,
        dict(par),
        gpu="b200",
        topology="dgx-b200",
        precision={"dtype": "mxfp8"},
        kernels={"fused_grouped_mlp": fused, "moe_dispatcher": "hybridep"},
    )
    d = Device(scn.gpu, scn.dtype)
    m = scn.model
    experts_local = m.num_experts // 8
    per_expert = 4096 * 8 * m.top_k // experts_local
    segs = _moe_segments(scn)
    quant = quant_bytes_per_element(d)
    fc1_n = 2 * m.expert_ffn
    expert_cast_bytes = {  # the inputs of fc1 and fc2 (forward), their output gradients (backward)
        quant * per_expert * k * experts_local for k in (m.hidden, m.expert_ffn, fc1_n)
    }
    label = "mxfp8 quantize" + ("" if fused else " (per expert)")
    casts = [s for s in segs[label] if any(s.message_bytes == pytest.approx(b) for b in expert_cast_bytes)]
    assert len(casts) == (2 if fused else 4)
    kernels = 1 if fused else experts_local
    for s in casts:
        assert s.duration_s == pytest.approx(memory_op_time_s(d, s.message_bytes, kernels), rel=1e-12)
    fc1 = segs["expert fc1"][0]
    dropless = m.routing == "dropless"
    want = grouped_matmul_time_s(d, per_expert, fc1_n, m.hidden, experts_local, dropless, 0 if fused else 4)
    assert fc1.duration_s == pytest.approx(want, rel=1e-12)
    assert fc1.flops == pytest.approx(2.0 * per_expert * fc1_n * m.hidden * experts_local)


@pytest.mark.parametrize(("recipe", "label"), [("delayed", "fp8 cast"), ("current", "fp8 cast (per expert)")])
def test_eager_fp8_expert_quantize_kernels_follow_the_recipe(recipe: str, label: str) -> None:
    """cast.cpp multi_tensor_quantize_impl fuses the experts' casts into one
    nvte_multi_cast_transpose only for delayed-scaling Float8Quantizers; current scaling quantizes
    each expert's rows with its own quantizer, like MXFP8, and each such quantize is three kernels
    (amax, scale, cast: quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl)."""
    # load_imbalance = 1: per_expert below is the mean rank's token copies
    model = {"preset": "qwen3-30b-a3b", "seq_len": 4096, "moe": {"load_imbalance": 1.0}}
    par = {"ep": 8, "num_gpus": 8, "global_batch": 64, "micro_batch": 8}
    scn = _scn(
        model,
        dict(par),
        gpu="b200",
        topology="dgx-b200",
        precision={"dtype": "fp8", "fp8_recipe": recipe},
        kernels={"moe_dispatcher": "hybridep"},
    )
    d = Device(scn.gpu, scn.dtype)
    experts_local = scn.model.num_experts // 8
    segs = _moe_segments(scn)
    kernels = experts_local * FP8_CURRENT_KERNELS_PER_TENSOR if recipe == "current" else 1
    assert segs[label], sorted(segs)
    expert_casts = [s for s in segs[label] if s.message_bytes > 0]
    for s in expert_casts:
        assert s.duration_s == pytest.approx(memory_op_time_s(d, s.message_bytes, kernels), rel=1e-12)


# ----------------------------------------------------------------------------- precision
def test_fp4_peaks_and_recipes() -> None:
    cat = load_gpu_catalog()
    assert cat["b200"].peak_flop_per_s("nvfp4") == 9e15
    assert cat["gb300"].peak_flop_per_s("nvfp4") == 15e15
    assert cat["gb200"].peak_flop_per_s("mxfp8") == cat["gb200"].peak_flop_per_s("fp8")
    with pytest.raises(ConfigError):
        cat["h100-sxm"].peak_flop_per_s("nvfp4")
    model = {"preset": "qwen3-30b-a3b", "seq_len": 4096}
    # micro-batches large enough that the GPU, not the host's kernel issue, sets the pace
    par = {"ep": 8, "num_gpus": 8, "global_batch": 64, "micro_batch": 8}
    runs = {
        dt: _step(_scn(model, dict(par), gpu="b200", topology="dgx-b200", precision={"dtype": dt}))
        for dt in ("bf16", "fp8", "mxfp8", "nvfp4")
    }
    # faster math, but each recipe's quantization passes cost more: fp8 < mxfp8 in time
    assert runs["fp8"].step_time_s < runs["bf16"].step_time_s
    assert runs["fp8"].step_time_s < runs["mxfp8"].step_time_s
    assert runs["nvfp4"].step_time_s < runs["bf16"].step_time_s


# ----------------------------------------------------------------------------- offloading
def test_offload_moves_memory_and_exposes_only_excess() -> None:
    model = {"preset": "llama3-8b", "seq_len": 8192}
    par = {"tp": 1, "num_gpus": 8, "global_batch": 8}
    base = _scn(model, dict(par))
    # a fifth of the activations: their PCIe copies fit under the layer's compute on an H100 (half of
    # them would not: ~11 ms of copies against ~5 ms of kernels per layer with the kernel model)
    half = _scn(model, dict(par), memory={"offload_activations": 0.2, "offload_optimizer": True})
    mb, mh = memory_footprint(base), memory_footprint(half)
    assert mh.parts_bytes["optimizer"] == 0
    assert mh.parts_bytes["activations"] < 0.85 * mb.parts_bytes["activations"]
    rb, rh = _step(base), _step(half)
    assert rh.step_time_s >= rb.step_time_s
    # the copies of a large layer hide under its compute: only the CPU optimizer step is added
    assert rh.breakdown_s["other"] == pytest.approx(0.0, abs=1e-9)
    assert rh.breakdown_s["optimizer"] > rb.breakdown_s["optimizer"]


def test_offload_needs_host_bandwidth() -> None:
    scn = _scn({"preset": "llama3-8b"}, {"num_gpus": 8, "global_batch": 8})
    gpu = replace(scn.gpu, host_link_bytes_per_s=0.0)
    with pytest.raises(ConfigError):
        replace(
            scn, topology=replace(scn.topology, gpu=gpu), memory=replace(scn.memory, offload_optimizer=True)
        )


# ----------------------------------------------------------------------------- layout
def test_layout_counts_embedding_and_loss() -> None:
    """Megatron account-for-embedding/loss: 61 layers + 2 slots over pp·vp = 63 virtual stages."""
    layout = chunk_layers("interleaved", 61, 9, 7, embedding_slot=True, loss_slot=True)
    chunks = [layout[s][c] for c in range(7) for s in range(9)]  # virtual stage c·pp + s
    assert len(chunks) == 63 and sum(len(c) for c in chunks) == 61
    assert len(chunks[0]) == 0 and len(chunks[-1]) == 0 and all(len(c) == 1 for c in chunks[1:-1])
    assert [i for c in chunks for i in c] == list(range(61))
    with pytest.raises(ConfigError) as info:  # 72 chunks for 61 layers + 2 slots
        _scn(
            {"preset": "deepseek-v3", "seq_len": 4096},
            {"pp": 9, "vp": 8, "num_gpus": 9, "global_batch": 9, "account_for_loss_in_pipeline_split": True},
        )
    assert info.value.key == "parallel.vp"


def test_layout_pp_vp_equal_layers_plus_two_simulates() -> None:
    model = {"preset": "llama3-8b", "seq_len": 4096, "layers": 30}
    par = {
        "pp": 8,
        "vp": 4,
        "num_gpus": 8,
        "global_batch": 16,
        "account_for_embedding_in_pipeline_split": True,
        "account_for_loss_in_pipeline_split": True,
    }
    scn = _scn(model, par)
    assert not scn.warnings() or all("divide" not in w for w in scn.warnings())
    rep = _step(scn)
    assert rep.step_time_s > 0


def test_layout_without_keys_counts_embedding_and_loss_when_only_that_divides() -> None:
    """pp·vp = layers + 2, or pieces dividing layers + 2 but not layers (Qwen3-235B's 94 layers on
    pp 8 × vp 4, NeMo's recipe), without the two keys: Megatron would refuse any other reading,
    so the embedding and loss take a slot each, with one warning line."""
    model = {"preset": "llama3-8b", "seq_len": 4096, "layers": 30}
    for vp in (4, 2):  # 32 pieces (= 30 + 2), 16 pieces (divide 32, not 30)
        scn = _scn(dict(model), {"pp": 8, "vp": vp, "num_gpus": 8, "global_batch": 16})
        assert scn.parallel.pipeline_extra_layers == 2
        assert sum("embedding + loss" in w for w in scn.warnings()) == 1
        assert not any("do not divide into pp" in w for w in scn.warnings())
        explicit = _scn(
            dict(model),
            {
                "pp": 8,
                "vp": vp,
                "num_gpus": 8,
                "global_batch": 16,
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
            },
        )
        assert _step(scn).step_time_s == _step(explicit).step_time_s
    # plain 1F1B: pp = layers + 2 is read the same; an uneven pp keeps its first-stages-heavier split
    plain = _scn({**model, "layers": 6}, {"pp": 8, "num_gpus": 8, "global_batch": 16})
    assert plain.parallel.pipeline_extra_layers == 2
    uneven = _scn(dict(model), {"pp": 8, "num_gpus": 8, "global_batch": 16})
    assert uneven.parallel.pipeline_extra_layers == 0
    assert any("do not divide into pp" in w for w in uneven.warnings())
    # a key given (even false) is the user's word; an even split needs nothing
    said = _scn(
        dict(model),
        {"pp": 8, "vp": 2, "num_gpus": 8, "global_batch": 16, "account_for_loss_in_pipeline_split": False},
    )
    assert said.parallel.pipeline_extra_layers == 0
    even = _scn({**model, "layers": 32}, {"pp": 8, "vp": 2, "num_gpus": 8, "global_batch": 16})
    assert even.parallel.pipeline_extra_layers == 0 and not even.warnings()


def test_explicit_pipeline_layout_places_the_layers_it_names() -> None:
    """[parallel] pipeline_layout (Megatron --pipeline-model-parallel-layout): DeepSeek-V3's
    Megatron-Bridge layout on pp 16 puts 4 layers on every stage but the last, which holds one
    layer beside the MTP module and the loss. The even split instead gives the last three stages
    3 layers, so its last stage (3 layers + MTP + logits) is the slowest and the pipeline waits on it."""
    layout = [4] * 15 + [1]
    chunks = chunk_layers("1f1b", 61, 16, 1, layout=layout)
    assert [len(c[0]) for c in chunks] == layout
    assert [i for c in chunks for i in c[0]] == list(range(61))
    even = chunk_layers("1f1b", 61, 16, 1)
    assert [len(c[0]) for c in even] == [4] * 13 + [3] * 3
    model = {"preset": "deepseek-v3", "seq_len": 4096}
    par = {"pp": 16, "ep": 8, "num_gpus": 128, "global_batch": 256}
    explicit = _scn(dict(model), {**par, "pipeline_layout": layout})
    assert explicit.parallel.pipeline_layout == tuple(layout)
    assert not any("do not divide" in w for w in explicit.warnings())
    default = _scn(dict(model), dict(par))
    assert _step(explicit).step_time_s < _step(default).step_time_s
    # run --json says which split was simulated
    assert _step(explicit).to_dict()["parallel"]["pipeline_layout"] == layout
    assert _step(default).to_dict()["parallel"]["pipeline_layout"] == []
    # the even split written out is the default, to the bit
    same = _scn(dict(model), {**par, "pipeline_layout": [4] * 13 + [3] * 3})
    assert _step(same).step_time_s == _step(default).step_time_s


@pytest.mark.parametrize(
    ("text", "layers"),
    [
        # deepseek_v3.py layout_map (16, 1) as Megatron-Bridge writes it (pp_layout)
        ("Et*4|(t*4|)*14tmL", [4] * 15 + [1]),
        # the H100 launch's layout: the last virtual stage holds only the MTP module and the loss
        ("Et|(tt|)*30mL", [1] + [2] * 30 + [0]),
        # commas are cosmetic; x*n inside a group unrolls after the group
        ("E,t*4|(t,t*3|)*14,t,m,L", [4] * 15 + [1]),
    ],
)
def test_megatron_layout_strings_are_the_layer_lists(text: str, layers: list[int]) -> None:
    """`pipeline_layout` also takes Megatron's --pipeline-model-parallel-layout string
    (pipeline_parallel_layer_layout.py parse_str_to_list) and simulates exactly its list form."""
    par = {"pp": len(layers), "ep": 8, "num_gpus": 8 * len(layers), "global_batch": 8 * len(layers)}
    model = {"preset": "deepseek-v3", "seq_len": 4096}
    from_text = _scn(dict(model), {**par, "pipeline_layout": text})
    from_list = _scn(dict(model), {**par, "pipeline_layout": layers})
    assert from_text.parallel.pipeline_layout == tuple(layers) == from_list.parallel.pipeline_layout
    assert _step(from_text).step_time_s == _step(from_list).step_time_s


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"pipeline_layout": [4] * 15}, "15 virtual stages holding 60 layers"),
        ({"pipeline_layout": [4] * 15 + [2]}, "holding 62 layers"),
        ({"pipeline_layout": [4] * 15 + [-1]}, "integers >= 0"),
        ({"pipeline_layout": "Et*4|(t*4|)*14t|mL"}, "17 virtual stages"),
        ({"pipeline_layout": "Et*4|(t*4|)*13t*4m|tL"}, "outside the last virtual stage"),
        ({"pipeline_layout": "t*4|(t*4|)*14tmEL"}, "embedding (E) must appear once, in the first"),
        ({"pipeline_layout": "Et*4|(t*4|)*14tm"}, "loss (L) must appear once"),
        ({"pipeline_layout": "Et*4|(t*4|)*14tL"}, "places 0 MTP module(s)"),
        ({"pipeline_layout": "Et*4|(x*4|)*14tmL"}, "unexpected 'x'"),
        ({"pipeline_layout": "E(t|)*999999999mL"}, "unrolls to more than"),
        ({"pipeline_layout": 7}, "list of layer counts"),
        (
            {"pipeline_layout": [4] * 15 + [1], "account_for_loss_in_pipeline_split": True},
            "drop account_for_embedding/loss",
        ),
    ],
)
def test_pipeline_layout_is_exact_or_refused(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _scn(
            {"preset": "deepseek-v3", "seq_len": 4096},
            {"pp": 16, "num_gpus": 16, "global_batch": 16, **extra},
        )
    assert info.value.key == "parallel.pipeline_layout" and message in str(info.value)


def test_run_json_model_object(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        '[model]\npreset = "deepseek-v3"\nseq_len = 4096\n[cluster]\ntopology = "dgx-h100"\nnum_gpus = 256\n'
        "[parallel]\npp = 16\nep = 16\nglobal_batch = 32\n"
    )
    res = run_cli(["run", str(path), "--json"])
    out = json.loads(res.out)
    m = model_preset("deepseek-v3")
    assert out["model"]["params"] == F.total_params(m)
    assert out["model"]["active_params"] == F.active_params(m)
    assert out["model"]["name"] == "deepseek-v3" and out["model"]["attention"] == "mla"
    assert out["parallel"]["etp"] == 1
    # an import is checked at a glance: the MLA ranks, the MoE layout and the MTP module
    assert out["model"]["mla"] == {
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }
    assert out["model"]["moe"]["first_dense_layers"] == 3 and out["model"]["moe"]["moe_layers"] == 58
    assert out["model"]["mtp_layers"] == 1


def test_nvfp4_gemm_fraction_scales_the_tensor_pipe_only() -> None:
    """`fp4_matmul_fraction` (recipes.toml) is the block-scaled MMA pipe's throughput: it scales
    the NVFP4 main loop of the kernel model and nothing else. A latency-bound NVFP4 GEMM costs
    what any GEMM's fixed latency costs, a large one runs its k-loop at the fraction of the FP8
    kernels' rate per datasheet FLOP, and the power-limited ceiling (the saturating GEMM the
    clock law measures activity against) is the chip's, at the datasheet FP4 rate."""
    from dataclasses import replace as _replace

    from simulator import kernels

    cat = load_gpu_catalog()
    gpu = cat["gb300"]
    p = kernels.kernel_params(gpu)
    frac = gpu.efficiency.fp4_matmul_fraction
    assert 0.3 < frac < 1.0
    assert kernels.tensor_rate_scale(gpu, "nvfp4", p) == pytest.approx(frac * p.gemm_fp8_scale)
    assert kernels.tensor_rate_scale(gpu, "fp8", p) == p.gemm_fp8_scale
    ideal = _replace(gpu, efficiency=_replace(gpu.efficiency, fp4_matmul_fraction=1.0))
    # latency-bound: one tile of a few k-steps -- the fraction moves it by far less than 1/frac
    tiny = (kernels.gemm_time_s(gpu, "nvfp4", 64, 64, 64), kernels.gemm_time_s(ideal, "nvfp4", 64, 64, 64))
    assert tiny[0] / tiny[1] < 1.05 < 1 / frac
    # the saturating reference of the activity law is the chip's power ceiling, not the pipe's
    assert kernels.saturated_gemm_flop_per_s(gpu, "nvfp4") == kernels.saturated_gemm_flop_per_s(
        ideal, "nvfp4"
    )
    # B300 shares GB300's SM103 silicon (as GB200 shares B200's): the same pipe fraction
    assert cat["b300"].efficiency.fp4_matmul_fraction == cat["gb300"].efficiency.fp4_matmul_fraction


@pytest.mark.parametrize(("m", "n", "k", "tflops"), [(8192, 8192, 8192, 5239.0), (4096, 4096, 7168, 3939.0)])
def test_b200_fp4_fraction_reproduces_published_gemms(m: int, n: int, k: int, tflops: float) -> None:
    """SM100's fp4_matmul_fraction comes from cuBLAS block-scaled FP4 GEMMs measured on B200
    (deepseek-ai/DeepGEMM PR #348, cublasTest 13.3): the mean of the pipe fractions the two
    figures imply (0.653, 0.599) puts each within 5% of the kernel model, and GB200 (same SM100
    silicon) uses the same value."""
    from simulator import kernels

    cat = load_gpu_catalog()
    gpu = cat["b200"]
    t = kernels.gemm_time_s(gpu, "nvfp4", m, n, k)
    assert 2.0 * m * n * k / t / 1e12 == pytest.approx(tflops, rel=0.05)
    assert cat["gb200"].efficiency.fp4_matmul_fraction == gpu.efficiency.fp4_matmul_fraction


@pytest.mark.parametrize(("base", "ultra"), [("b200", "b300"), ("gb200", "gb300")])
def test_blackwell_ultra_nvfp4_gemm_never_slower(base: str, ultra: str) -> None:
    """SM103 at its pipe fraction and 1.5x FP4 peak is no slower than SM100 on any GEMM shape, a
    latency-bound one included (the whole-time division made small GEMMs 22% slower)."""
    from simulator import kernels

    cat = load_gpu_catalog()
    sizes = (64, 256, 1024, 4096, 16384)
    for m in sizes:
        for n in sizes:
            for k in sizes:
                slow = kernels.gemm_time_s(cat[base], "nvfp4", m, n, k)
                assert kernels.gemm_time_s(cat[ultra], "nvfp4", m, n, k) <= slow * (1 + 1e-12), (m, n, k)


# ----------------------------------------------------------------------------- memory (moe-2)
# DeepSeek-V3 as its report (arXiv 2412.19437 §3.1-3.2) trains it: 2048 H800, PP 16 (DualPipe),
# EP 64 over 8 nodes, no TP, ZeRO-1 data parallelism (dp = 2048/16 = 128, expert-DP 128/64 = 2).
DSV3_H800 = (
    {"preset": "deepseek-v3", "seq_len": 4096},
    {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "schedule": "dualpipe", "num_gpus": 2048, "global_batch": 15360},
)


def test_expert_weights_per_rank_are_total_over_ep_times_etp() -> None:
    """Per rank, the routed experts of one MoE layer are E·mlp(f_e)/(ep·etp) parameters, and
    ZeRO-1 shards their optimizer state over the expert-DP group tp·dp·cp/(ep·etp) only."""
    model, par = DSV3_H800
    scn = _scn(model, dict(par), gpu="h800", precision={"dtype": "fp8"})
    m, p = scn.model, scn.parallel
    per_layer_expert = m.num_experts * 3 * m.hidden * m.expert_ffn  # gated: gate, up, down
    chunks = chunk_layers(p.schedule, m.layers, p.pp, p.vp)[5]  # a middle rank: MoE layers only
    n_moe = sum(len(c) for c in chunks)
    held = stage_params_of_chunks(m, p, 5, chunks)
    assert held.expert == pytest.approx(n_moe * per_layer_expert / (p.ep * p.expert_tp), rel=1e-12)
    for etp in (2, 4):
        p2 = replace(p, etp=etp)
        part = F.layer_params_per_rank(m, p2, moe=True)
        assert part.expert == pytest.approx(per_layer_expert / (p.ep * etp), rel=1e-12)
    # optimizer: dense state over dp = 128, expert state over expert-DP = 2 (12 B per parameter)
    assert p.expert_dp == 2
    mem = memory_footprint(scn)
    parts = mem.parts_bytes
    worst = max(range(p.pp), key=mem.stage_peak_bytes.__getitem__)
    held = stage_params_of_chunks(m, p, worst, chunk_layers(p.schedule, m.layers, p.pp, p.vp)[worst])
    assert parts["optimizer"] == pytest.approx(12 * (held.dense / 128 + held.expert / 2), rel=1e-9)
    # weights (16-bit + fp8 cache) and fp32 grads unsharded under ZeRO-1
    # (the worst rank holds the embedding, the output layer and the final norm: no TE modules,
    # 16-bit only)
    assert held.unquantized == 2 * m.vocab * m.hidden + m.hidden
    assert parts["weights"] == pytest.approx(3 * (held.dense + held.expert) - held.unquantized, rel=1e-9)
    assert parts["grads"] == pytest.approx(4 * (held.dense + held.expert), rel=1e-9)


def test_moe_activations_scale_with_top_k_not_num_experts() -> None:
    """Balanced routing: a rank's experts see T·top_k token copies (T·top_k/E per expert, E/ep
    experts), so the MoE layer's activations do not depend on E or ep; they grow with top_k."""
    from simulator.memory import layer_activation_bytes

    base = model_preset("qwen3-30b-a3b")
    more_experts = replace(base, num_experts=2 * base.num_experts)
    a = layer_activation_bytes(base, 1, moe=True).stored
    assert layer_activation_bytes(more_experts, 1, moe=True).stored == pytest.approx(a)
    k2 = replace(base, top_k=2 * base.top_k)
    s, h, f = base.seq_len, base.hidden, base.expert_ffn
    # per extra copy: dispatched input 2h, gate/up 2f + 2f, SwiGLU product 2f (the fc2 output is
    # not kept: Megatron-Core applies the routing probabilities inside the activation)
    extra = base.top_k * s * (2 * h + 6 * f)
    assert layer_activation_bytes(k2, 1, moe=True).stored - a == pytest.approx(extra)
    # fp8: the dispatched tokens (expert fc1 input) are kept as their fp8 cast, like every linear input
    bf16 = layer_activation_bytes(base, 1, moe=True)
    fp8 = layer_activation_bytes(base, 1, moe=True, fp8=True)
    # the QKV input and the experts' fc2 inputs 2 -> 1 byte; the MLP input stays 16-bit (the
    # router keeps it; no shared expert here); the attention output is kept twice in fp8 (16-bit
    # by the fused core, 1-byte cast by the output projection: 2 -> 2 + 1 bytes)
    dense_fp8_saving = s * (h - base.q_dim + f * base.top_k)
    assert bf16.stored - fp8.stored == pytest.approx(dense_fp8_saving + s * base.top_k * h)
    # etp: the expert-TP group gathers its token copies (etp x), each expert matrix 1/etp wide
    e1 = layer_activation_bytes(base, 1, tp=2, sequence_parallel=True, moe=True, etp=1).stored
    e2 = layer_activation_bytes(base, 1, tp=2, sequence_parallel=True, moe=True, etp=2).stored
    assert e2 - e1 == pytest.approx(2 * base.top_k * h * s / 2)  # the gathered copies, 16-bit


def test_mla_activations_use_v_head_dim_and_latents() -> None:
    """MLA stores Q, K at heads·(nope + rope), V and the output projection's input at
    heads·v_head_dim, and the latents c_Q, c_KV (RMSNorm input 16-bit + up-projection input)."""
    from simulator.memory import layer_activation_bytes

    m = model_preset("deepseek-v3")
    mla = m.mla
    assert mla is not None, "the deepseek-v3 preset has multi-head latent attention"
    s, h = m.seq_len, m.hidden
    got = layer_activation_bytes(m, 1, tp=1).stored
    qk = m.heads * mla.qk_head_dim
    v = m.heads * mla.v_head_dim
    attention = 2 * (qk + qk + v) + 2 * v + 4 * (mla.q_lora_rank + mla.kv_lora_rank)
    replicated = 8 * h  # the paper's 10h without its two dropout masks (DeepSeek-V3: no dropout)
    assert m.dropout == 0.0
    mlp = 6 * m.ffn  # gate 2f + up 2f + product 2f
    core = 4 * m.heads  # FlashAttention's fp32 log-sum-exp
    assert got == pytest.approx(s * (replicated + attention + mlp + core))


def test_deepseek_v3_report_layout_model_state_fits_80gb() -> None:
    """The report's layout (PP 16 DualPipe with two copies of the parameters, EP 64, ZeRO-1):
    weights + fp32 grads + optimizer per GPU stay well inside 80 GB (the fullest device, which
    holds the embedding, the output layer and the MTP module, ~43 GiB; the others ~29 GiB). The
    report's recomputes (RMSNorm, MLA up-projections, SwiGLU output: `recompute_modules`) and
    BF16 moments cut the peak by over a quarter; its FP8 caching of activations is not
    representable, so the layout still does not fit (docs/limits.md); full recompute fits."""
    model, par = DSV3_H800
    scn = _scn(model, dict(par), gpu="h800", precision={"dtype": "fp8"})
    parts = memory_footprint(scn).parts_bytes
    state = parts["weights"] + parts["grads"] + parts["optimizer"]
    assert 25 * 2**30 < state < 45 * 2**30
    recipe = _scn(
        model,
        {**par, "recompute": "selective", "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"]},
        gpu="h800",
        precision={"dtype": "fp8"},
        memory={"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
    )
    assert memory_footprint(recipe).peak_bytes < 0.75 * memory_footprint(scn).peak_bytes
    full = _scn(model, {**par, "recompute": "full"}, gpu="h800", precision={"dtype": "fp8"})
    assert memory_footprint(full).fits


def test_nvfp4_gb300_is_never_slower_than_b300() -> None:
    """GB300 has B300's SM103 silicon with higher peaks and board power: with one recipe
    efficiency for the silicon, an NVFP4 step on GB300 is never slower (the fuzz audit found it
    up to 25% slower while B300 kept an uncalibrated 1.0)."""

    def step(gpu: str) -> float:
        scn = scenario_from_dict(
            {
                "model": {"preset": "llama3-8b", "seq_len": 4096},
                "cluster": {"topology": "dgx-b200", "gpu": gpu, "num_gpus": 8},
                "parallel": {"tp": 2, "global_batch": 16},
                "precision": {"dtype": "nvfp4"},
            }
        )
        return simulate(scn).report.step_time_s

    assert step("gb300") <= step("b300")


@pytest.mark.parametrize(("num_gpus", "ep"), [(8, 8), (16, 16)])
def test_hybridep_builds_its_routing_metadata_before_each_forward_dispatch(num_gpus: int, ep: int) -> None:
    """DeepEP hybrid-ep @34152ae2 HybridEPBuffer::metadata_preprocessing (HYBRIDEP_METADATA_NOTE):
    before a forward dispatch every rank all-gathers the EP group's [tokens, experts] boolean routing
    maps and runs three kernels over them; the backward reuses the handle. Closed form: the EP
    all-gather of ep*T*E bytes plus the kernels' bytes (the map read, an int32 per (token, rank), the
    local-expert map written and read, an int32 row id per (token, local expert)); placed before
    the dispatch (the blocking dispatch's host sync waits for it); no other dispatcher has it."""
    par = {"ep": ep, "num_gpus": num_gpus, "global_batch": 64, "micro_batch": 2}
    scn = _scn(dict(QWEN30), dict(par), kernels={"moe_dispatcher": "hybridep"})
    coster = _Coster(scn, default_comm_model(scn))
    fwd, b_in, b_w, _, _ = coster.layer(True)
    names = [s.name for s in fwd.parts]
    meta = [s for s in fwd.parts if s.name == "hybridep routing metadata"]
    assert len(meta) == 1 and names.index("hybridep routing metadata") < names.index("ep dispatch")
    assert not [s for s in b_in.parts + b_w.parts if "metadata" in s.name]
    m = scn.model
    T, E, local = 2 * m.seq_len, m.num_experts, m.num_experts // ep
    rows = ep * T
    gathered = float(rows * E)
    kernel_bytes = gathered + 4.0 * rows + 2.0 * rows * local + 4.0 * rows * local
    want = coster.coll("allgather", "ep", gathered) + memory_op_time_s(coster.device, kernel_bytes, 3)
    assert meta[0].category == "ep_comm"
    assert meta[0].message_bytes == pytest.approx(gathered)
    assert meta[0].duration_s == pytest.approx(want, rel=1e-12)
    for other in ("alltoall", "deepep"):
        o = _Coster(_scn(dict(QWEN30), dict(par), kernels={"moe_dispatcher": other}), default_comm_model(scn))
        assert "hybridep routing metadata" not in [s.name for s in o.layer(True)[0].parts]
    more = _scn(dict(QWEN30), {**par, "micro_batch": 4}, kernels={"moe_dispatcher": "hybridep"})
    more_meta = [s for s in _moe_segments(more)["hybridep routing metadata"]]
    assert more_meta[0].duration_s > meta[0].duration_s


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "hybridep"])
def test_flex_dispatchers_permute_the_received_tokens(dispatcher: str) -> None:
    """FLEX_PERMUTE_NOTE: the all-to-all dispatcher permutes its own tokens before sending (read 1,
    write top_k rows per token); HybridEP's standalone permute reads the tokens its NVLink buffer
    received, one per (token, destination rank), and DeepEP's recv_x likewise (read rank hits,
    write top_k). Closed form on the forward permute and unpermute bytes; with one EP rank the flex
    dispatchers read each token once, like the all-to-all one."""
    par = {"ep": 8, "num_gpus": 8, "global_batch": 64, "micro_batch": 1}
    scn = _scn(dict(QWEN30), dict(par), kernels={"moe_dispatcher": dispatcher})
    m = scn.model
    a = Device(scn.gpu, scn.dtype).activation_bytes
    hits = 1.0 if dispatcher == "alltoall" else expected_groups_hit(m.num_experts, 8, m.top_k)
    assert hits == 1.0 or 5.0 < hits < 5.5  # 128 experts, top-8, 8 ranks: 5.34 ranks per token
    segs = _moe_segments(scn)
    for name in ("moe permute", "moe unpermute"):
        assert segs[name][0].message_bytes == pytest.approx((hits + m.top_k) * m.seq_len * m.hidden * a)
    one = _moe_segments(_scn(dict(QWEN30), {**par, "ep": 1}, kernels={"moe_dispatcher": dispatcher}))
    assert one["moe permute"][0].message_bytes == pytest.approx((1 + m.top_k) * m.seq_len * m.hidden * a)


def test_hf_import_deepseek_v2_greedy_routing_has_no_group_limit(tmp_path: Path) -> None:
    """DeepSeek-V2's MoEGate limits groups only under topk_method group_limited_greedy; "greedy"
    (DeepSeek-V2-Lite's) is a top-k over all experts: n_group / topk_group do not limit it."""
    limited = _edited_config(
        tmp_path, "deepseek_v3.json", model_type="deepseek_v2", topk_method="group_limited_greedy"
    )
    assert model_from_table({"hf_config": limited, "seq_len": 4096}, tmp_path).max_nodes_per_token == 4
    greedy = _edited_config(tmp_path, "deepseek_v3.json", model_type="deepseek_v2", topk_method="greedy")
    assert model_from_table({"hf_config": greedy, "seq_len": 4096}, tmp_path).max_nodes_per_token == 0
