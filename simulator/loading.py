"""TOML scenario and topology files -> frozen specs (SPEC §1-2).

This is the one place where human units in files (GB/s, Gb/s, µs, ms, TFLOP/s, GiB)
become SI. Unknown keys are errors naming the key; every error names the file.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path, PurePath
from typing import Any

from . import specs, units
from .errors import ConfigError
from .names import canonical, did_you_mean
from .resources import catalog_file, data_dir, scenario_names, topology_names
from .schedules import num_virtual_stages
from .specs import (
    DEEPSPEED_STACK,
    DEFAULT_ATTENTION,
    MAX_GPUS,
    DataloaderSpec,
    GPUEfficiency,
    GPUSpec,
    InterNodeSpec,
    IntraNodeSpec,
    KernelOptions,
    MemoryOptions,
    MLASpec,
    ModelSpec,
    ParallelConfig,
    Scenario,
    TopologySpec,
    VariabilitySpec,
    residuals_stack,
)

MAX_FILE_BYTES = 16 * 2**20

MODEL_KEYS = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "gated_mlp",
    "head_dim",
    "tied_embeddings",
    "position_embeddings",
    "activation",
    "linear_bias",
    "qk_norm",
    "rope_mscale",
    "attention_sinks",
    "mtp_layers",
    "dropout",
    "sliding_window",
    "attention_chunk_size",
    "layer_types",
)
MOE_KEYS = (
    "num_experts",
    "top_k",
    "expert_ffn_hidden",
    "shared_expert_ffn_hidden",
    "layer_interval",
    "first_dense_layers",
    "routing",
    "load_imbalance",
    "max_nodes_per_token",
    "dispatch_dtype",
)
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
PARALLEL_KEYS = tuple(f.name for f in fields(ParallelConfig))
SWEEP_KEYS = tuple(k for k in PARALLEL_KEYS if k not in ("recompute_modules", "pipeline_layout")) + (
    "num_gpus",
)  # no list values
INTRA_KEYS = ("fabric", "link_GBps_per_direction", "latency_us", "nvls")
INTER_KEYS = (
    "fabric",
    "nics_per_node",
    "nic_Gbps",
    "latency_us",
    "nodes_per_leaf",
    "oversubscription",
    "tiers",
    "nodes_per_pod",
    "pod_oversubscription",
    "switch_radix",
    "planes",
)
TOPOLOGY_KEYS = ("name", "gpu", "gpus_per_node", "rank_order", "intra_node", "inter_node")


# ----------------------------------------------------------------------------- files
def path_kind(path: Path) -> str:
    """'file', 'dir', 'missing' or 'other' -- without raising on odd paths.

    `Path.exists()` raises OSError for names the OS rejects (ENAMETOOLONG, EACCES on a
    parent folder); a user's typo must still end in one clear line.
    """
    try:
        if path.is_dir():
            return "dir"
        if path.is_file():
            return "file"
        return "other" if path.exists() else "missing"
    except (OSError, ValueError):
        return "missing"


def check_regular_file(path: Path, kind: str, key: str | None = None) -> None:
    """Refuse, before opening it, anything but a regular file: opening a named pipe blocks
    until a writer appears and a socket or a terminal never ends (issue 18)."""
    name = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError("no such file", key=key, file=name) from None
    except (OSError, ValueError) as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot read: {detail}", key=key, file=name) from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"is a directory, expected a {kind} file", key=key, file=name)
    if not stat.S_ISREG(st.st_mode):
        what = (
            "a named pipe"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device or terminal"
        )
        raise ConfigError(f"is {what}, not a regular file; expected a {kind} file", key=key, file=name)


def read_user_text(
    path: str | Path, kind: str, max_bytes: int = MAX_FILE_BYTES, encoding: str = "utf-8"
) -> str:
    """The text of a user's file (`kind`: "TOML", "CSV"); every failure is a ConfigError naming
    the file: missing, a directory, unreadable, too large, empty, binary or not UTF-8."""
    p = Path(path)
    name = str(path)
    check_regular_file(p, kind)
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)  # bounded: /dev/zero must not hang
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if len(raw) > max_bytes:
        raise ConfigError(f"file too large (over {max_bytes} bytes) for a {kind} file", file=name)
    if not raw.strip():
        raise ConfigError(f"file is empty, expected {kind}", file=name)
    if b"\x00" in raw:
        raise ConfigError(f"binary file, expected {kind} text", file=name)
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        raise ConfigError(f"not UTF-8 text, expected {kind}", file=name) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; every failure is a ConfigError naming the file."""
    text = read_user_text(path, "TOML")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"malformed TOML: {exc}", file=str(path)) from None
    except RecursionError:
        raise ConfigError("malformed TOML: nested too deeply", file=str(path)) from None
    _check_depth(data, str(path))
    return data


MAX_TOML_DEPTH = 16  # the deepest real key is cluster.inter_node.<key> (3); lists of tables add a few


def _check_depth(data: Mapping[str, Any], file: str) -> None:
    """Refuse absurdly nested tables/arrays (a 3,000-deep dotted key) before anything walks or
    prints them recursively; the error names the key path's start."""
    stack: list[tuple[object, tuple[str, ...]]] = [(data, ())]
    while stack:
        node, where = stack.pop()
        if len(where) > MAX_TOML_DEPTH:
            key = ".".join(where[:4]) + "..."
            raise ConfigError(f"nested more than {MAX_TOML_DEPTH} levels deep", key=key, file=file)
        if isinstance(node, dict):
            stack.extend((v, (*where, str(k))) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*where, f"[{i}]")) for i, v in enumerate(node))


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], section: str) -> None:
    for key in table:
        if key not in allowed:
            name = str(key)  # a Python API dict may have non-string keys (TOML's are strings)
            where = f"{section}.{name}" if section else name
            what = "section" if isinstance(table[key], dict) else "key"
            hint = did_you_mean(name, allowed)
            raise ConfigError(
                f"unknown {what}{hint}; allowed here: {', '.join(allowed)} (docs/reference.md)",
                key=where,
                allowed=tuple(allowed),
            )


def _table(data: Mapping[str, Any], key: str, section: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        where = f"{section}.{key}" if section else key
        raise ConfigError(f"must be a table ([{where}]), got {value!r}", key=where)
    return value


def _num(table: Mapping[str, Any], key: str, section: str, default: float | None = None) -> float:
    where = f"{section}.{key}" if section else key
    if key not in table:
        if default is None:
            raise ConfigError("missing required key", key=where)
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, got {value!r}", key=where)
    if not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", key=where)
    if value < 0:
        raise ConfigError(f"must be >= 0, got {value!r}", key=where)
    return float(value)


def _required(table: Mapping[str, Any], key: str, section: str) -> Any:
    if key not in table:
        raise ConfigError("missing required key", key=f"{section}.{key}" if section else key)
    return table[key]


# ----------------------------------------------------------------------------- catalogs
def _file_version(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(version: tuple[str, int, int]) -> dict[str, Any]:
    return read_toml(version[0])


def read_catalog(name: str) -> dict[str, Any]:
    """A catalog file of the package, parsed once per version of the file (a validate run
    reads the catalogs for each of its hundreds of cases); a copy the caller may change."""
    return copy.deepcopy(_parsed(_file_version(catalog_file(name))))


def load_gpu_catalog() -> dict[str, GPUSpec]:
    """The GPU catalog (simulator/catalog/gpus.toml) with calibrated efficiencies applied."""
    return dict(
        _gpu_catalog(
            _file_version(catalog_file("gpus.toml")),
            _file_version(catalog_file("efficiency.toml")),
            _file_version(catalog_file("recipes.toml")),
        )
    )


@functools.lru_cache(maxsize=4)
def _gpu_catalog(
    gpus_version: tuple[str, int, int],
    eff_version: tuple[str, int, int],
    recipes_version: tuple[str, int, int],
) -> dict[str, GPUSpec]:
    gpus = _parsed(gpus_version)
    eff = _parsed(eff_version)
    recipes = _parsed(recipes_version)  # precision-recipe efficiencies (issue 13)
    default_eff = eff.get("default", {})
    out = {}
    for name, t in gpus.items():
        params = {**default_eff, **eff.get(name, {}), **recipes.get(name, {})}
        params = {k: v for k, v in params.items() if k in {f.name for f in fields(GPUEfficiency)}}
        out[name] = GPUSpec(
            name=name,
            peak_bf16_flop_per_s=units.tflops_to_flop_per_s(t["peak_bf16_tflops"]),
            peak_fp16_flop_per_s=units.tflops_to_flop_per_s(t["peak_fp16_tflops"]),
            peak_fp8_flop_per_s=units.tflops_to_flop_per_s(t["peak_fp8_tflops"]),
            hbm_bytes=units.gib_to_bytes(t["hbm_gib"]),
            hbm_bandwidth_bytes_per_s=t["hbm_TBps"] * units.TERA,
            efficiency=GPUEfficiency(**params),
            num_sms=int(t.get("num_sms", 108)),
            source=t.get("description", name),
            peak_fp4_flop_per_s=units.tflops_to_flop_per_s(t.get("peak_fp4_tflops", 0.0)),
            board_power_w=float(t.get("board_power_w", 0.0)),
            node_overhead_w_per_gpu=float(t.get("node_overhead_w_per_gpu", 0.0)),
            host_link_bytes_per_s=units.gBps_to_bytes_per_s(float(t.get("host_link_GBps", 0.0))),
            nvlink_bytes_per_s=units.gBps_to_bytes_per_s(float(t.get("nvlink_GBps_per_direction", 0.0))),
        )
    return out


def gpu_by_name(name: object, key: str = "gpu") -> GPUSpec:
    """A GPU of the catalog by name, in any case or a common alias (`H100` = `h100-sxm`)."""
    catalog = load_gpu_catalog()
    found = canonical(name, catalog)
    if found is None:
        raise ConfigError(
            f"unknown GPU {name!r}{did_you_mean(name, catalog)}; known: {', '.join(catalog)}", key=key
        )
    return catalog[found]


def load_model_presets() -> dict[str, dict[str, Any]]:
    return read_catalog("models.toml")


def model_preset(name: str) -> ModelSpec:
    return model_from_table({"preset": name}, base_dir=Path.cwd())


# ----------------------------------------------------------------------------- model
# config.json keys that change the architecture in ways the simulator does not model. Each is an
# error naming the file and key unless `[model] allow_unmodeled` lists it (then one warning line).
UNMODELED_HF_KEYS = {
    "hybrid_override_pattern": "hybrid Mamba/attention layer pattern (Nemotron-H)",
    "layers_block_type": "hybrid layer types (Mamba/attention)",
    "attn_layer_period": "hybrid attention/Mamba layer period (Jamba)",
    "attn_layer_offset": "hybrid attention/Mamba layer offset (Jamba)",
    "expert_layer_period": "expert layer period (Jamba)",
    "expert_layer_offset": "expert layer offset (Jamba)",
    "conv_kernel": "Mamba convolution",
    "time_step_min": "Mamba time step",
    "time_step_max": "Mamba time step",
    "time_step_limit": "Mamba time step",
    "time_step_rank": "Mamba time step",
    "vision_config": "vision encoder (only the text model is simulated)",
    "audio_config": "audio encoder (only the text model is simulated)",
    "layer_types": "per-layer attention types (sliding-window or linear attention layers)",
    "sliding_window": "sliding-window attention (shorter than seq_len)",
    "attention_chunk_size": "chunked local attention (shorter than seq_len)",
    "no_rope_layers": "NoPE layers (no RoPE on them; RoPE costed on every layer)",
    "alibi": "ALiBi position biases (costed as RoPE: a rotation of q and k, no attention bias)",
    "use_parallel_residual": "parallel attention + MLP (costed as the sequential block: two TP reductions, not one)",
    "parallel_attn": "parallel attention + MLP (costed as the sequential block: two TP reductions, not one)",
    "mlp_only_layers": "dense MLP layers that are not the leading ones",
}
UNMODELED_HF_PREFIXES = ("mamba", "ssm_", "linear_attn", "linear_conv")


def _read_json_object(path: Path) -> dict[str, Any]:
    name = str(path)
    check_regular_file(path, "config.json", key="model.hf_config")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError("file too large for a config.json", key="model.hf_config", file=name)
        cfg = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"not a readable JSON config: {exc}", key="model.hf_config", file=name) from None
    if not isinstance(cfg, dict):
        raise ConfigError("expected a JSON object", key="model.hf_config", file=name)
    return cfg


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unmodeled_keys(cfg: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, str]:
    """Architecture-bearing keys present with a non-trivial value -> why they matter.

    `sliding_window` / `attention_chunk_size` are checked against seq_len later (a window no
    shorter than the sequence is exact); here they are reported unless null or switched off.
    """
    found: dict[str, str] = {}
    for key, value in list(cfg.items()) + [(k, v) for k, v in top.items() if k.endswith("_config")]:
        if value is None or value is False or value == [] or value == {}:
            continue
        if key == "vision_config" or key == "audio_config":
            found[key] = UNMODELED_HF_KEYS[key]
        elif key == "layer_types":
            if isinstance(value, list) and all(v == "full_attention" for v in value):
                continue
            found[key] = UNMODELED_HF_KEYS[key]  # unless every window covers seq_len (_layer_windows)
        elif key == "sliding_window" and cfg.get("use_sliding_window") is False:
            continue
        elif key == "no_rope_layers" and isinstance(value, list) and all(v == 1 for v in value):
            continue  # 1 = RoPE on that layer (HF Llama 4 / SmolLM3): every layer rotates
        elif key in UNMODELED_HF_KEYS:
            found[key] = UNMODELED_HF_KEYS[key]
        elif key.startswith(UNMODELED_HF_PREFIXES):
            found[key] = "Mamba / linear-attention layers"
    return found


def yarn_attention_factor(rope: Mapping[str, Any]) -> float:
    """The factor YaRN multiplies RoPE's cos/sin by (1.0 for any other scaling), as Megatron-Core
    computes it (megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py
    `_yarn_get_concentration_factor`; HF `_compute_yarn_parameters` gives the same): 0.1·ln(factor)
    + 1 unless both mscale and mscale_all_dim are given, then the ratio of the two such terms."""
    if str(rope.get("rope_type") or rope.get("type") or "").lower() != "yarn":
        return 1.0
    factor = rope.get("factor")
    given = rope.get("attention_factor")
    for key, value in (("factor", factor), ("attention_factor", given)):
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            # transformers' _compute_yarn_parameters fails on it (math.log of a string); read as
            # "no YaRN" it would drop the attention factor without a word
            raise ConfigError(f"YaRN {key} must be a number, got {value!r}", key="rope_scaling")
    if isinstance(given, int | float) and not isinstance(given, bool):
        return float(given)
    if not isinstance(factor, int | float) or isinstance(factor, bool) or factor <= 1:
        return 1.0

    def term(m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0

    mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
    if isinstance(mscale, int | float) and isinstance(mscale_all_dim, int | float):
        return term(float(mscale)) / term(float(mscale_all_dim))
    return term(1.0)


def hf_config_fields(path: Path) -> dict[str, Any]:
    """Model fields from a Hugging Face config.json, offline (SPEC §1, issue 13).

    Understood exactly: llama, mistral, qwen2/qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v2/v3,
    kimi_k2 (MLA, shared experts, dense first layers, MTP), llama4 (interleaved MoE/dense layers
    with different FFN widths, shared expert) and gpt_oss. Keys that change the architecture in a
    way the simulator does not model come back under "_unmodeled" (key -> why) for the caller.
    """
    name = str(path)
    top = _read_json_object(path)
    cfg = top.get("text_config", top) if isinstance(top.get("text_config"), dict) else top

    def get(*keys: str) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        return None

    # widths and counts that the code below would otherwise read as "absent" when 0 or not an
    # integer (a shared expert of "x", an interleave step of 0 = every layer): refused by key
    for key, minimum in HF_INT_KEYS.items():
        value = get(key)
        if value is not None and (not _is_int(value) or value < minimum):
            raise ConfigError(f"must be an integer >= {minimum}, got {value!r}", key=key, file=name)
    # flags and names read below by truth or by text: "false" would read as true, ["silu"] as no
    # known activation (transformers itself fails on either)
    for table in (cfg, top):
        for key, kind in HF_TYPED_KEYS.items():
            value = table.get(key)
            if value is not None and not isinstance(value, kind):
                what = "true or false" if kind is bool else "a string"
                raise ConfigError(f"must be {what}, got {value!r}", key=key, file=name)

    out: dict[str, Any] = {}
    mapping = {
        "layers": ("num_hidden_layers", "n_layer", "num_layers"),
        "hidden": ("hidden_size", "n_embd", "d_model"),
        "heads": ("num_attention_heads", "n_head"),
        "kv_heads": ("num_key_value_heads",),
        "ffn_hidden": ("intermediate_size", "n_inner", "ffn_hidden_size"),
        "vocab": ("vocab_size",),
        "head_dim": ("head_dim",),
    }
    for field_name, keys in mapping.items():
        value = get(*keys)
        if value is not None:
            out[field_name] = value
    for required in ("layers", "hidden", "heads", "vocab"):
        if required not in out:
            raise ConfigError(f"config.json lacks {mapping[required][0]!r}", key="model.hf_config", file=name)
    act = str(get("hidden_act", "activation_function") or "").lower()
    if act in ("relu2", "squared_relu"):  # Nemotron's relu(x)^2
        out["activation"] = "squared_relu"
    model_type = str(get("model_type") or top.get("model_type") or "").lower()
    kv_heads = _multi_query_kv_heads(cfg, model_type, name)
    if kv_heads is not None and "kv_heads" not in out:
        out["kv_heads"] = kv_heads
    # gelu_pytorch_tanh is Gemma's gated GeGLU but the plain 2-matrix MLP of GPT-BigCode (StarCoder)
    # and StarCoder2 (transformers modeling_gemma.py GemmaMLP gate/up/down_proj vs
    # modeling_gpt_bigcode.py / modeling_starcoder2.py c_fc, c_proj): the model type decides
    out["gated_mlp"] = act in ("silu", "swiglu") or model_type in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen2_moe",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
        "llama4_text",
        "gpt_oss",
    )
    # tie_word_embeddings: the text config's, else the top level's (Llama 4 keeps it there), else
    # the model class's default (transformers: PretrainedConfig ties unless the class says not)
    tied = get("tie_word_embeddings")
    if tied is None:
        tied = top.get("tie_word_embeddings")
    if tied is None:
        tied = model_type in TIED_BY_DEFAULT
    out["tied_embeddings"] = bool(tied)
    if model_type == "gpt_oss":
        # GPT-OSS: clamped gated quick-GELU (swiglu_limit) and biases on every linear layer and
        # expert (Megatron-Bridge GPTOSSBridge: add_bias_linear, activation_func_clamp_value)
        out["activation"] = "clamped_quick_geglu"
        out["linear_bias"] = True
        # its attention sinks (a learnable softmax offset per head, no config.json key: the model
        # type implies them; Megatron-Bridge GPTOSSBridge softmax_type = "learnable")
        out["attention_sinks"] = True
    elif model_type in EXACT_HF_MODEL_TYPES:
        # LlamaConfig-style attention_bias (q/k/v/o) and mlp_bias (gate/up/down), default false:
        # linear_bias is every linear layer or none, so one without the other is not modeled
        # (Qwen2's q/k/v biases have no key: fused in the GEMM and not counted, as the presets say)
        # and on MoE models biases the experts too, which these classes' experts never have
        attn_bias, mlp_bias = get("attention_bias") is True, get("mlp_bias") is True
        moe = bool(get("num_local_experts", "num_experts", "n_routed_experts"))
        if attn_bias and mlp_bias and not moe:
            out["linear_bias"] = True
        elif attn_bias or mlp_bias:
            out["_partial_bias"] = "attention_bias" if attn_bias else "mlp_bias"
    elif get("mlp_bias") is True:
        out["linear_bias"] = True
    if model_type in ("qwen3", "qwen3_moe") or get("use_qk_norm") is True:
        # per-head q_norm/k_norm (Megatron-Bridge Qwen3Bridge / Qwen3MoEBridge: qk_layernorm = True;
        # GLM-4.5's use_qk_norm, transformers Glm4MoeAttention q_norm/k_norm)
        out["qk_norm"] = True
    # --- sequence length: the scenario's; else the pre-training length the config records
    rope_value = cfg.get("rope_scaling") or cfg.get("rope_parameters")  # transformers v5 renamed it
    rope: dict[str, Any] = rope_value if isinstance(rope_value, dict) else {}
    try:
        mscale = yarn_attention_factor(rope)
    except ConfigError as err:
        raise err.with_file(name) from None
    if mscale != 1.0:
        out["rope_mscale"] = mscale
    seq = rope.get("original_max_position_embeddings") or get(
        "max_position_embeddings", "n_positions", "seq_length"
    )
    if seq is not None:
        out["_seq_len_from_config"] = seq
    # --- multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)
    if get("kv_lora_rank"):
        out["mla"] = {
            "q_lora_rank": get("q_lora_rank") or 0,
            "kv_lora_rank": get("kv_lora_rank"),
            "qk_nope_head_dim": get("qk_nope_head_dim"),
            "qk_rope_head_dim": get("qk_rope_head_dim"),
            "v_head_dim": get("v_head_dim"),
        }
        out.pop("head_dim", None)  # HF sets head_dim = qk_rope_head_dim for MLA; not a head width
    if get("num_nextn_predict_layers"):
        out["mtp_layers"] = get("num_nextn_predict_layers")
    drops = {k: get(k) for k in ("hidden_dropout", "attention_dropout", "resid_pdrop", "attn_pdrop")}
    if model_type not in EXACT_HF_MODEL_TYPES:
        drops["dropout"] = get("dropout")  # OPTConfig (and BART-style configs): the hidden dropout
    for key, value in drops.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"must be a number, got {value!r}", key=key, file=name)
    # an absent key is the config class's default (transformers configuration_*.py), not
    # ModelSpec's Megatron 0.1: HF_DROPOUT_DEFAULTS
    for key, default in HF_DROPOUT_DEFAULTS.get(model_type, {}).items():
        if drops.get(key) is None:
            drops[key] = default
    given = {k: float(d) for k, d in drops.items() if d is not None}
    if given:
        out["dropout"] = max(given.values())
        if len(set(given.values())) > 1:
            listed = ", ".join(f"{k} {v:g}" for k, v in sorted(given.items()))
            out.setdefault("_features", []).append(
                f"dropout: {listed} (one dropout for hidden and attention: {out['dropout']:g} costed "
                "for both)"
            )
    else:
        out.setdefault("_features", []).append(
            f"dropout: no dropout key and model_type {model_type or '(none)'!r}'s default is not known "
            "here: ModelSpec's 0.1 (Megatron's) is costed; set [model] dropout"
        )
    if model_type == "llama4_text":
        # Llama4TextConfig (transformers configuration_llama4.py): absent no_rope_layers / [] =
        # a NoPE layer every no_rope_layer_interval-th (default 4) layer; absent
        # attention_chunk_size = 8192 (an explicit null: no chunking)
        interval = get("no_rope_layer_interval") or 4
        layers = out["layers"]
        if not cfg.get("no_rope_layers") and _is_int(interval) and _is_int(layers):
            cfg = {**cfg, "no_rope_layers": [int((i + 1) % interval != 0) for i in range(layers)]}
        if "attention_chunk_size" not in cfg:
            cfg = {**cfg, "attention_chunk_size": 8192}
    # --- experts
    experts = get("num_local_experts", "num_experts", "n_routed_experts")
    if experts:
        # values stay as written: ModelSpec rejects non-integers with the field's key
        out["num_experts"] = experts
        out["top_k"] = get("num_experts_per_tok", "experts_per_token", "moe_top_k") or 1
        moe_ffn = get("moe_intermediate_size")
        if model_type == "llama4_text":
            # Llama 4: experts and the shared expert of intermediate_size, dense layers of
            # intermediate_size_mlp, every interleave_moe_layer_step-th layer MoE
            moe_ffn = get("intermediate_size")
            out["ffn_hidden"] = get("intermediate_size_mlp") or moe_ffn
            out["shared_expert_ffn_hidden"] = moe_ffn
            out["moe_layer_interval"] = get("interleave_moe_layer_step") or 1
        if moe_ffn:
            out["expert_ffn_hidden"] = moe_ffn
        shared = get("shared_expert_intermediate_size")
        n_shared = get("n_shared_experts")
        if shared:
            out["shared_expert_ffn_hidden"] = shared
            if model_type == "qwen2_moe":
                # Qwen2MoeSparseMoeBlock: sigmoid(shared_expert_gate(x)) * shared_expert(x)
                out.setdefault("_features", []).append(QWEN2_MOE_SHARED_GATE)
        elif n_shared and _is_int(n_shared) and _is_int(moe_ffn):
            out["shared_expert_ffn_hidden"] = n_shared * moe_ffn  # n experts of f = one of n·f
        step = get("decoder_sparse_step")  # Qwen: layer i is MoE when (i + 1) % step == 0
        if _is_int(step) and step > 1:
            out["moe_layer_interval"] = step
        freq = get("moe_layer_freq")
        if not (freq is None or freq == 1):
            # DeepSeek: layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0
            # -- the other phase of every-k-th (HF modeling_deepseek.py DeepseekV3DecoderLayer)
            raise ConfigError(
                f"MoE on every {freq!r}-th layer counted from layer 0 (DeepSeek's phase) is not "
                "modeled: only 1 (every layer past first_k_dense_replace)",
                key="moe_layer_freq",
                file=name,
            )
        if get("first_k_dense_replace"):
            out["first_dense_layers"] = get("first_k_dense_replace")
        dense_only = get("mlp_only_layers")
        if isinstance(dense_only, list) and dense_only and dense_only == list(range(len(dense_only))):
            out["first_dense_layers"] = len(dense_only)
            cfg = {k: v for k, v in cfg.items() if k != "mlp_only_layers"}
        _check_moe_layers(get("moe_layers"), out, name)
        n_group, topk_group = get("n_group"), get("topk_group")
        # DeepSeek-V2's MoEGate limits groups only under topk_method "group_limited_greedy"
        # ("greedy": a top-k over all experts, n_group / topk_group unused; modeling_deepseek.py)
        greedy = model_type == "deepseek_v2" and get("topk_method") == "greedy"
        if _is_int(n_group) and n_group > 1 and _is_int(topk_group) and not greedy:
            # DeepSeek-V3 §3.2.1: group-limited routing keeps each token within topk_group of the
            # n_group expert groups -- nodes when the EP group spans n_group nodes or fewer
            # (scenario_from_dict widens it when the groups span several nodes each)
            out["max_nodes_per_token"] = topk_group
            out["_route_groups"] = (n_group, topk_group)
    # GPT-2's n_inner = null means 4·hidden; a gated or MoE model's width is its class default,
    # which only transformers knows (Llama 11008, Mixtral 14336): refused unless the scenario
    # gives it (model_from_table)
    out["_no_mlp_width"] = "ffn_hidden" not in out and (out["gated_mlp"] or "num_experts" in out)
    hd, heads, hidden = out.get("head_dim"), out["heads"], out["hidden"]
    if all(_is_int(v) for v in (hd, heads, hidden)) and hd * heads == hidden:
        out.pop("head_dim")
    archs = top.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    out["name"] = str(
        top.get("_name_or_path") or get("_name_or_path") or arch or model_type or path.parent.name
    )
    cfg = _family_defaults(cfg, model_type, out)
    local = _hf_local_attention(cfg, model_type, out["layers"], name)
    if local is not None:  # modeled: the window keys are read, not unmodeled
        out.update(local)
        cfg = {k: v for k, v in cfg.items() if k not in HF_LOCAL_ATTENTION_KEYS}
    out["_unmodeled"] = _unmodeled_keys(cfg, top)
    if "_partial_bias" in out:
        key = out.pop("_partial_bias")
        out["_unmodeled"][key] = (
            "biases on some linear layers only (attention_bias / mlp_bias; never the experts): "
            "linear_bias biases every linear layer and expert or none, costed without them"
        )
    for key in sorted(cfg):
        if (
            MOE_KEY_PATTERN.search(key)
            and key not in MOE_KEYS_READ
            and cfg[key] not in (None, False, 0, [], {})
        ):
            out["_unmodeled"][key] = "mixture-of-experts key not read (another family's name for its experts)"
    if cfg.get("multi_query") is True and model_type not in MULTI_QUERY_FAMILIES:
        out["_unmodeled"]["multi_query"] = (
            "multi-query attention of a family not read (give [model] kv_heads)"
        )
    if model_type not in EXACT_HF_MODEL_TYPES:
        # read by the generic rules only: say so, and which keys were not read (exact or said)
        unread = sorted(
            k
            for k in cfg
            if k not in HF_READ_KEYS
            and k not in HF_METADATA_KEYS
            and k not in UNMODELED_HF_KEYS
            and not k.startswith(UNMODELED_HF_PREFIXES)
            and k not in MOE_KEYS_READ
            and k not in out["_unmodeled"]
        )
        listed = ", ".join(unread[:8]) + (f" and {len(unread) - 8} more" if len(unread) > 8 else "")
        out.setdefault("_features", []).append(
            f"model_type {model_type or '(none)'!r} as such: mfusim imports "
            f"{', '.join(EXACT_HF_MODEL_TYPES)} exactly and read this one by their common keys"
            + (f"; keys it did not read: {listed}" if unread else "")
        )
        if not act:
            out["_features"].append(NO_ACTIVATION_NOTE)
    out["_windows"] = {k: get(k) for k in ("sliding_window", "attention_chunk_size") if _is_int(get(k))}
    out["_layer_windows"] = _layer_windows(get("layer_types"))
    return out


# A generically read config.json without hidden_act/activation_function: the MLP width is read
# but not whether it is gated, so it is taken as the plain two-matrix MLP (said, and dropped when
# the scenario's [model] gated_mlp decides it).
NO_ACTIVATION_NOTE = (
    "no hidden_act/activation_function: the MLP is read as a plain two-matrix GELU MLP "
    "(set [model] gated_mlp = true for SwiGLU)"
)


# Families read by the common keys whose transformers classes fix, or default, what no key of
# config.json (or an absent one) says: learned absolute positions (GPT2Model wpe,
# GPTBigCodeModel wpe, OPTLearnedPositionalEmbedding), biases (GPT-2's Conv1D, GPT-BigCode's and
# BLOOM's nn.Linear(bias=True), OPTConfig enable_bias = True, GPTNeoXConfig attention_bias = True
# beside its always-biased MLP, FalconConfig bias = False), ALiBi (BloomModel always;
# FalconConfig alibi = False) and the parallel attention + MLP block (GPTNeoXConfig
# use_parallel_residual = True; FalconConfig parallel_attn = True, or new_decoder_architecture).
LEARNED_POSITION_TYPES = ("gpt2", "gpt_bigcode", "opt")
ALWAYS_BIASED_TYPES = ("gpt2", "gpt_bigcode", "bloom")


def _family_defaults(cfg: dict[str, Any], model_type: str, out: dict[str, Any]) -> dict[str, Any]:
    """Positions and biases into `out`; the family's defaulted architecture keys into the config
    the unmodeled check reads (alibi, use_parallel_residual, parallel_attn)."""
    if model_type in LEARNED_POSITION_TYPES:
        out["position_embeddings"] = True
    if model_type in ALWAYS_BIASED_TYPES or (
        model_type == "opt" and cfg.get("enable_bias", True) is not False
    ):
        out["linear_bias"] = True
    elif model_type == "falcon" and cfg.get("bias") is True:
        out["linear_bias"] = True
    elif model_type == "gpt_neox":
        if cfg.get("attention_bias", True) is not False:
            out["linear_bias"] = True
        else:
            out["_partial_bias"] = "attention_bias"  # its MLP keeps its biases
    if model_type == "bloom":
        cfg = {**cfg, "alibi": True}
    if model_type == "gpt_neox" and "use_parallel_residual" not in cfg:
        cfg = {**cfg, "use_parallel_residual": True}
    if model_type == "falcon":
        if "parallel_attn" not in cfg:
            cfg = {**cfg, "parallel_attn": True}
        if cfg.get("new_decoder_architecture") is True and cfg.get("parallel_attn") is False:
            cfg = {**cfg, "parallel_attn": True}  # the new decoder block is parallel either way
    return cfg


# what the qwen2_moe import says it leaves out (as the qwen2-57b-a14b / qwen1.5-moe-a2.7b presets)
QWEN2_MOE_SHARED_GATE = (
    "the shared expert's sigmoid output gate (a 1-wide projection and one multiply over the shared output)"
)


# config.json keys about experts that the import reads, or knows change no FLOP, byte or layout
# (routing math, auxiliary losses, inference hints). Any other key that names experts -- another
# family's word for the expert count, the shared expert or the MoE layers (ERNIE-4.5
# moe_num_experts, GraniteMoeShared shared_intermediate_size, Hunyuan num_shared_expert) -- would
# leave the model dense or without its shared expert: refused unless allow_unmodeled lists it.
MOE_KEY_PATTERN = re.compile(r"expert|moe|shared|router|routed|topk|top_k")
MOE_KEYS_READ = frozenset(
    {
        "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "experts_per_token",
        "moe_top_k", "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts",
        "moe_layer_freq", "moe_layers", "interleave_moe_layer_step", "n_group", "topk_group",
        # no FLOP, byte or layout: routing math, auxiliary losses, inference hints
        "norm_topk_prob", "output_router_logits", "routed_scaling_factor", "router_aux_loss_coef",
        "router_jitter_noise", "router_z_loss_coef", "topk_method", "moe_router_bias_update_rate",
        "router_bias", "use_routing_bias",
    }
)  # fmt: skip
MULTI_QUERY_FAMILIES = ("gpt_bigcode", "falcon")  # model types whose multi_query is read


def _multi_query_kv_heads(cfg: Mapping[str, Any], model_type: str, file: str) -> int | None:
    """Key/value heads of the families that say them without num_key_value_heads, as their
    transformers classes read the config (None: not one of them). GPT-BigCode (StarCoder):
    `multi_query` (default true) = one K/V head (configuration_gpt_bigcode.py, GPTBigCodeAttention
    kv_heads = 1 if multi_query else num_heads). Falcon: `num_kv_heads` (default num_attention_heads)
    with new_decoder_architecture or without multi_query, else one (FalconAttention.num_kv_heads;
    FalconConfig multi_query defaults to true). In any other family `multi_query` is an unmodeled
    key (_unmodeled_keys): its meaning there is not known."""
    mq = cfg.get("multi_query")
    if mq is not None and not isinstance(mq, bool):
        raise ConfigError(f"must be true or false, got {mq!r}", key="multi_query", file=file)
    if model_type == "gpt_bigcode":
        return 1 if mq is not False else None
    if model_type == "falcon":
        new_arch = cfg.get("new_decoder_architecture")
        if new_arch is not None and not isinstance(new_arch, bool):
            raise ConfigError(
                f"must be true or false, got {new_arch!r}", key="new_decoder_architecture", file=file
            )
        if new_arch or mq is False:
            kv = cfg.get("num_kv_heads")
            if kv is not None and (not _is_int(kv) or kv < 1):
                raise ConfigError(f"must be an integer >= 1, got {kv!r}", key="num_kv_heads", file=file)
            return kv
        return 1
    return None


def _check_moe_layers(moe_layers: object, out: Mapping[str, Any], file: str) -> None:
    """An explicit list of MoE layers (HF Llama 4 `moe_layers`) must be the layers the simulator
    makes MoE from first_dense_layers and moe_layer_interval (ModelSpec.is_moe_layer)."""
    if moe_layers is None:
        return
    layers, first = out["layers"], out.get("first_dense_layers", 0)
    k = out.get("moe_layer_interval", 1)
    if not (_is_int(layers) and _is_int(first) and _is_int(k) and k > 0):
        return  # ModelSpec reports the bad value itself
    simulated = [i for i in range(layers) if i >= first and i % k == k - 1]
    if moe_layers != simulated:
        raise ConfigError(
            f"the listed MoE layers are not every {k}-th layer past the first {first} "
            f"({simulated[:4]}...: the only layouts the simulator models)",
            key="moe_layers",
            file=file,
        )


# transformers model types hf_config_fields reads exactly (issue 13); any other is read by the
# same keys and says so, naming the keys it did not read
EXACT_HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "llama4_text",
    "gpt_oss",
)
# config.json keys hf_config_fields reads (for the "did not read" list of other model types)
HF_READ_KEYS = frozenset(
    {
        "num_hidden_layers", "n_layer", "num_layers", "hidden_size", "n_embd", "d_model",
        "num_attention_heads", "n_head", "num_key_value_heads", "intermediate_size", "n_inner",
        "ffn_hidden_size", "vocab_size", "head_dim", "hidden_act", "activation_function",
        "model_type", "tie_word_embeddings", "mlp_bias", "use_qk_norm", "rope_scaling",
        "rope_parameters", "max_position_embeddings", "n_positions", "seq_length", "kv_lora_rank",
        "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "num_nextn_predict_layers", "hidden_dropout", "attention_dropout", "resid_pdrop",
        "attn_pdrop", "num_local_experts", "num_experts", "n_routed_experts",
        "num_experts_per_tok", "experts_per_token", "moe_top_k", "moe_intermediate_size",
        "intermediate_size_mlp", "interleave_moe_layer_step", "shared_expert_intermediate_size",
        "n_shared_experts", "decoder_sparse_step", "moe_layer_freq", "first_k_dense_replace",
        "moe_layers", "n_group", "topk_group", "architectures", "_name_or_path",
        "use_sliding_window", "text_config", "multi_query", "num_kv_heads",
        "new_decoder_architecture", "no_rope_layer_interval", "dropout", "enable_bias", "bias",
    }
)  # fmt: skip
# config.json keys that do not change what a training step computes (ids, init, numerics,
# inference and routing-loss settings, rope base frequency)
HF_METADATA_KEYS = frozenset(
    {
        "torch_dtype", "dtype", "transformers_version", "bos_token_id", "eos_token_id",
        "pad_token_id", "initializer_range", "rms_norm_eps", "layer_norm_eps",
        "layer_norm_epsilon", "norm_eps", "rope_theta", "use_cache", "quantization_config",
        "auto_map", "router_aux_loss_coef", "aux_loss_alpha", "output_router_logits",
        "norm_topk_prob", "scoring_func", "topk_method", "routed_scaling_factor", "seq_aux",
        "ep_size", "pretraining_tp", "max_window_layers", "router_z_loss_coef",
        "router_jitter_noise", "id2label", "label2id", "is_decoder", "return_dict",
        "use_return_dict", "output_attentions", "output_hidden_states", "task_specific_params",
        "embd_pdrop", "summary_type", "summary_use_proj", "summary_activation",
        "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
        "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
    }
)  # fmt: skip

# config.json keys whose value, when given, must be an integer of at least this (hf_config_fields)
HF_INT_KEYS = {
    "head_dim": 1,
    "moe_intermediate_size": 1,
    "intermediate_size_mlp": 1,
    "shared_expert_intermediate_size": 0,
    "n_shared_experts": 0,
    "interleave_moe_layer_step": 1,
    "decoder_sparse_step": 1,
    "moe_layer_freq": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 0,
    "num_nextn_predict_layers": 0,
    "q_lora_rank": 0,
    "kv_lora_rank": 0,
    "qk_nope_head_dim": 1,
    "qk_rope_head_dim": 1,
    "v_head_dim": 1,
}

# config.json keys read as a flag or a name (hf_config_fields), and the JSON type each must have
HF_TYPED_KEYS: dict[str, type] = {
    "tie_word_embeddings": bool,
    "attention_bias": bool,
    "mlp_bias": bool,
    "use_qk_norm": bool,
    "multi_query": bool,
    "new_decoder_architecture": bool,
    "enable_bias": bool,
    "use_sliding_window": bool,
    "alibi": bool,
    "parallel_attn": bool,
    "use_parallel_residual": bool,
    "hidden_act": str,
    "activation_function": str,
    "model_type": str,
}

# transformers config classes' dropout defaults (configuration_<type>.py __init__ / dataclass
# fields), taken for a key config.json omits. Every exactly-read type has one attention_dropout of
# 0.0 and no hidden dropout (LlamaConfig, MistralConfig, Qwen2/Qwen3(Moe)Config, MixtralConfig,
# DeepseekV2/V3Config, Llama4TextConfig, GptOssConfig; Kimi-K2 ships DeepseekV3Config); of the
# generic ones: GPT2Config / GPTBigCodeConfig resid_pdrop = attn_pdrop = 0.1; OPTConfig dropout 0.1,
# attention_dropout 0.0; BloomConfig, GPTNeoXConfig, FalconConfig hidden_dropout = attention_dropout
# = 0.0; GemmaConfig / Gemma2Config / Gemma3TextConfig / StarCoder2Config / NemotronConfig /
# OlmoeConfig / Glm4MoeConfig attention_dropout 0.0 (Starcoder2Config residual_dropout 0.0 too).
_ATTN_ZERO = {"attention_dropout": 0.0}
HF_DROPOUT_DEFAULTS: dict[str, dict[str, float]] = {
    **{t: _ATTN_ZERO for t in EXACT_HF_MODEL_TYPES},
    "gpt2": {"resid_pdrop": 0.1, "attn_pdrop": 0.1},
    "gpt_bigcode": {"resid_pdrop": 0.1, "attn_pdrop": 0.1},
    "opt": {"dropout": 0.1, "attention_dropout": 0.0},
    "bloom": {"hidden_dropout": 0.0, "attention_dropout": 0.0},
    "gpt_neox": {"hidden_dropout": 0.0, "attention_dropout": 0.0},
    "falcon": {"hidden_dropout": 0.0, "attention_dropout": 0.0},
    **{
        t: _ATTN_ZERO
        for t in ("gemma", "gemma2", "gemma3_text", "starcoder2", "nemotron", "olmoe", "glm4_moe")
    },
}

# transformers model types whose config class leaves tie_word_embeddings at PretrainedConfig's
# default (True) when config.json omits it (FalconConfig and GPTBigCodeConfig do too: StarCoder's
# published 15.5B parameters count its one tied embedding)
TIED_BY_DEFAULT = (
    "gpt2",
    "gpt_neo",
    "opt",
    "bloom",
    "gemma",
    "gemma2",
    "gemma3_text",
    "falcon",
    "gpt_bigcode",
)

# config.json keys of local attention (_hf_local_attention); HF's layer_types names -> [model]'s
HF_LOCAL_ATTENTION_KEYS = (
    "sliding_window",
    "attention_chunk_size",
    "layer_types",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
)
HF_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked"}
# families whose every layer uses sliding_window when config.json has no layer_types
# (transformers MistralConfig / MixtralConfig / Starcoder2Config / Phi3Config: one sliding_window
# for all layers, masking_utils.create_sliding_window_causal_mask in every layer)
SLIDING_EVERY_LAYER_TYPES = ("mistral", "mixtral", "starcoder2", "phi3")
# Qwen2/Qwen3(-MoE)Config: with use_sliding_window, layer i slides when i >= max_window_layers
# (configuration_qwen2.py layer_types default; its class default 28)
MAX_WINDOW_LAYER_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
QWEN_MAX_WINDOW_LAYERS_DEFAULT = 28
# Gemma2Config: sliding on even layers ("sliding_attention" if (i + 1) % 2); Gemma3TextConfig:
# sliding unless (i + 1) % sliding_window_pattern == 0 (class default 6)
GEMMA_SLIDING_PATTERN = {"gemma2": 2, "gemma3_text": 6}


def _hf_local_attention(
    cfg: Mapping[str, Any], model_type: str, layers: object, file: str
) -> dict[str, Any] | None:
    """[model] sliding_window / attention_chunk_size / layer_types from config.json (HF layer_types
    with "sliding_attention" / "chunked_attention", or the family's convention when it has none:
    SLIDING_EVERY_LAYER_TYPES, MAX_WINDOW_LAYER_TYPES, GEMMA_SLIDING_PATTERN, Llama 4's chunks on
    its RoPE layers). {} when the config has no local attention; None when it has some that is not
    modeled (other layer kinds, or a window of a family whose layer pattern is not known here):
    the keys are then reported by _unmodeled_keys."""
    window = cfg.get("sliding_window")
    chunk = cfg.get("attention_chunk_size")
    types = cfg.get("layer_types")
    if cfg.get("use_sliding_window") is False:
        window = None
    for key, value in (("sliding_window", window), ("attention_chunk_size", chunk)):
        if value is not None and (not _is_int(value) or value < 1):
            raise ConfigError(f"must be an integer >= 1 or null, got {value!r}", key=key, file=file)
    if not isinstance(layers, int) or isinstance(layers, bool):
        return None
    if types is not None:
        if not isinstance(types, list) or not all(k in HF_LAYER_TYPES for k in types):
            return None  # linear attention, Mamba, ...: not modeled
        kinds = [HF_LAYER_TYPES[k] for k in types]
    elif window is None and chunk is None:
        return {}
    elif model_type == "llama4_text" and window is None:
        # Llama4TextAttention: chunked attention on the RoPE layers, global on the NoPE ones
        no_rope = cfg.get("no_rope_layers")
        if not (isinstance(no_rope, list) and len(no_rope) == layers):
            return None
        kinds = ["chunked" if use_rope else "full" for use_rope in no_rope]
    elif chunk is not None:
        return None
    elif model_type in SLIDING_EVERY_LAYER_TYPES:
        kinds = ["sliding"] * layers
    elif model_type in MAX_WINDOW_LAYER_TYPES:
        if cfg.get("use_sliding_window") is not True:
            return {}  # Qwen2Config: no sliding window unless use_sliding_window
        first = cfg.get("max_window_layers", QWEN_MAX_WINDOW_LAYERS_DEFAULT)
        if not _is_int(first):
            raise ConfigError(f"must be an integer, got {first!r}", key="max_window_layers", file=file)
        kinds = ["sliding" if i >= first else "full" for i in range(layers)]
    elif model_type in GEMMA_SLIDING_PATTERN:
        period = cfg.get("sliding_window_pattern", GEMMA_SLIDING_PATTERN[model_type])
        if not _is_int(period) or period < 1:
            raise ConfigError(
                f"must be an integer >= 1, got {period!r}", key="sliding_window_pattern", file=file
            )
        kinds = ["sliding" if (i + 1) % period else "full" for i in range(layers)]
    else:
        return None  # a window whose layers this family's class decides: not known here
    if len(kinds) != layers:
        raise ConfigError(f"{len(kinds)} entries for {layers} layers", key="layer_types", file=file)
    out: dict[str, Any] = {}
    if "sliding" in kinds:
        if window is None:
            raise ConfigError(
                "layer_types has sliding layers but no sliding_window", key="sliding_window", file=file
            )
        out["sliding_window"] = window
    if "chunked" in kinds:
        if chunk is None:
            raise ConfigError(
                "layer_types has chunked layers but no attention_chunk_size",
                key="attention_chunk_size",
                file=file,
            )
        out["attention_chunk_size"] = chunk
    if out:
        out["layer_types"] = tuple(kinds)
    return out


# layer_types entries that are plain causal attention once their window covers the sequence
# (HF: "sliding_attention" uses sliding_window, "chunked_attention" attention_chunk_size)
LOCAL_ATTENTION_WINDOWS = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


def _layer_windows(layer_types: object) -> tuple[str, ...] | None:
    """The window keys `layer_types` relies on, or None when it names other layer kinds (linear
    attention, Mamba, ...) that are never plain attention."""
    if not isinstance(layer_types, list):
        return None
    needed = set()
    for kind in layer_types:
        if kind == "full_attention":
            continue
        if kind not in LOCAL_ATTENTION_WINDOWS:
            return None
        needed.add(LOCAL_ATTENTION_WINDOWS[kind])
    return tuple(sorted(needed))


def _hf_config_path(path: Path) -> Path:
    """`hf_config` may name a downloaded model folder (a Hugging Face snapshot): its config.json.
    The import is offline: a hub id that is not a local path is refused with that hint."""
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if not path.exists():
        raise ConfigError(
            f"no such file: {path} (the import is offline: give the path of a downloaded config.json "
            "or of the folder holding it)",
            key="model.hf_config",
        )
    return path


def _resolve_unmodeled(
    hf: dict[str, Any], seq_len: object, allow: tuple[str, ...], cfg_file: str
) -> list[str]:
    """Errors for unmodeled keys (exit 2) unless allowed; warning lines for the allowed ones."""
    unmodeled: dict[str, str] = hf.pop("_unmodeled")
    windows: dict[str, int] = hf.pop("_windows")
    layer_windows: tuple[str, ...] | None = hf.pop("_layer_windows")
    features: list[str] = hf.pop("_features", [])
    covers = {k: _is_int(seq_len) and w >= seq_len for k, w in windows.items()}  # type: ignore[operator]
    for key, covered in covers.items():
        if key in unmodeled and covered:
            del unmodeled[key]  # a window no shorter than the sequence is plain causal attention
    if "layer_types" in unmodeled and layer_windows is not None and all(covers.get(k) for k in layer_windows):
        del unmodeled["layer_types"]  # sliding/chunked layers whose window covers the sequence
    refused = sorted((k for k in unmodeled if k not in allow), key=_unmodeled_rank)
    if refused:
        # the most architecture-bearing key is the one named (Nemotron-H: hybrid_override_pattern,
        # not the alphabetically first Mamba field); the message lists every other key to allow
        key, others = refused[0], refused[1:]
        listed = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
        also = f" (also not modeled: {listed})" if others else ""
        raise ConfigError(
            f"{unmodeled[key]} is not modeled by the simulator{also}; list the key(s) in [model] "
            "allow_unmodeled to ignore them",
            key=key,
            file=cfg_file,
        )
    notes = [
        f"{cfg_file}: key '{key}' ({why}) is not modeled and is ignored (allow_unmodeled)"
        for key, why in sorted(unmodeled.items(), key=lambda kv: _unmodeled_rank(kv[0]))
    ]
    notes += [
        f"model.allow_unmodeled: {key!r} is not an unmodeled key of {cfg_file} (absent, or modeled "
        "exactly at this seq_len): nothing to ignore"
        for key in allow
        if key not in unmodeled
    ]
    return notes + [f"{cfg_file}: not modeled: {feature}" for feature in features]


def _unmodeled_rank(key: str) -> tuple[int, bool, str]:
    """Order of unmodeled keys in messages: UNMODELED_HF_KEYS's order (layer patterns first),
    then the prefixed Mamba / linear-attention fields and expert keys by name (an expert count's
    name before the other expert keys)."""
    order = list(UNMODELED_HF_KEYS)
    return (order.index(key), False, key) if key in order else (len(order), "expert" not in key, key)


# Sizes whose 0 in ModelSpec means "derive it" (specs.py): a file's explicit 0 was silently read as
# the default (kv_heads = 0 ran as many K/V heads as heads). The default is had by leaving the key out
# (or `--unset model.KEY`); a 0 asks for no heads or no width, which no model has.
DERIVED_SIZES = {
    "kv_heads": "heads",
    "ffn_hidden": "4 × hidden (the preset's or config.json's when given)",
    "head_dim": "hidden / heads",
    "expert_ffn_hidden": "ffn_hidden",
}


def _refuse_zero_size(table: Mapping[str, Any], key: str, section: str) -> None:
    value = table.get(key)
    if key in DERIVED_SIZES and isinstance(value, int) and not isinstance(value, bool) and value == 0:
        raise ConfigError(
            f"must be >= 1, got 0; leave the key out (or --unset {section}.{key}) for the default: "
            f"{DERIVED_SIZES[key]}",
            key=f"{section}.{key}",
        )


def model_from_table(table: Mapping[str, Any], base_dir: Path) -> ModelSpec:
    """[model]: a preset or hf_config, overridden by explicit keys."""
    _check_keys(
        table,
        ("preset", "hf_config", "name", "moe", "mla", "allow_unmodeled", "layer_pattern") + MODEL_KEYS,
        "model",
    )
    values: dict[str, Any] = {}
    name = "custom"
    notes: list[str] = []
    allow = table.get("allow_unmodeled", [])
    if not isinstance(allow, list) or not all(isinstance(k, str) for k in allow):
        raise ConfigError("must be a list of config.json key names", key="model.allow_unmodeled")
    if "preset" in table and "hf_config" in table:
        raise ConfigError("give either preset or hf_config, not both", key="model.preset")
    hf: dict[str, Any] | None = None
    hf_file = ""
    no_mlp_width = False
    if "preset" in table:
        preset = table["preset"]
        presets = load_model_presets()
        found = canonical(preset, presets)
        if found is None:
            raise ConfigError(
                f"unknown model preset {preset!r}{did_you_mean(preset, presets)}; known: {', '.join(presets)}",
                key="model.preset",
            )
        raw = dict(presets[found])
        notes += [f"model preset {found!r}: not modeled: {what}" for what in raw.pop("unmodeled", [])]
        moe = raw.pop("moe", {})
        mla = raw.pop("mla", None)
        values.update(raw)
        values.update(_moe_fields(moe))
        if mla is not None:
            values["mla"] = dict(mla)
        name = found
    elif "hf_config" in table:
        ref = table["hf_config"]
        if isinstance(ref, PurePath):  # a Python API dict may hold a Path
            ref = str(ref)
        if not isinstance(ref, str) or not ref:
            raise ConfigError("must be a path to a config.json", key="model.hf_config")
        path = _hf_config_path(Path(ref) if Path(ref).is_absolute() else base_dir / ref)
        hf = hf_config_fields(path)
        hf_file = str(path)
        name = hf.pop("name")
        from_config_seq = hf.pop("_seq_len_from_config", None)
        no_mlp_width = hf.pop("_no_mlp_width")
        hf.pop("_route_groups", None)  # read again by scenario_from_dict (_group_limited_nodes)
        values.update({k: v for k, v in hf.items() if not k.startswith("_")})
        if "seq_len" not in table:
            if from_config_seq is None:
                raise ConfigError(
                    "missing required key (config.json gives no sequence length)", key="model.seq_len"
                )
            values["seq_len"] = from_config_seq
            notes.append(
                f"model.seq_len not given: using {from_config_seq} from {hf_file} (the config's "
                "context length, not necessarily the training one); set [model] seq_len"
            )
    for key in MODEL_KEYS:
        if key in table:
            _refuse_zero_size(table, key, "model")
            values[key] = table[key]
    if "moe" in table:
        moe_table = _table(table, "moe", "model")
        _check_keys(moe_table, MOE_KEYS, "model.moe")
        _refuse_zero_size(moe_table, "expert_ffn_hidden", "model.moe")
        values.update(_moe_fields(moe_table))
    if "mla" in table:
        mla_table = _table(table, "mla", "model")
        _check_keys(mla_table, MLA_KEYS, "model.mla")
        values["mla"] = {**(values.get("mla") or {}), **mla_table}
    if "name" in table:
        name = table["name"]
    _local_attention_layers(values, table)
    if hf is not None:
        if "gated_mlp" in table:
            hf["_features"] = [f for f in hf.get("_features", []) if f != NO_ACTIVATION_NOTE]
        notes = _resolve_unmodeled(hf, values.get("seq_len"), tuple(allow), hf_file) + notes
    elif allow:
        raise ConfigError("only meaningful with hf_config", key="model.allow_unmodeled")
    for key in ("layers", "hidden", "heads", "vocab", "seq_len"):
        if key not in values:
            raise ConfigError("missing required key (or give a preset / hf_config)", key=f"model.{key}")
    if "mla" in values:
        mla = values["mla"]
        if not isinstance(mla, dict):
            raise ConfigError("must be a table", key="model.mla")
        try:
            values["mla"] = MLASpec(**mla)
        except TypeError:
            raise ConfigError(f"keys: {', '.join(MLA_KEYS)}", key="model.mla") from None
    try:
        model = ModelSpec(name=name, notes=tuple(notes), **values)
    except ConfigError as err:
        if hf is None:
            raise
        raise _blame_config_json(err, table, hf_file) from None
    if no_mlp_width and "ffn_hidden" not in table:
        raise ConfigError(
            "no MLP width given (null or absent) and the model class's default is not known here; "
            "give it, or [model] ffn_hidden",
            key="intermediate_size",
            file=hf_file,
        )
    return model


def _local_attention_layers(values: dict[str, Any], table: Mapping[str, Any]) -> None:
    """[model] layer_types (one entry per layer) or layer_pattern (a list repeated from layer 0:
    ["sliding", "full"] = GPT-OSS's and Gemma 2's alternation) into ModelSpec.layer_types; HF's
    "full_attention" / "sliding_attention" / "chunked_attention" are accepted for the short names.
    The scenario's own key wins over a preset's or config.json's, and a scenario that gives one of
    the two replaces the other."""
    if "layer_types" in table and "layer_pattern" in table:
        raise ConfigError("give layer_types or layer_pattern, not both", key="model.layer_pattern")
    if "layer_types" in table:
        values.pop("layer_pattern", None)
    elif "layer_pattern" in table:
        values["layer_pattern"] = table["layer_pattern"]
    pattern = values.pop("layer_pattern", None)
    if pattern is not None:
        if not isinstance(pattern, list) or not pattern or not all(isinstance(k, str) for k in pattern):
            raise ConfigError(
                "must be a non-empty list of full, sliding or chunked, repeated over the layers",
                key="model.layer_pattern",
            )
        for kind in pattern:  # named here: ModelSpec sees only the layer_types it expands to
            if HF_LAYER_TYPES.get(kind, kind) not in specs.LAYER_TYPES:
                raise ConfigError(
                    f"unknown layer type {kind!r}: expected one of {', '.join(specs.LAYER_TYPES)}",
                    key="model.layer_pattern",
                )
        layers = values.get("layers")
        if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
            return  # ModelSpec names the bad layers
        values["layer_types"] = [pattern[i % len(pattern)] for i in range(layers)]
    types = values.get("layer_types")
    if isinstance(types, list | tuple):
        values["layer_types"] = tuple(HF_LAYER_TYPES.get(k, k) if isinstance(k, str) else k for k in types)


# ModelSpec field -> the config.json keys it is read from (hf_config_fields), for errors
HF_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "multi_query"),
    "ffn_hidden": ("intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
    "head_dim": ("head_dim",),
    "seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok", "experts_per_token", "moe_top_k"),
    "expert_ffn_hidden": ("moe_intermediate_size", "intermediate_size"),
    "shared_expert_ffn_hidden": ("shared_expert_intermediate_size", "n_shared_experts", "intermediate_size"),
    "layer_interval": ("decoder_sparse_step", "interleave_moe_layer_step"),
    "first_dense_layers": ("first_k_dense_replace", "mlp_only_layers"),
    "max_nodes_per_token": ("topk_group",),
    "mtp_layers": ("num_nextn_predict_layers",),
    "dropout": ("hidden_dropout", "attention_dropout", "resid_pdrop", "attn_pdrop", "dropout"),
    "rope_mscale": ("rope_scaling",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "sliding_window": ("sliding_window",),
    "attention_chunk_size": ("attention_chunk_size",),
    "layer_types": ("layer_types", "sliding_window", "attention_chunk_size"),
}


def _blame_config_json(err: ConfigError, table: Mapping[str, Any], hf_file: str) -> ConfigError:
    """An error about a model value that came from config.json, re-addressed to that file and
    the JSON key it was read from (the user never wrote `model.layers`; they wrote
    `num_hidden_layers` in config.json). Values the scenario itself gives keep their TOML key."""
    key = err.key or ""
    if not key.startswith("model."):
        return err
    parts = key.split(".")[1:]
    field = parts[-1]
    written = set(table) | set(_table_or_empty(table, "moe")) | set(_table_or_empty(table, "mla"))
    if field in written or (field == "layer_interval" and "moe_layer_interval" in written):
        return err
    try:
        top = _read_json_object(Path(hf_file))
    except ConfigError:
        return err
    text_config = top.get("text_config")
    cfg: dict[str, Any] = text_config if isinstance(text_config, dict) else top
    for json_key in HF_SOURCE_KEYS.get(field, ()):
        if json_key in cfg:
            return ConfigError(f"{err.message} (read as {key})", key=json_key, file=hf_file)
    return err


def _table_or_empty(table: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = table.get(key)
    return value if isinstance(value, Mapping) else {}


def _moe_fields(moe: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(moe)
    if "layer_interval" in out:
        out["moe_layer_interval"] = out.pop("layer_interval")
    return out


# ----------------------------------------------------------------------------- topology
def _intra_node(table: Mapping[str, Any], section: str, base: IntraNodeSpec | None = None) -> IntraNodeSpec:
    _check_keys(table, INTRA_KEYS, section)
    b = base or IntraNodeSpec()
    return IntraNodeSpec(
        fabric=table.get("fabric", b.fabric),
        link_bandwidth_bytes_per_s=units.gBps_to_bytes_per_s(
            _num(table, "link_GBps_per_direction", section, b.link_bandwidth_bytes_per_s / units.GIGA)
        ),
        latency_s=units.us_to_s(_num(table, "latency_us", section, b.latency_s / units.US_S)),
        nvls=table.get("nvls", b.nvls),
    )


def _inter_node(table: Mapping[str, Any], section: str, base: InterNodeSpec | None = None) -> InterNodeSpec:
    _check_keys(table, INTER_KEYS, section)
    b = base or InterNodeSpec()
    return InterNodeSpec(
        fabric=table.get("fabric", b.fabric),
        nics_per_node=table.get("nics_per_node", b.nics_per_node),
        nic_bandwidth_bytes_per_s=units.gbps_to_bytes_per_s(
            _num(table, "nic_Gbps", section, b.nic_bandwidth_bytes_per_s * units.BITS_PER_BYTE / units.GIGA)
        ),
        latency_s=units.us_to_s(_num(table, "latency_us", section, b.latency_s / units.US_S)),
        nodes_per_leaf=table.get("nodes_per_leaf", b.nodes_per_leaf),
        oversubscription=table.get("oversubscription", b.oversubscription),
        tiers=table.get("tiers", b.tiers),
        nodes_per_pod=table.get("nodes_per_pod", b.nodes_per_pod),
        pod_oversubscription=table.get("pod_oversubscription", b.pod_oversubscription),
        switch_radix=table.get("switch_radix", b.switch_radix),
        planes=table.get("planes", b.planes),
    )


def topology_from_dict(data: Mapping[str, Any]) -> TopologySpec:
    _check_keys(data, TOPOLOGY_KEYS, "")
    rank_order = data.get("rank_order", ["tp", "cp", "dp", "pp"])
    if not isinstance(rank_order, list) or not all(isinstance(x, str) for x in rank_order):
        raise ConfigError("must be a list of axis names", key="rank_order")
    name = data.get("name", "topology")
    topo = TopologySpec(
        name=name,
        gpu=gpu_by_name(_required(data, "gpu", "")),
        gpus_per_node=_required(data, "gpus_per_node", ""),
        intra_node=_intra_node(_table(data, "intra_node", ""), "intra_node"),
        inter_node=_inter_node(_table(data, "inter_node", ""), "inter_node"),
        rank_order=tuple(rank_order),
    )
    check_nvls_gpu(topo, "intra_node.nvls")
    return topo


# Architectures whose NVSwitch systems have no NVLink SHARP: in-switch reduction (NVLS) arrived
# with third-generation NVSwitch and Hopper (NVIDIA DGX H100 user guide / H100 whitepaper
# "NVLink SHARP"; NCCL builds its NVLS algorithm for SM 9.0 and newer only)
NO_NVLS_ARCHS = ("volta", "ampere")


def check_nvls_gpu(topo: TopologySpec, key: str) -> None:
    """Refuse `nvls = true` without an NVSwitch, or where the GPU's NVSwitch generation has no
    in-switch reduction."""
    arch = _architecture(topo.gpu.name)
    if topo.intra_node.nvls and topo.intra_node.fabric != "nvswitch":
        # network/collectives.py reduces in the switch on an NVSwitch fabric only
        raise ConfigError(
            f"NVLink SHARP reduces inside an NVSwitch; the {topo.intra_node.fabric} fabric has none: "
            "set nvls = false",
            key=key,
        )
    if topo.intra_node.nvls and arch in NO_NVLS_ARCHS:
        raise ConfigError(
            f"NVLink SHARP needs third-generation NVSwitch and a Hopper or newer GPU; {topo.gpu.name} "
            f"({arch}) has none: set nvls = false",
            key=key,
        )


def resolve_topology_path(ref: object, base_dir: Path, key: str = "cluster.topology") -> Path:
    if isinstance(ref, PurePath):  # a Python API dict may hold a Path, as "a path" says
        ref = str(ref)
    if not isinstance(ref, str) or not ref:
        raise ConfigError("must be a topology name or a path to a topology file", key=key)
    is_name = "/" not in ref and not ref.endswith(".toml")
    shipped_name = canonical(ref, topology_names()) if is_name else None
    if shipped_name is not None:
        shipped = data_dir("topologies") / f"{shipped_name}.toml"
        if path_kind(shipped) == "file":
            return shipped
    path = Path(ref)
    if not path.is_absolute():
        candidates = [base_dir / path, Path.cwd() / path]
        path = next((c for c in candidates if path_kind(c) != "missing"), candidates[0])
    if path_kind(path) == "missing":
        names = topology_names()
        hint = did_you_mean(Path(ref).stem, names)
        raise ConfigError(
            f"unknown topology {ref!r}{hint}: not a shipped name ({', '.join(names)}) nor a file", key=key
        )
    return path


def load_topology(ref: str, base_dir: Path | None = None) -> TopologySpec:
    path = resolve_topology_path(ref, base_dir or Path.cwd(), key="topology")
    data = read_toml(path)
    try:
        return topology_from_dict(data)
    except ConfigError as err:
        raise err.with_file(str(path)) from None


# ----------------------------------------------------------------------------- scenario
SCENARIO_KEYS = (
    "name",
    "model",
    "cluster",
    "parallel",
    "precision",
    "dataloader",
    "variability",
    "kernels",
    "sweep",
    "memory",
    "run",
)
CLUSTER_KEYS = (
    "topology",
    "num_gpus",
    "gpu",
    "gpus_per_node",
    "gpus_used_per_node",
    "rank_order",
    "gpu_speed_spread",
    "intra_node",
    "inter_node",
)


def resolve_scenario_path(ref: str | Path) -> Path:
    """A scenario argument: a file, else a shipped scenario's name (`mfusim run
    llama3-70b-512-h100`). A file of that name wins over a shipped scenario."""
    if not str(ref):  # Path("") is ".", which would be read as the working directory
        raise ConfigError("empty scenario path: give a scenario file or a shipped scenario's name")
    path = Path(ref)
    if path_kind(path) != "missing":
        return path
    text = str(ref)
    name = text[: -len(".toml")] if text.endswith(".toml") else text
    shipped = canonical(name, scenario_names()) if "/" not in text else None
    if shipped is not None:
        return data_dir("scenarios") / f"{shipped}.toml"
    hint = did_you_mean(name, scenario_names()) if "/" not in text else ""
    raise ConfigError(
        f"no such file, nor a shipped scenario{hint} (mfusim presets lists them: {', '.join(scenario_names())})",
        file=text,
    )


def load_scenario(
    path: str | Path, overrides: Sequence[tuple[str, Any]] = (), overrides_flag: str = "--set"
) -> Scenario:
    """Read a scenario file; any problem is a ConfigError naming this file.

    `overrides` (`--set`, simulator/overrides.py) change the file's values before validation;
    an error about an overridden key names the override.
    """
    from .overrides import apply_overrides, attribute_error, check_unsets

    data = apply_overrides(read_toml(path), overrides, overrides_flag) if overrides else read_toml(path)
    base_dir = Path(path).resolve().parent
    try:
        check_unsets(data, overrides, lambda d: scenario_from_dict(d, base_dir=base_dir), overrides_flag)
    except ConfigError as err:
        raise err.with_file(str(path)) from None
    try:
        return scenario_from_dict(data, base_dir=base_dir, source=str(path))
    except ConfigError as err:
        raise attribute_error(err, overrides, overrides_flag).with_file(str(path)) from None


def _cluster(data: Mapping[str, Any], base_dir: Path) -> tuple[TopologySpec, int]:
    cluster = _table(data, "cluster", "")
    if "cluster" not in data:
        raise ConfigError("missing required table [cluster]", key="cluster")
    _check_keys(cluster, CLUSTER_KEYS, "cluster")
    topo_path = resolve_topology_path(_required(cluster, "topology", "cluster"), base_dir)
    try:
        topo_data = read_toml(topo_path)
    except ConfigError as err:
        raise ConfigError(str(err), key="cluster.topology") from None
    try:
        topo = topology_from_dict(topo_data)
    except ConfigError as err:
        raise err.with_file(str(topo_path)) from None
    changes: dict[str, Any] = {}
    if "gpu" in cluster:
        changes["gpu"] = gpu_by_name(cluster["gpu"], key="cluster.gpu")
    if "gpus_per_node" in cluster:
        changes["gpus_per_node"] = cluster["gpus_per_node"]
    if "rank_order" in cluster:
        ro = cluster["rank_order"]
        if not isinstance(ro, list) or not all(isinstance(x, str) for x in ro):
            raise ConfigError("must be a list of axis names", key="cluster.rank_order")
        changes["rank_order"] = tuple(ro)
    if "gpu_speed_spread" in cluster:
        spread = cluster["gpu_speed_spread"]
        changes["gpu_speed_spread"] = (
            float(spread) if isinstance(spread, int) and not isinstance(spread, bool) else spread
        )
    try:
        if "intra_node" in cluster:
            changes["intra_node"] = _intra_node(
                _table(cluster, "intra_node", "cluster"), "cluster.intra_node", topo.intra_node
            )
        if "inter_node" in cluster:
            changes["inter_node"] = _inter_node(
                _table(cluster, "inter_node", "cluster"), "cluster.inter_node", topo.inter_node
            )
    except ConfigError as err:
        if err.key and not err.key.startswith("cluster."):
            raise err.with_key_prefix("cluster") from None
        raise
    if changes:
        try:
            topo = replace(topo, **changes)
        except ConfigError as err:
            raise err.with_key_prefix("cluster") from None
    link_given = "link_GBps_per_direction" in _table_or_empty(cluster, "intra_node")
    topo = cap_nvlink(topo, gpu_swapped="gpu" in cluster, link_given=link_given)
    if "nvls" in _table_or_empty(cluster, "intra_node"):
        check_nvls_gpu(topo, "cluster.intra_node.nvls")
    elif topo.intra_node.nvls and _architecture(topo.gpu.name) in NO_NVLS_ARCHS:
        # an older GPU swapped onto an NVLS topology (cluster.gpu): its switches reduce nothing
        note = (
            f"cluster.gpu: {topo.gpu.name} has no NVLink SHARP; the topology's NVLS (in-switch "
            "reduction) is off"
        )
        topo = replace(topo, intra_node=replace(topo.intra_node, nvls=False), notes=topo.notes + (note,))
    if "gpus_used_per_node" in cluster:
        topo = use_gpus_per_node(topo, cluster["gpus_used_per_node"])
    num_gpus = _required(cluster, "num_gpus", "cluster")
    if isinstance(num_gpus, float) and num_gpus.is_integer() and abs(num_gpus) < 1e18:
        raise ConfigError(
            f"must be an integer (write {int(num_gpus)}), got {num_gpus!r}", key="cluster.num_gpus"
        )
    return topo, num_gpus


def cap_nvlink(topo: TopologySpec, gpu_swapped: bool, link_given: bool) -> TopologySpec:
    """A GPU's NVLink ports bound its NVLink bandwidth whatever the switch offers. `[cluster] gpu =
    "h800"` swapped onto a DGX H100 topology gets the H800's 200 GB/s per direction, not the H100's
    450, with a warning line naming the key. A link the scenario or its topology file states
    itself is a what-if and is kept, with a warning when it exceeds the GPU's ports."""
    cap = topo.gpu.nvlink_bytes_per_s
    link = topo.intra_node.link_bandwidth_bytes_per_s
    if cap <= 0 or topo.intra_node.fabric == "pcie" or link <= cap * (1 + 1e-9):
        return topo
    cap_gbps = units.bytes_per_s_to_gBps(cap)
    link_gbps = units.bytes_per_s_to_gBps(link)
    if link_given or not gpu_swapped:
        note = (
            f"intra_node.link_GBps_per_direction: {link_gbps:g} GB/s exceeds the {cap_gbps:g} GB/s that "
            f"{topo.gpu.name}'s NVLink ports carry: simulated as given (a what-if)"
        )
        return replace(topo, notes=topo.notes + (note,))
    note = (
        f"cluster.gpu: {topo.gpu.name}'s NVLink ports carry {cap_gbps:g} GB/s per direction; the "
        f"topology's {link_gbps:g} GB/s NVLink is capped to it"
    )
    return replace(
        topo,
        intra_node=replace(topo.intra_node, link_bandwidth_bytes_per_s=cap),
        notes=topo.notes + (note,),
    )


def use_gpus_per_node(topo: TopologySpec, used: object) -> TopologySpec:
    """`[cluster] gpus_used_per_node`: run ranks on only `used` GPUs of every node (e.g. 64 of an
    NVL72 rack's 72, so that power-of-two groups align with racks). The node then behaves as a
    `used`-GPU node: same NVLink per GPU, and the NICs of the idle GPUs idle too when every GPU
    has its own (a shared NIC stays whole). 0 = all."""
    key = "cluster.gpus_used_per_node"
    if isinstance(used, bool) or not isinstance(used, int) or used < 0:
        raise ConfigError(f"must be a non-negative integer (0 = all), got {used!r}", key=key)
    if used > topo.gpus_per_node:
        raise ConfigError(f"must be <= gpus_per_node = {topo.gpus_per_node}, got {used}", key=key)
    if used in (0, topo.gpus_per_node):
        return topo
    inter = topo.inter_node
    nics = inter.nics_per_node
    if nics >= topo.gpus_per_node:
        nics = nics * used // topo.gpus_per_node
    return replace(
        topo,
        gpus_per_node=used,
        physical_gpus_per_node=topo.gpus_per_node,
        inter_node=replace(inter, nics_per_node=max(1, nics)),
    )


LAYOUT_KEY = "parallel.pipeline_layout"
LAYOUT_MAX_CHARS = 1_000_000  # an unrolled layout string longer than this is refused, not built


def megatron_layout(text: str, mtp_layers: int) -> list[int]:
    """`[parallel] pipeline_layout` given as Megatron's --pipeline-model-parallel-layout string
    (NVIDIA/Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py,
    parse_str_to_list): commas are cosmetic, "(...)*n" and then "x*n" unroll, "|" separates the
    virtual stages in path order; E = embedding, t = transformer layer, m = MTP module, L = loss.
    Returns the transformer layers of each virtual stage. mfusim keeps the embedding on the first
    virtual stage and the MTP modules with the loss on the last (program.py, memory.py); any other
    placement is refused naming the key rather than simulated differently."""

    def unroll(match: re.Match[str]) -> str:
        times = int(match.group(2))
        if len(match.group(1)) * times > LAYOUT_MAX_CHARS:
            raise ConfigError(
                f"{match.group(0)!r} unrolls to more than {LAYOUT_MAX_CHARS:,} entries", key=LAYOUT_KEY
            )
        return match.group(1) * times

    flat = text.replace(",", "").replace(" ", "")
    for pattern in (r"\(([^()]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, unroll, flat)
        if len(flat) > LAYOUT_MAX_CHARS:
            raise ConfigError(f"unrolls to more than {LAYOUT_MAX_CHARS:,} entries", key=LAYOUT_KEY)
    stray = sorted(set(flat) - set("EtmL|"))
    if stray:
        raise ConfigError(
            f"{text!r}: unexpected {''.join(stray)!r} after unrolling; a Megatron layout uses E "
            "(embedding), t (transformer layer), m (MTP module), L (loss), | between virtual stages, "
            "x*n and (...)*n",
            key=LAYOUT_KEY,
        )
    stages = flat.split("|")
    first, last = stages[0], stages[-1]
    if flat.count("E") != 1 or "E" not in first:
        raise ConfigError(
            f"{text!r}: the embedding (E) must appear once, in the first virtual stage", key=LAYOUT_KEY
        )
    if flat.count("L") != 1 or "L" not in last:
        raise ConfigError(
            f"{text!r}: the loss (L) must appear once, in the last virtual stage", key=LAYOUT_KEY
        )
    mtp = flat.count("m")
    if mtp != mtp_layers:
        raise ConfigError(
            f"{text!r} places {mtp} MTP module(s) (m) but [model] mtp_layers = {mtp_layers}", key=LAYOUT_KEY
        )
    if mtp != last.count("m"):
        raise ConfigError(
            f"{text!r}: MTP modules (m) outside the last virtual stage are not modeled "
            "(mfusim keeps them with the loss on the last virtual stage)",
            key=LAYOUT_KEY,
        )
    return [stage.count("t") for stage in stages]


def parallel_from_table(table: Mapping[str, Any], num_gpus: int) -> ParallelConfig:
    _check_keys(table, PARALLEL_KEYS, "parallel")
    values = dict(table)
    for key in ("tp", "pp", "cp"):
        v = values.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"must be a positive integer, got {v!r}", key=f"parallel.{key}")
    if "dp" not in values:
        if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 1:
            raise ConfigError(f"must be a positive integer, got {num_gpus!r}", key="cluster.num_gpus")
        if num_gpus > MAX_GPUS:
            raise ConfigError(f"must be <= {MAX_GPUS}, got {num_gpus}", key="cluster.num_gpus")
        mp = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
        if num_gpus % mp:
            raise ConfigError(
                f"tp*pp*cp = {mp} does not divide num_gpus = {num_gpus}; no integer dp", key="parallel.dp"
            )
        values["dp"] = num_gpus // mp
    if "schedule" not in values:
        vp = values.get("vp", 1)
        values["schedule"] = (
            "interleaved" if isinstance(vp, int) and not isinstance(vp, bool) and vp > 1 else "1f1b"
        )
    if "global_batch" not in values:
        raise ConfigError("missing required key", key="parallel.global_batch")
    return ParallelConfig(**values)


def _group_limited_nodes(
    model: ModelSpec, par: ParallelConfig, gpus_per_node: int, table: Mapping[str, Any], base: Path
) -> ModelSpec:
    """config.json's group-limited routing (n_group expert groups, topk_group per token) is
    node-limited routing to topk_group nodes only while each group lies within one node. When
    the EP group spans more nodes than there are groups, a group covers nodes/n_group nodes and
    a token may reach topk_group times that many: `max_nodes_per_token` is widened to it, with a
    warning line. A scenario that gives max_nodes_per_token itself keeps its own."""
    if "hf_config" not in table or "max_nodes_per_token" in _table_or_empty(table, "moe"):
        return model
    ref = Path(str(table["hf_config"]))
    groups = hf_config_fields(_hf_config_path(ref if ref.is_absolute() else base / ref)).get("_route_groups")
    if not groups or not model.max_nodes_per_token or par.ep < 2:
        return model
    n_group, topk_group = groups
    span = par.ep * (par.tp * par.cp if par.dp % par.ep == 0 else 1)  # as program._ep_alltoall
    nodes = -(-span // max(gpus_per_node, 1))
    if nodes <= n_group:
        return model
    limit = min(nodes, topk_group * -(-nodes // n_group))
    note = (
        f"model.moe.max_nodes_per_token: config.json routes each token to topk_group = {topk_group} of "
        f"n_group = {n_group} expert groups; over the EP group's {nodes} nodes a group spans "
        f"{nodes / n_group:g} nodes, so a token reaches up to {limit} nodes (not {topk_group})"
    )
    return replace(model, max_nodes_per_token=limit, notes=model.notes + (note,))


def _embedding_loss_slots(
    model: ModelSpec, par: ParallelConfig, table: Mapping[str, Any]
) -> tuple[ParallelConfig, str]:
    """Megatron-LM refuses a pipeline split whose pp·vp pieces do not divide the layers unless
    the embedding and the loss each take a layer's slot (--account-for-embedding/loss-in-
    pipeline-split, `get_num_layers_to_build`). A scenario that names neither key but whose
    pieces divide layers + 2 (not layers) -- pp·vp = layers + 2, or an interleaved split like
    Qwen3-235B's 94 layers on pp 8 × vp 4 -- is read that way, with a warning; `validate` reads
    published interleaved rows the same (validate/cases.py `_vp`)."""
    keys = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
    pieces = num_virtual_stages(par.schedule, par.pp, par.vp)
    if any(k in table for k in keys) or par.pipeline_layout or pieces < 2 or not model.layers % pieces:
        return par, ""
    if par.schedule != "interleaved" and pieces <= model.layers:
        return par, ""  # plain pipelines keep their uneven split (first stages one layer more)
    if (model.layers + 2) % pieces:
        return par, ""
    note = (
        f"parallel: {model.layers} layers do not divide into {pieces} pipeline pieces but "
        f"{model.layers} + embedding + loss = {model.layers + 2} do: the embedding and the loss each "
        "take a layer's slot (Megatron --account-for-embedding/loss-in-pipeline-split; set both "
        "keys to say so)"
    )
    both = replace(par, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    return both, note


def scenario_from_dict(data: Mapping[str, Any], base_dir: Path | None = None, source: str = "") -> Scenario:
    base = base_dir or Path.cwd()
    if not isinstance(data, Mapping):
        raise ConfigError("expected a TOML table at top level")
    _check_keys(data, SCENARIO_KEYS, "")
    if "model" not in data:
        raise ConfigError("missing required table [model]", key="model")
    model = model_from_table(_table(data, "model", ""), base)
    topology, num_gpus = _cluster(data, base)
    par_table = _table(data, "parallel", "")
    if isinstance(par_table.get("pipeline_layout"), str):
        layout = megatron_layout(par_table["pipeline_layout"], model.mtp_layers)
        par_table = {**par_table, "pipeline_layout": layout}
    parallel = parallel_from_table(par_table, num_gpus)
    parallel, layout_note = _embedding_loss_slots(model, parallel, par_table)
    if layout_note:
        model = replace(model, notes=model.notes + (layout_note,))
    model = _group_limited_nodes(model, parallel, topology.gpus_per_node, _table(data, "model", ""), base)

    precision = _table(data, "precision", "")
    _check_keys(precision, ("dtype", "fp8_param_gather", "fp8_recipe"), "precision")
    # SPEC's default is bf16; a GPU without BF16 tensor cores (V100) runs FP16 instead, said once,
    # rather than refusing a scenario that never asked for BF16 (specs.NO_BF16_ARCHS)
    default_dtype = "bf16"
    if "dtype" not in precision and _architecture(topology.gpu.name) in specs.NO_BF16_ARCHS:
        default_dtype = "fp16"
        topology = replace(
            topology,
            notes=topology.notes
            + (f"precision.dtype not given: fp16 ({topology.gpu.name} has no BF16 tensor cores)",),
        )

    dl = _table(data, "dataloader", "")
    _check_keys(dl, ("microbatch_latency_ms", "workers", "prefetch", "jitter", "seed"), "dataloader")
    dataloader = DataloaderSpec(
        microbatch_latency_s=units.ms_to_s(_num(dl, "microbatch_latency_ms", "dataloader", 0.0)),
        workers=dl.get("workers", 2),
        prefetch=dl.get("prefetch", 2),
        jitter=dl.get("jitter", 0.0),
        seed=dl.get("seed", 0),
    )
    var = _table(data, "variability", "")
    var_keys = tuple(f.name for f in fields(VariabilitySpec))
    _check_keys(var, var_keys, "variability")
    variability = VariabilitySpec(**var)
    kern = _table(data, "kernels", "")
    _check_keys(kern, tuple(f.name for f in fields(KernelOptions)), "kernels")
    kernels = KernelOptions(**kern)
    mem = dict(_table(data, "memory", ""))
    mem_keys = tuple(f.name for f in fields(MemoryOptions) if f.name != "headroom_bytes") + ("headroom_gib",)
    _check_keys(mem, mem_keys, "memory")
    if "headroom_gib" in mem:
        mem["headroom_bytes"] = units.gib_to_bytes(_num(mem, "headroom_gib", "memory"))
        del mem["headroom_gib"]
    memory = MemoryOptions(**mem)
    sweep = _sweep_table(_table(data, "sweep", ""))
    run = run_from_table(_table(data, "run", "")) if "run" in data else None
    name = data.get("name", Path(source).stem if source else "scenario")
    scn = Scenario(
        name=name,
        model=model,
        topology=topology,
        num_gpus=num_gpus,
        parallel=parallel,
        dtype=precision.get("dtype", default_dtype),
        # Megatron-Core's defaults (Megatron-LM@d98e8a64 transformer_config.py:594 fp8_recipe =
        # "delayed", passed to TE as DelayedScaling on every GPU, fp8_utils.py:771; arguments.py:2016
        # --fp8-param-gather off). Megatron-Bridge's MixedPrecisionConfig defaults to "tensorwise"
        # and its FP8 presets gather in FP8 (docs/accuracy.md, "What the checker sees")
        fp8_param_gather=precision.get("fp8_param_gather", False),
        fp8_recipe=precision.get("fp8_recipe", "delayed"),
        dataloader=dataloader,
        variability=variability,
        kernels=kernels,
        sweep=sweep,
        source=source,
        memory=memory,
        run=run,
    )
    _check_attention_kernel(scn)
    _check_deepspeed_overlaps(kernels.stack, par_table, kern, scn.parallel.cp)
    return with_kernels_stack(scn) if kernels.stack else scn


# What DeepSpeed's pipeline engine and the 2021 Megatron layers of stack "megatron-deepspeed" do
# not overlap (program.DS_PIPE_NOTE): a file that asks for the overlap explicitly is refused, not
# silently run without it (the keys' defaults, true, are taken as "whatever the stack does").
_DS_NO_OVERLAP = (
    (
        "parallel",
        "overlap_grad_reduce",
        "the gradient reduce runs after the last backward (TrainSchedule ReduceGrads)",
    ),
    ("parallel", "overlap_param_gather", "the parameters are gathered inside the optimizer step"),
    (
        "kernels",
        "tp_comm_async",
        "its 2021 ColumnParallelLinear all-reduces the input gradient synchronously",
    ),
    (
        "parallel",
        "tp_comm_overlap",
        "its 2021 layers run every TP all-reduce synchronously (no userbuffers overlap)",
    ),
)


def _check_deepspeed_overlaps(
    stack: str, par_table: Mapping[str, Any], kern: Mapping[str, Any], cp: int = 1
) -> None:
    if stack != DEEPSPEED_STACK:
        return
    if cp > 1:
        # Megatron-DeepSpeed 2021-22 (0c58dbb3) has no context parallelism; its later sequence
        # parallelism (DeepSpeed-Ulysses, 2023) is another exchange than the ring this models
        raise ConfigError(
            f'parallel.cp = {cp} cannot run under stack "megatron-deepspeed": its 2021-22 '
            "pipeline engine and layers have no context parallelism; set cp = 1",
            key="parallel.cp",
        )
    tables = {"parallel": par_table, "kernels": kern}
    for table, key, why in _DS_NO_OVERLAP:
        if tables[table].get(key) is True:
            raise ConfigError(
                f'{table}.{key} = true cannot run under stack "megatron-deepspeed": {why}; drop the key '
                "or set it false",
                key=f"{table}.{key}",
            )


def _check_attention_kernel(scn: Scenario) -> None:
    """A fused attention kernel on an architecture it has no kernels for (specs.ATTENTION_ARCHS:
    FlashAttention-3 off Hopper/Blackwell, FlashAttention-2 and cuDNN's on Volta) is refused here,
    naming the file, rather than mid-simulation (kernels.resolve_attention, which keeps the same rule). The
    GPU's default implementation (no kernels.attention) is checked against attention sinks and
    unpadding here; a named one already was (Scenario)."""
    k = scn.kernels
    arch = _architecture(scn.gpu.name)
    if k.flash_attention and k.attention:
        specs.check_attention_arch(k.attention, arch, scn.gpu.name, "kernels.attention")
    specs.check_dtype_arch(scn.dtype, arch, scn.gpu.name, "precision.dtype")
    impl = (k.attention or DEFAULT_ATTENTION.get(arch, "fa2")) if k.flash_attention else "unfused"
    specs.check_cp_comm_type(impl, scn.parallel)
    if k.flash_attention and not k.attention:
        impl = DEFAULT_ATTENTION.get(arch, "fa2")
        try:
            specs.check_attention_head_dim(impl, specs.attention_head_dim(scn.model))
            specs.check_attention_head_alignment(impl, specs.attention_head_dims(scn.model))
            if scn.model.attention_sinks:
                specs.check_sink_attention(impl)
            if k.attention_padding == "unpad":
                specs.check_unpad_attention(impl)
        except ConfigError as err:
            raise ConfigError(
                f"{err.message} (the default attention on {scn.gpu.name}): set kernels.attention",
                key=err.key,
            ) from None
    _check_dispatcher_gpu(scn, arch)


def _check_dispatcher_gpu(scn: Scenario, arch: str) -> None:
    """DeepEP and HybridEP run where their kernels are built for. DeepEP (README "Requirements",
    deepseek-ai/DeepEP@b306af0^ and the hybrid-ep branch@94a9f8f6): Ampere (SM80) or Hopper-class
    GPUs, NVLink for intra-node traffic, and on A100 intra-node only (roadmap "A100 support
    (intranode only)"); its experimental PCIe kernel (docs/README_PCIe.md) sends all traffic
    through the NIC, which the dispatcher model does not represent. HybridEP copies with TMA
    (csrc/hybrid_ep/backend/hybrid_ep_backend.cuh cp.async.bulk, sm_90+; docs/README_Hybrid-EP.md
    builds for "9.0 10.0") over NVLink."""
    disp = scn.kernels.moe_dispatcher
    if disp not in ("deepep", "hybridep") or scn.parallel.ep < 2:
        return
    key, gpu = "kernels.moe_dispatcher", scn.gpu.name
    archs = ("ampere", "hopper", "blackwell") if disp == "deepep" else ("hopper", "blackwell")
    if arch not in archs:
        need = "Ampere or newer (SM80+)" if disp == "deepep" else "Hopper or newer (TMA, SM90+)"
        raise ConfigError(f"{disp} runs on {need} GPUs, not {gpu} ({arch})", key=key)
    if scn.topology.intra_node.fabric == "pcie":
        raise ConfigError(
            f"{disp} needs NVLink between a node's GPUs; this topology's intra_node fabric is PCIe",
            key=key,
        )
    if disp == "deepep" and arch == "ampere" and _ep_spans_nodes(scn):
        raise ConfigError(
            f"DeepEP supports A100-class GPUs intra-node only; ep = {scn.parallel.ep} spans nodes "
            f"of {scn.topology.gpus_per_node} GPUs on {gpu}",
            key=key,
        )


def _ep_spans_nodes(scn: Scenario) -> bool:
    """Whether rank 0's expert-parallel group crosses a node boundary: EP groups step like the
    data-parallel axis (network/placement.py Placement.members) through topology.rank_order."""
    par, topo = scn.parallel, scn.topology
    sizes = {"tp": par.tp, "cp": par.cp, "dp": par.dp, "pp": par.pp}
    stride, strides = 1, {}
    for axis in topo.rank_order:
        strides[axis] = stride
        stride *= sizes[axis]
    step = strides["dp"] if par.dp % par.ep == 0 else strides[topo.rank_order[0]]
    return (par.ep - 1) * step >= topo.gpus_per_node


def _architecture(gpu_name: str) -> str:
    """kernels.toml [architectures] (kernel_catalog.architecture, a layer above this one): a
    user-defined GPU counts as Hopper-class."""
    return str(_parsed(_file_version(catalog_file("kernels.toml")))["architectures"].get(gpu_name, "hopper"))


def stack_residuals(stack: str, gpu_name: str) -> tuple[str, dict[str, Any] | None]:
    """(architecture, `[stacks.<stack>.<architecture>]` of efficiency.toml or None) for a GPU; the
    architecture from kernels.toml [architectures] (a user-defined GPU counts as Hopper-class,
    as in simulator/kernels.py). A stack with no fit of its own reads the one it borrows
    (specs.RESIDUALS_OF)."""
    arch = _architecture(gpu_name)
    tables = _parsed(_file_version(catalog_file("efficiency.toml"))).get("stacks", {})
    return arch, tables.get(residuals_stack(stack), {}).get(arch)


def with_kernels_stack(scn: Scenario) -> Scenario:
    """`[kernels] stack`: the GPU's system residuals (sustained clock, launch gap, host overhead,
    NCCL fraction, overlap slowdown, the eager expert GEMM residual) from that stack's fit on the GPU's architecture instead of
    the default stack's per-GPU table; refused when the stack was not fitted there. The precision
    recipe's GEMM fraction stays the GPU's (it is not a stack residual)."""
    stack = scn.kernels.stack
    arch, table = stack_residuals(stack, scn.gpu.name)
    if not table:
        borrowed = residuals_stack(stack)
        via = f" (it takes {borrowed}'s residuals)" if borrowed != stack else ""
        raise ConfigError(
            f"kernels.stack = {stack!r} has no fitted residuals on {arch} GPUs ({scn.gpu.name}){via}",
            key="kernels.stack",
        )
    names = {f.name for f in fields(GPUEfficiency)} - {"fp4_matmul_fraction"}
    # a residual the stack was not fitted for (expert_gemm_overhead_s of a stack without MoE rows)
    # takes the prior, GPUEfficiency's default, as stacks.with_stack does for validate
    eff = replace(
        GPUEfficiency(**{k: v for k, v in table.items() if k in names}),
        fp4_matmul_fraction=scn.gpu.efficiency.fp4_matmul_fraction,
    )
    gpu = replace(scn.gpu, efficiency=eff)
    return replace(scn, topology=replace(scn.topology, gpu=gpu))


RUN_KEYS = (
    "tokens",
    "usd_per_gpu_hour",
    "gpu_failures_per_year",
    "checkpoint_interval_min",
    "checkpoint_bytes_per_param",
    "checkpoint_async",
    "storage_write_GBps",
    "restart_min",
    "power_utilization",
    "pue",
)


def run_from_table(table: Mapping[str, Any]) -> specs.RunSpec:
    """[run] (issue 15): the whole-run plan's inputs, human units -> SI. Defaults: simulator/specs.py."""
    _check_keys(table, RUN_KEYS, "run")
    if "tokens" not in table:
        raise ConfigError("missing required key (training tokens, e.g. 15e12)", key="run.tokens")
    usd = table.get("usd_per_gpu_hour")
    return specs.RunSpec(
        tokens=_num(table, "tokens", "run"),
        usd_per_gpu_hour=None if usd is None else _num(table, "usd_per_gpu_hour", "run"),
        gpu_failure_rate_per_s=_num(
            table, "gpu_failures_per_year", "run", specs.DEFAULT_GPU_FAILURES_PER_YEAR
        )
        / units.YEAR_S,
        checkpoint_interval_s=_num(table, "checkpoint_interval_min", "run", 0.0) * units.MIN_S,
        checkpoint_bytes_per_param=_num(
            table, "checkpoint_bytes_per_param", "run", specs.DEFAULT_CHECKPOINT_BYTES_PER_PARAM
        ),
        checkpoint_async=table.get("checkpoint_async", False),
        storage_write_bytes_per_s=units.gBps_to_bytes_per_s(
            _num(table, "storage_write_GBps", "run", specs.DEFAULT_STORAGE_WRITE_GBPS)
        ),
        restart_s=_num(table, "restart_min", "run", specs.DEFAULT_RESTART_MIN) * units.MIN_S,
        power_utilization=_num(table, "power_utilization", "run", specs.DEFAULT_POWER_UTILIZATION),
        pue=_num(table, "pue", "run", specs.DEFAULT_PUE),
    )


def _sweep_table(table: Mapping[str, Any]) -> tuple[tuple[str, tuple[object, ...]], ...]:
    _check_keys(table, SWEEP_KEYS, "sweep")
    out = []
    for key, value in table.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ConfigError("must be a non-empty list", key=f"sweep.{key}")
        if len(values) > 10_000:
            raise ConfigError("more than 10,000 values", key=f"sweep.{key}")
        for v in values:
            if isinstance(v, dict | list):
                raise ConfigError(f"values must be scalars, got {v!r}", key=f"sweep.{key}")
        out.append((key, tuple(values)))
    return tuple(out)


def run_to_table(run: specs.RunSpec) -> dict[str, Any]:
    """The inverse of run_from_table: a RunSpec as its [run] table (human units)."""
    out: dict[str, Any] = {
        "tokens": run.tokens,
        "gpu_failures_per_year": run.gpu_failure_rate_per_s * units.YEAR_S,
        "checkpoint_interval_min": run.checkpoint_interval_s / units.MIN_S,
        "checkpoint_bytes_per_param": run.checkpoint_bytes_per_param,
        "checkpoint_async": run.checkpoint_async,
        "storage_write_GBps": run.storage_write_bytes_per_s / units.GIGA,
        "restart_min": run.restart_s / units.MIN_S,
        "power_utilization": run.power_utilization,
        "pue": run.pue,
    }
    if run.usd_per_gpu_hour is not None:
        out["usd_per_gpu_hour"] = run.usd_per_gpu_hour
    return out


def scenario_input_files(path: str | Path) -> list[Path]:
    """Every file loading `path` reads: the scenario, its topology file and its config.json.
    Best effort (a file that cannot be parsed yields what was found); used to refuse an output
    path that would overwrite an input."""
    scenario = Path(path)
    found = [scenario]
    try:
        data = read_toml(scenario)
    except ConfigError:
        return found
    base = scenario.resolve().parent
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("topology"), str):
        try:
            found.append(resolve_topology_path(cluster["topology"], base))
        except ConfigError:
            pass
    model = data.get("model")
    ref = model.get("hf_config") if isinstance(model, dict) else None
    if isinstance(ref, str) and ref:
        given = Path(ref) if Path(ref).is_absolute() else base / ref
        found.append(given / "config.json" if given.is_dir() else given)
    return found
