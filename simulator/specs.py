"""Frozen, validated descriptions of what is simulated (DESIGN.md §2-3).

Every dataclass validates itself in `__post_init__` and raises `ConfigError`
naming the offending key (the loader adds the file). All quantities are SI;
derived values are properties, never fields filled in later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .names import canonical, did_you_mean
from .routing_skew import DROPLESS_EXPERT_LOAD_CV, FORCED_EXPERT_LOAD_CV, busiest_rank_factor
from .schedules import check_schedule, num_virtual_stages
from .units import DAY_S, GIGA, MIN_S, YEAR_S

DTYPES = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
ROUTING = ("balanced", "dropless", "round_robin")
DISPATCH_DTYPES = ("bf16", "fp8")
# MLP activation when it is not the gated_mlp default (SwiGLU, else GELU): "squared_relu" is
# Nemotron-4's relu(x)^2 (its kernels: `[kernels] squared_relu`, SQUARED_RELU_IMPLS); "clamped_quick_geglu"
# is GPT-OSS's gated quick-GELU with clamped inputs (x_glu <= 7, |x_linear| <= 7, +1 on the linear
# half: Megatron-Bridge GPTOSSBridge activation_func_clamp_value = 7.0, glu_linear_offset = 1.0)
ACTIVATIONS = ("", "squared_relu", "clamped_quick_geglu")
GATED_ACTIVATIONS = ("clamped_quick_geglu",)
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe", "dualpipev")
TWO_CHUNK_SCHEDULES = ("zb-v", "dualpipe", "dualpipev")  # two model chunks per stage by construction
# Pipeline schedules at pp = 1, where there is no pipeline (Scenario.warnings): "interleaved" (vp
# = 1 there) runs 1F1B's step exactly; the zero-bubble ones still defer the weight-gradient passes
# behind the input-gradient ones (less of the gradient reduce hidden: their step is not 1F1B's);
# GPipe's order (all forwards first, every micro-batch's activations held) is a real choice at
# pp = 1; dualpipe is refused there (it needs an even pp)
NO_PIPELINE_SAME_AS_1F1B = ("interleaved",)
NO_PIPELINE_DEFERRED_WGRAD = ("zb-h1", "zb-v", "dualpipev")


def schedule_label(schedule: str, pp: int, vp: int) -> str:
    """The schedule as the text outputs show it: "no pipeline" at pp = 1 (with the schedule whose
    order of passes still shapes the step: GPipe's, the zero-bubble ones'), else the schedule and vp."""
    if pp == 1:
        same = schedule in ("1f1b", *NO_PIPELINE_SAME_AS_1F1B)
        return "no pipeline" if same else f"no pipeline ({schedule} order)"
    return schedule + (f" vp={vp}" if vp > 1 else "")


RECOMPUTE = ("none", "selective", "full")
# [parallel] cp_comm_type: how context-parallel attention exchanges K/V (program.CP_COMM_NOTE).
# Megatron-Core's --cp-comm-type names for Transformer Engine's implementations (p2p: the
# load-balanced ring, Megatron-Core's default; allgather: TE AttnFuncWithCPAndKVAllGather, the
# Llama 3 paper's design; a2a: TE AttnFuncWithCPAndQKVOA2A, DeepSpeed-Ulysses' all-to-all over
# heads) and PyTorch's experimental context_parallel with its two rotate methods.
CP_COMM_TYPES = ("p2p", "allgather", "a2a", "torch-allgather", "torch-alltoall")
# Megatron-Core --recompute-modules (transformer_config.py, `recompute_modules`): the modules a
# selective recomputation re-runs in the backward pass instead of keeping their activations.
# Megatron's default for --recompute-granularity selective is ["core_attn"].
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
# Megatron-Core --exp-avg-dtype / --exp-avg-sq-dtype (with --use-precision-aware-optimizer): the
# storage format of Adam's first and second moments; bytes per element.
MOMENT_DTYPES = ("fp32", "bf16", "fp16", "fp8")
# [memory] sharded_grad_dtype: how a ZeRO-2/3 rank keeps its gradient shard between micro-batches.
# "" = in the gradient buffer's own dtype (grad_reduce_dtype; Megatron-FSDP, DeepSpeed), the
# optimizer adding an fp32 copy where that is 16-bit; "fp32" = PyTorch FSDP (FlatParameter):
# each reduce-scattered shard is cast to the fp32 parameter's dtype and accumulated there
# (torch/distributed/fsdp/_runtime_utils.py _post_backward_hook, _cast_grad_to_param_dtype)
SHARDED_GRAD_DTYPES = ("fp32",)
# [memory] sharded_param_dtype: how a ZeRO-3 rank keeps its parameter shard. "" = the 16-bit model
# weight beside the optimizer's fp32 master (Megatron-FSDP's model-weight buffer, DeepSpeed's fp16
# partition); "fp32" = PyTorch FSDP mixed precision: the fp32 shard is the only one (the optimizer's
# parameter), cast to a 16-bit `_mp_shard` before each all-gather and freed after it
# (fsdp/flat_param.py pre_unshard / post_unshard _free_low_precision_sharded_param)
SHARDED_PARAM_DTYPES = ("fp32",)
MOMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
INTRA_FABRICS = ("nvswitch", "pcie", "nvlink")
INTER_FABRICS = ("rail-optimized", "fat-tree", "rail-only")
RANK_AXES = ("tp", "cp", "dp", "pp")

# [cluster] gpu_speed_spread (simulator/gpu_spread.py): a coefficient of variation above this makes
# 1 + σ·Z negative for some of many GPUs
MAX_GPU_SPEED_SPREAD = 0.5
MAX_GPUS = 1_000_000  # larger than any cluster built; guards against typos like 1e12
MAX_DIM = 10_000_000
# [model] layer_types entries (LOCAL_ATTENTION_NOTE in simulator/flops.py)
LAYER_TYPES = ("full", "sliding", "chunked")
FULL_ATTENTION = ("full", 0)
MAX_LAYERS = 100_000  # ~500x the deepest published transformer; per-layer loops stay fast
# ~50x the largest published models. Bounds the work of costing a step (DP gradient buckets
# scale with parameters): a typo like hidden = 9999360 must not run for minutes.
MAX_PARAMS = 1e14
# Discrete-event budget: pp·vp·micro-batches tasks per stage timeline (~130 µs and ~12 KB each);
# above every published job (MT-NLG 530B in Narayanan et al. Table 2: 35·3·1120 = 117,600),
# low enough that no scenario runs for more than about half a minute.
MAX_PIPELINE_TASKS = 250_000


# ----------------------------------------------------------------------------- checks
def _check_int(key: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {value!r}", key=key)
    if value < minimum:
        raise ConfigError(f"must be >= {minimum}, got {value}", key=key)
    if maximum is not None and value > maximum:
        raise ConfigError(f"must be <= {maximum}, got {value}", key=key)


def _check_num(
    key: str,
    value: object,
    *,
    minimum: float = 0.0,
    strict: bool = False,
    maximum: float | None = None,
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, got {value!r}", key=key)
    if not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", key=key)
    if strict and value <= minimum:
        raise ConfigError(f"must be > {minimum:g}, got {value!r}", key=key)
    if not strict and value < minimum:
        raise ConfigError(f"must be >= {minimum:g}, got {value!r}", key=key)
    if maximum is not None and value > maximum:
        raise ConfigError(f"must be <= {maximum:g}, got {value!r}", key=key)


def _check_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", key=key)


def _check_choice(key: str, value: object, allowed: tuple[str, ...]) -> str:
    """The allowed name `value` stands for (any case, or a common alias such as `bfloat16`
    for `bf16`, simulator/names.py); an error with the closest name otherwise."""
    found = canonical(value, allowed)
    if found is None:
        hint = did_you_mean(value, allowed)
        raise ConfigError(f"must be one of {', '.join(allowed)}; got {value!r}{hint}", key=key)
    return found


def _check_modules(key: str, value: object) -> tuple[str, ...]:
    """A list of RECOMPUTE_MODULES names, canonical, each once, in the given order."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"must be a list of module names ({', '.join(RECOMPUTE_MODULES)}), got {value!r}", key=key
        )
    out: list[str] = []
    for item in value:
        name = _check_choice(key, item, RECOMPUTE_MODULES)
        if name not in out:
            out.append(name)
    return tuple(out)


def _check_layout(key: str, value: object) -> tuple[int, ...]:
    """A list of non-negative layer counts (one per virtual stage)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"must be a list of layer counts per virtual stage or a Megatron layout string, got {value!r}",
            key=key,
        )
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_DIM:
            raise ConfigError(f"layer counts must be integers >= 0, got {item!r}", key=key)
    return tuple(value)


def _check_graph_modules(impl: str, value: object) -> tuple[str, ...]:
    """`kernels.cuda_graph_modules` for `impl`: canonical CUDA_GRAPH_MODULES names, each once, with
    Megatron-Core's own checks (transformer_config.py __post_init__, "Cuda Graphs")."""
    key = "kernels.cuda_graph_modules"
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"must be a list of module names ({', '.join(CUDA_GRAPH_MODULES)}), got {value!r}", key=key
        )
    out: list[str] = []
    for item in value:
        if isinstance(item, str) and item.strip().lower() == "mamba":
            raise ConfigError("'mamba' graphs a Mamba layer; mfusim models no Mamba layers", key=key)
        name = _check_choice(key, item, CUDA_GRAPH_MODULES)
        if name not in out:
            out.append(name)
    if not out:
        return ()
    if impl == "none":
        raise ConfigError(
            f"{out} captures nothing without CUDA graphs: set kernels.cuda_graph_impl = "
            '"local" or "transformer_engine", or leave the list empty',
            key=key,
        )
    if impl == "full_iteration":
        raise ConfigError(
            'must be empty with cuda_graph_impl = "full_iteration" (one graph per step)', key=key
        )
    if "moe" in out:
        # Megatron asserts 'moe cuda graph is only supported with drop-padding MoE'
        # (moe_expert_capacity_factor with moe_pad_expert_input_to_capacity): dropless MoE has
        # data-dependent shapes. mfusim models dropless routing only.
        raise ConfigError(
            "'moe' needs drop-and-pad MoE, which mfusim does not model; use 'moe_router', 'moe_preprocess'",
            key=key,
        )
    if impl == "local" and ("moe_router" in out or "moe_preprocess" in out):
        # Megatron's local implementation graphs the router and the preprocess together: it adds
        # the missing one of the pair (transformer_config.py)
        out += [m for m in ("moe_router", "moe_preprocess") if m not in out]
    if "moe_preprocess" in out and "moe_router" not in out:
        raise ConfigError(
            "'moe_preprocess' is only graphed together with 'moe_router' (Megatron-Core)", key=key
        )
    return tuple(out)


def _set(obj: object, name: str, value: object) -> None:
    """Store the canonical spelling of a name in a frozen dataclass during __post_init__."""
    if getattr(obj, name) != value:
        object.__setattr__(obj, name, value)


def _check_str(key: str, value: object) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {value!r}", key=key)


# ----------------------------------------------------------------------------- model
@dataclass(frozen=True, slots=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2 arXiv 2405.04434 §2.1; DeepSeek-V3, Kimi-K2).

    Queries: h -> q_lora_rank -> heads·(nope + rope) (q_lora_rank 0: one full-rank h -> heads·(nope+rope)).
    Keys/values: h -> kv_lora_rank + rope (the rope part is one shared key head), then
    kv_lora_rank -> heads·(nope + v). Output: heads·v -> h.
    """

    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128

    def __post_init__(self) -> None:
        _check_int("model.mla.q_lora_rank", self.q_lora_rank, minimum=0, maximum=MAX_DIM)
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _check_int(f"model.mla.{key}", getattr(self, key), maximum=MAX_DIM)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


# [model.moe] keys that mean nothing without experts: (key, ModelSpec field, its default)
_MOE_ONLY_KEYS = (
    ("expert_ffn_hidden", "expert_ffn_hidden", 0),
    ("shared_expert_ffn_hidden", "shared_expert_ffn_hidden", 0),
    ("layer_interval", "moe_layer_interval", 1),
    ("first_dense_layers", "first_dense_layers", 0),
    ("routing", "routing", "balanced"),
    ("load_imbalance", "load_imbalance", 0.0),
    ("max_nodes_per_token", "max_nodes_per_token", 0),
    ("dispatch_dtype", "dispatch_dtype", "bf16"),
)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer. `kv_heads < heads` is GQA/MQA."""

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    kv_heads: int = 0  # 0 -> heads
    ffn_hidden: int = 0  # 0 -> 4 * hidden
    gated_mlp: bool = False
    head_dim: int = 0  # 0 -> hidden // heads
    tied_embeddings: bool = False
    position_embeddings: bool = False  # learned absolute positions (GPT-2/3); rotary otherwise
    activation: str = ""  # "" = SwiGLU (gated_mlp) or GELU; "squared_relu" (ACTIVATIONS)
    linear_bias: bool = False  # biases on the linear layers and experts (Megatron add_bias_linear)
    qk_norm: bool = False  # RMSNorm of each query and key head before RoPE (Qwen3: qk_layernorm)
    rope_mscale: float = 1.0  # YaRN attention factor applied to RoPE's cos/sin (1 = none)
    # learnable softmax offset per head (GPT-OSS "sinks"; Megatron-Core softmax_type = "learnable")
    attention_sinks: bool = False
    num_experts: int = 0  # 0 = dense model
    top_k: int = 0
    expert_ffn_hidden: int = 0  # 0 -> ffn_hidden
    shared_expert_ffn_hidden: int = 0
    moe_layer_interval: int = 1  # every k-th layer is MoE when num_experts > 0
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    routing: str = "balanced"  # balanced | dropless | round_robin
    load_imbalance: float = (
        0.0  # busiest EP rank's tokens / mean; 0 -> from routing + layout (busiest_rank_load)
    )
    max_nodes_per_token: int = 0  # node-limited routing (DeepSeek-V3: 4); 0 = unlimited
    dispatch_dtype: str = "bf16"  # bf16 | fp8 (FP8 dispatch, BF16 combine)
    mla: MLASpec | None = None
    mtp_layers: int = 0  # DeepSeek multi-token-prediction modules (one transformer layer each)
    # hidden/attention dropout probability (Megatron-LM's default 0.1 for both); 0 = none, and
    # then no dropout masks are stored (torch dropout with p = 0 returns its input)
    dropout: float = 0.1
    # local attention (LOCAL_ATTENTION_NOTE): a sliding window of `sliding_window` keys (the query
    # itself included; 0 = none), chunked attention within `attention_chunk_size`-token chunks
    # (Llama 4; 0 = none), on the layers `layer_types` marks "sliding" / "chunked" (one entry per
    # layer; empty = every layer uses whichever of the two is given)
    sliding_window: int = 0
    attention_chunk_size: int = 0
    layer_types: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)  # import warnings, shown by the CLI

    def __post_init__(self) -> None:
        p = "model"
        if self.mla is not None and not isinstance(self.mla, MLASpec):
            raise ConfigError("must be a table", key=f"{p}.mla")
        _check_int(f"{p}.moe.first_dense_layers", self.first_dense_layers, minimum=0, maximum=MAX_LAYERS)
        _set(self, "routing", _check_choice(f"{p}.moe.routing", self.routing, ROUTING))
        _check_num(f"{p}.moe.load_imbalance", self.load_imbalance, maximum=1e3)
        if 0 < self.load_imbalance < 1:
            raise ConfigError(
                f"must be >= 1 (busiest rank / mean), got {self.load_imbalance!r}",
                key=f"{p}.moe.load_imbalance",
            )
        _check_int(f"{p}.moe.max_nodes_per_token", self.max_nodes_per_token, minimum=0, maximum=MAX_GPUS)
        _set(
            self,
            "dispatch_dtype",
            _check_choice(f"{p}.moe.dispatch_dtype", self.dispatch_dtype, DISPATCH_DTYPES),
        )
        _check_int(f"{p}.mtp_layers", self.mtp_layers, minimum=0, maximum=MAX_LAYERS)
        _check_num(f"{p}.dropout", self.dropout, maximum=0.999)
        _check_str(f"{p}.name", self.name)
        _check_int(f"{p}.layers", self.layers, maximum=MAX_LAYERS)
        for key in ("hidden", "heads", "vocab", "seq_len"):
            _check_int(f"{p}.{key}", getattr(self, key), maximum=MAX_DIM)
        for key in ("kv_heads", "ffn_hidden", "head_dim"):
            _check_int(f"{p}.{key}", getattr(self, key), minimum=0, maximum=MAX_DIM)
        # the [model.moe] fields, named as the scenario writes them
        for key in ("num_experts", "top_k", "expert_ffn_hidden", "shared_expert_ffn_hidden"):
            _check_int(f"{p}.moe.{key}", getattr(self, key), minimum=0, maximum=MAX_DIM)
        _check_int(f"{p}.moe.layer_interval", self.moe_layer_interval, maximum=MAX_DIM)
        for key in (
            "gated_mlp",
            "tied_embeddings",
            "position_embeddings",
            "linear_bias",
            "qk_norm",
            "attention_sinks",
        ):
            _check_bool(f"{p}.{key}", getattr(self, key))
        _check_num(f"{p}.rope_mscale", self.rope_mscale, strict=True, maximum=100.0)
        if self.position_embeddings and self.rope_mscale != 1.0:
            # the factor scales RoPE's cos/sin (program.py UNFUSED_ROPE_PASSES); with learned
            # positions there is no RoPE, and the value would be dropped without a word
            raise ConfigError(
                "a YaRN attention factor scales RoPE: this model has learned absolute positions "
                "(position_embeddings = true), no RoPE; leave rope_mscale at 1",
                key=f"{p}.rope_mscale",
            )
        _set(self, "activation", _check_choice(f"{p}.activation", self.activation, ACTIVATIONS))
        gated_activation = self.activation in GATED_ACTIVATIONS
        if self.activation and self.gated_mlp != gated_activation:
            fix = "set gated_mlp = true" if gated_activation else "set gated_mlp = false"
            raise ConfigError(
                f"{self.activation} {'is' if gated_activation else 'is not'} a gated MLP: {fix}",
                key=f"{p}.activation",
            )
        if self.first_dense_layers and self.first_dense_layers >= self.layers and self.num_experts:
            raise ConfigError(
                f"must be below layers ({self.layers}) or no layer is MoE", key=f"{p}.moe.first_dense_layers"
            )
        if self.num_experts and self.moe_layer_interval > self.layers - self.first_dense_layers:
            raise ConfigError(
                f"every {self.moe_layer_interval}-th layer past the first {self.first_dense_layers} "
                f"of {self.layers}: no layer is MoE",
                key=f"{p}.moe.layer_interval",
            )
        if self.head_dim == 0 and self.hidden % self.heads and self.mla is None:
            raise ConfigError(
                f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}) unless head_dim is given",
                key=f"{p}.heads",
            )
        if self.num_kv_heads > self.heads or self.heads % self.num_kv_heads:
            raise ConfigError(
                f"must divide heads ({self.heads}); got {self.num_kv_heads}", key=f"{p}.kv_heads"
            )
        if self.num_experts:
            if not self.top_k:
                raise ConfigError(
                    f"missing: num_experts = {self.num_experts} needs top_k, the experts each token is "
                    f"routed to (1 to {self.num_experts})",
                    key=f"{p}.moe.top_k",
                )
            if not 1 <= self.top_k <= self.num_experts:
                raise ConfigError(
                    f"must be between 1 and num_experts ({self.num_experts}); got {self.top_k}",
                    key=f"{p}.moe.top_k",
                )
        elif self.top_k:
            raise ConfigError("top_k given without num_experts", key=f"{p}.moe.top_k")
        else:  # a dense model: an expert key would be silently ignored (exact or refused)
            for key, field, default in _MOE_ONLY_KEYS:
                if getattr(self, field) != default:
                    raise ConfigError(
                        f"{key} given without num_experts: this model is dense (has no experts); "
                        "remove it, or set [model.moe] num_experts and top_k",
                        key=f"{p}.moe.{key}",
                    )
        self._check_local_attention()
        if self.approx_params > MAX_PARAMS:
            raise ConfigError(
                f"describes about {self.approx_params:.2g} parameters, over the simulator's bound of "
                f"{MAX_PARAMS:.0e}; check layers, hidden, ffn_hidden, vocab and the MoE sizes",
                key=p,
            )

    def _check_local_attention(self) -> None:
        p = "model"
        _check_int(f"{p}.sliding_window", self.sliding_window, minimum=0, maximum=MAX_DIM)
        _check_int(f"{p}.attention_chunk_size", self.attention_chunk_size, minimum=0, maximum=MAX_DIM)
        types = self.layer_types
        if isinstance(types, list):
            types = tuple(types)
            _set(self, "layer_types", types)
        if not isinstance(types, tuple) or not all(isinstance(k, str) for k in types):
            raise ConfigError(
                f"must be a list of {', '.join(LAYER_TYPES)} (one per layer)", key=f"{p}.layer_types"
            )
        for kind in types:
            if kind not in LAYER_TYPES:
                raise ConfigError(
                    f"unknown layer type {kind!r}: expected one of {', '.join(LAYER_TYPES)}",
                    key=f"{p}.layer_types",
                )
        if types and len(types) != self.layers:
            raise ConfigError(
                f"{len(types)} entries for {self.layers} layers: give one per layer", key=f"{p}.layer_types"
            )
        windows = {
            "sliding": ("sliding_window", self.sliding_window),
            "chunked": ("attention_chunk_size", self.attention_chunk_size),
        }
        for kind, (key, size) in windows.items():
            if kind in types and not size:
                raise ConfigError(
                    f"layer_types / layer_pattern marks {kind} layers but {key} is not given",
                    key=f"{p}.{key}",
                )
        for kind, (key, size) in windows.items():
            if types and size and kind not in types:
                raise ConfigError(
                    f"{key} = {size} but no layer of layer_types / layer_pattern is {kind!r}: it would be ignored",
                    key=f"{p}.{key}",
                )
        if not types and self.sliding_window and self.attention_chunk_size:
            raise ConfigError(
                "both sliding_window and attention_chunk_size are given: say which layers use which",
                key=f"{p}.layer_types",
            )

    def attention_window(self, layer: int) -> tuple[str, int]:
        """(kind, size) of layer `layer`'s self-attention mask: ("full", 0) causal over the whole
        sequence, ("sliding", w) each query over its last w positions (itself included), ("chunked",
        c) causal within c-token chunks. A window or chunk no shorter than seq_len is full causal
        attention (the same computation) and is returned as such. DeepSeek's MTP modules copy the
        last layer (layer >= layers reads the last one)."""
        if self.layer_types:
            kind = self.layer_types[min(layer, self.layers - 1)]
        elif self.sliding_window:
            kind = "sliding"
        elif self.attention_chunk_size:
            kind = "chunked"
        else:
            return FULL_ATTENTION
        size = (
            self.sliding_window
            if kind == "sliding"
            else self.attention_chunk_size
            if kind == "chunked"
            else 0
        )
        if kind == "full" or size >= self.seq_len:
            return FULL_ATTENTION
        return (kind, size)

    def layer_kind(self, layer: int) -> tuple[bool, tuple[str, int]]:
        """What distinguishes one layer's costing from another's: MoE or dense, and its attention
        mask (attention_window)."""
        return (self.is_moe_layer(min(layer, self.layers - 1)), self.attention_window(layer))

    @property
    def layer_kinds(self) -> dict[tuple[bool, tuple[str, int]], int]:
        """Each distinct layer_kind with its number of layers, in layer order of first appearance."""
        out: dict[tuple[bool, tuple[str, int]], int] = {}
        for i in range(self.layers):
            k = self.layer_kind(i)
            out[k] = out.get(k, 0) + 1
        return out

    @property
    def has_local_attention(self) -> bool:
        """Some layer's attention is windowed or chunked over a shorter span than seq_len."""
        return any(self.attention_window(i) != FULL_ATTENTION for i in range(self.layers))

    # derived -------------------------------------------------------------
    @property
    def approx_params(self) -> float:
        """An upper estimate of the parameter count (every layer MoE if any is), for sanity bounds.

        The exact counts live in simulator/flops.py; this one only guards against absurd sizes.
        """
        h, mats = float(self.hidden), (3 if self.gated_mlp else 2)
        attn = h * (self.qk_dim + 2 * self.kv_dim) + self.v_dim * h + self.qk_dim * h
        if self.num_experts:
            mlp = self.num_experts * mats * h * self.expert_ffn + mats * h * self.shared_expert_ffn_hidden
        else:
            mlp = mats * h * self.ffn
        return (self.layers + self.mtp_layers) * (attn + mlp) + 2.0 * self.vocab * h

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def dim_per_head(self) -> int:
        if self.mla is not None:
            return self.mla.qk_head_dim
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (= hidden for standard models; heads·(nope+rope) for MLA)."""
        return self.heads * self.dim_per_head

    @property
    def qk_dim(self) -> int:
        """Width over which scores Q·Kᵀ are summed, all heads (= q_dim)."""
        return self.q_dim

    @property
    def v_dim(self) -> int:
        """Width of the attention output, all heads (= q_dim except MLA: heads·v_head_dim)."""
        if self.mla is not None:
            return self.heads * self.mla.v_head_dim
        return self.q_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of K and V (GQA: kv_heads·head_dim; MLA: per-head after up-projection)."""
        if self.mla is not None:
            return self.heads * self.mla.qk_head_dim
        return self.num_kv_heads * self.dim_per_head

    def busiest_rank_load(self, ep: int, tokens: int) -> float:
        """Busiest EP rank's routed tokens / the mean: the explicit `load_imbalance`, else the
        expected maximum over `ep` ranks with `tokens` distinct tokens routed into the EP group per
        micro-batch -- of the sampling spread alone for balanced routing (forced: random router
        logits), of the trained router's skew plus sampling for dropless (routing_skew.py); exactly 1
        for round-robin routing (every expert the same count)."""
        if self.load_imbalance:
            return self.load_imbalance
        if self.routing == "round_robin":  # every expert, hence every rank, the same count
            return 1.0
        cv = FORCED_EXPERT_LOAD_CV if self.routing == "balanced" else DROPLESS_EXPERT_LOAD_CV
        return busiest_rank_factor(self.num_experts, self.top_k, ep, tokens, cv)

    @property
    def node_limit(self) -> int:
        """Nodes a token's experts may span (0 = any): `max_nodes_per_token`, a learned router's
        limit, which round-robin routing -- a gate that replaces the router -- does not apply."""
        return 0 if self.routing == "round_robin" else self.max_nodes_per_token

    @property
    def uneven_expert_counts(self) -> bool:
        """Whether the experts' token counts differ from one another (grouped GEMMs: each expert's
        last row tile on average half full, costs.grouped_matmul_time_s): dropless routing, and
        forced balancing, whose random router logits spread the counts (routing_skew.py) -- all
        but an explicit load_imbalance = 1 on balanced routing (every expert the same count, as
        token dropping padded to capacity gives) and round-robin routing without an explicit
        load_imbalance above 1."""
        if self.routing == "round_robin":
            return self.load_imbalance > 1.0
        return self.routing == "dropless" or self.load_imbalance != 1.0

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.expert_ffn_hidden or self.ffn

    def is_moe_layer(self, layer: int) -> bool:
        """Layer `layer` (0-based) has routed experts: past the first dense layers, every k-th
        (HF Llama 4: (i + 1) % interleave_moe_layer_step == 0; DeepSeek: i >= first_k_dense_replace)."""
        k = self.moe_layer_interval
        return self.is_moe and layer >= self.first_dense_layers and layer % k == k - 1

    @property
    def num_moe_layers(self) -> int:
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))


# ----------------------------------------------------------------------------- GPU
# The physical range of GPUEfficiency.expert_gemm_overhead_s (docs/calibration.md, "Level 2"): 0 (a
# host far ahead of the GPU hides all of the path's per-GEMM work) to 35 us, the largest published
# per-GEMM cost of the multi-stream call (NVIDIA/TransformerEngine#3134: 0.267 ms for 8 GEMMs, 33 us
# each including the GEMM, from an idle GPU) to the next 5 us.
EXPERT_GEMM_OVERHEAD_RANGE_S = (0.0, 35e-6)


@dataclass(frozen=True, slots=True)
class GPUEfficiency:
    """System-level residuals of a training job on one GPU type (level 2 of the calibration,
    docs/calibration.md): what a step costs beyond its kernels. Kernel speeds themselves come
    from the kernel model (simulator/kernels.py, fitted to published microbenchmarks only).
    Each value is fitted end-to-end within the physical range stated in docs/calibration.md."""

    sustained_clock_fraction: float = 0.92  # compute throughput under sustained load vs the microbenchmarks
    kernel_launch_s: float = 2e-6  # host/launch gap per kernel not hidden by the asynchronous queue
    microbatch_overhead_s: float = 1e-3  # host work per micro-batch and phase (Python, scheduling, hooks)
    nccl_bw_fraction: float = 0.85  # achieved / link bandwidth of collectives inside a training job
    overlap_slowdown: float = 0.1  # compute slowdown while communication is overlapped with it
    # NVFP4 GEMMs' achieved efficiency relative to the kernel model's FP8-class one (16-element block
    # scales, the recipe's BF16-kept layers): recipes.toml (issue 13), 1 = not calibrated
    fp4_matmul_fraction: float = 1.0
    # Time per eager per-expert GEMM of Transformer Engine GroupedLinear's multi-stream cuBLASLt path
    # (each local expert's fc1 and fc2, forward, dgrad and wgrad; program.EXPERT_GEMM_OVERHEAD_NOTE),
    # in series on the compute stream; not charged on the fused grouped MLP, in a CUDA graph of the
    # MoE layer, or on dense layers. Fitted on the MoE rows per stack and architecture within
    # EXPERT_GEMM_OVERHEAD_RANGE_S (docs/calibration.md); the default is the prior, its middle.
    expert_gemm_overhead_s: float = sum(EXPERT_GEMM_OVERHEAD_RANGE_S) / 2

    def __post_init__(self) -> None:
        _check_num(
            "gpu.efficiency.sustained_clock_fraction", self.sustained_clock_fraction, strict=True, maximum=1.0
        )
        _check_num("gpu.efficiency.nccl_bw_fraction", self.nccl_bw_fraction, strict=True, maximum=1.0)
        _check_num("gpu.efficiency.kernel_launch_s", self.kernel_launch_s)
        _check_num("gpu.efficiency.microbatch_overhead_s", self.microbatch_overhead_s)
        _check_num("gpu.efficiency.overlap_slowdown", self.overlap_slowdown, maximum=1.0)
        _check_num("gpu.efficiency.fp4_matmul_fraction", self.fp4_matmul_fraction, strict=True, maximum=1.0)
        _check_num("gpu.efficiency.expert_gemm_overhead_s", self.expert_gemm_overhead_s)


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU type: dense peaks per dtype, HBM, and calibrated efficiencies."""

    name: str
    peak_bf16_flop_per_s: float
    peak_fp16_flop_per_s: float
    peak_fp8_flop_per_s: float  # 0 = not supported
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    efficiency: GPUEfficiency = field(default_factory=GPUEfficiency)
    num_sms: int = 108  # streaming multiprocessors: sets GEMM wave quantization
    source: str = ""
    peak_fp4_flop_per_s: float = 0.0  # dense NVFP4 tensor-core peak; 0 = not supported
    # Whole-run energy (simulator/plan.py); 0 = not in the catalog. Datasheet sources in gpus.toml.
    board_power_w: float = 0.0  # rated board power (TDP / max TGP)
    node_overhead_w_per_gpu: float = 0.0  # rated server power minus its GPUs' board power, per GPU
    host_link_bytes_per_s: float = 0.0  # GPU <-> host memory, one direction (checkpoints, offloading)
    nvlink_bytes_per_s: float = (
        0.0  # the most NVLink the GPU's own ports carry, one direction; 0 = not capped
    )

    def __post_init__(self) -> None:
        _check_num("gpu.board_power_w", self.board_power_w, maximum=1e5)
        _check_num("gpu.node_overhead_w_per_gpu", self.node_overhead_w_per_gpu, maximum=1e5)
        _check_num("gpu.host_link_GBps", self.host_link_bytes_per_s)
        _check_num("gpu.nvlink_GBps_per_direction", self.nvlink_bytes_per_s)
        _check_num("gpu.peak_bf16_tflops", self.peak_bf16_flop_per_s, strict=True)
        _check_num("gpu.peak_fp16_tflops", self.peak_fp16_flop_per_s, strict=True)
        _check_num("gpu.peak_fp8_tflops", self.peak_fp8_flop_per_s)
        _check_num("gpu.peak_fp4_tflops", self.peak_fp4_flop_per_s)
        _check_num("gpu.hbm_gib", self.hbm_bytes, strict=True)
        _check_num("gpu.hbm_TBps", self.hbm_bandwidth_bytes_per_s, strict=True)

    def peak_flop_per_s(self, dtype: str) -> float:
        peak = {
            "bf16": self.peak_bf16_flop_per_s,
            "fp16": self.peak_fp16_flop_per_s,
            "fp8": self.peak_fp8_flop_per_s,
            # MXFP8 (OCP microscaling, 32-element blocks) runs on the FP8 tensor cores at the FP8 rate
            # on Blackwell (NVIDIA Blackwell architecture technical brief, "block-scaled FP8")
            "mxfp8": self.peak_fp8_flop_per_s if self.peak_fp4_flop_per_s > 0 else 0.0,
            "nvfp4": self.peak_fp4_flop_per_s,
            # blockwise-scaled FP8 (1x128 / 128x128 fp32 scales, DeepSeek-V3 §3.3): the FP8 tensor
            # cores at the FP8 rate with the scales applied on the CUDA cores (Hopper, cuBLAS 12.9+ /
            # DeepGEMM); Blackwell-class parts (an FP4 peak) run it as MXFP8 (specs.FP8_RECIPES)
            "fp8_blockwise": self.peak_fp8_flop_per_s if self.peak_fp4_flop_per_s <= 0 else 0.0,
        }.get(dtype, 0.0)
        if peak <= 0:
            raise ConfigError(f"GPU {self.name} has no dense {dtype} peak", key="precision.dtype")
        return peak


# ----------------------------------------------------------------------------- topology
# The slowest link a topology or scenario may state: 1 MB/s (0.008 Gb/s), far below any NVLink,
# PCIe or NIC. Below it a step can last ~1e299 s and its MFU underflow to 0 (fuzz audit: a
# scenario with nic_Gbps = 1e-300 reported mfu = 0.0).
MIN_LINK_BYTES_PER_S = 1e6


def _check_link(key: str, bytes_per_s: float, unit_bytes_per_s: float, unit: str) -> None:
    """A link bandwidth (stored in bytes/s) of at least MIN_LINK_BYTES_PER_S, refused in the
    key's own unit (`unit_bytes_per_s` bytes/s per `unit`)."""
    _check_num(key, bytes_per_s, strict=True)
    if bytes_per_s < MIN_LINK_BYTES_PER_S:
        raise ConfigError(
            f"must be at least {MIN_LINK_BYTES_PER_S / unit_bytes_per_s:g} {unit} (1 MB/s), "
            f"got {bytes_per_s / unit_bytes_per_s:g}",
            key=key,
        )


@dataclass(frozen=True, slots=True)
class IntraNodeSpec:
    fabric: str = "nvswitch"
    link_bandwidth_bytes_per_s: float = 300e9  # per GPU, one direction
    latency_s: float = 3e-6
    nvls: bool = False  # NVLink SHARP (in-switch reduction), NVSwitch gen 3+ (H100 and later)

    def __post_init__(self) -> None:
        _set(self, "fabric", _check_choice("intra_node.fabric", self.fabric, INTRA_FABRICS))
        _check_bool("intra_node.nvls", self.nvls)
        _check_link("intra_node.link_GBps_per_direction", self.link_bandwidth_bytes_per_s, GIGA, "GB/s")
        _check_num("intra_node.latency_us", self.latency_s, maximum=1.0)


@dataclass(frozen=True, slots=True)
class InterNodeSpec:
    fabric: str = "rail-optimized"
    nics_per_node: int = 8
    nic_bandwidth_bytes_per_s: float = 25e9  # per NIC, one direction
    latency_s: float = 5e-6
    nodes_per_leaf: int = 32
    oversubscription: float = 1.0
    # tiers above the leaf (issue 14): 0 = the fewest a folded Clos of `switch_radix` needs
    tiers: int = 0
    nodes_per_pod: int = 0  # nodes under one spine group (3+ tiers); 0 = what two tiers can hold
    pod_oversubscription: float = 1.0  # spine -> core bandwidth ratio above a pod
    switch_radix: int = 0  # ports per switch; 0 = the NIC speed's InfiniBand switch (40/64/144)
    planes: int = 1  # multi-plane NICs: each port split over `planes` independent networks

    def __post_init__(self) -> None:
        _set(self, "fabric", _check_choice("inter_node.fabric", self.fabric, INTER_FABRICS))
        _check_int("inter_node.tiers", self.tiers, minimum=0, maximum=5)
        _check_int("inter_node.nodes_per_pod", self.nodes_per_pod, minimum=0, maximum=MAX_GPUS)
        _check_num("inter_node.pod_oversubscription", self.pod_oversubscription, minimum=1.0, maximum=1e3)
        _check_int("inter_node.switch_radix", self.switch_radix, minimum=0, maximum=4096)
        if self.switch_radix == 1 or self.switch_radix % 2:
            raise ConfigError(
                f"must be an even port count >= 2 (or 0); got {self.switch_radix}",
                key="inter_node.switch_radix",
            )
        _check_int("inter_node.planes", self.planes, maximum=16)
        _check_int("inter_node.nics_per_node", self.nics_per_node, maximum=1024)
        _check_link("inter_node.nic_Gbps", self.nic_bandwidth_bytes_per_s, GIGA / 8, "Gb/s")
        _check_num("inter_node.latency_us", self.latency_s, maximum=1.0)
        _check_int("inter_node.nodes_per_leaf", self.nodes_per_leaf, maximum=MAX_GPUS)
        _check_num("inter_node.oversubscription", self.oversubscription, minimum=1.0, maximum=1e3)


@dataclass(frozen=True, slots=True)
class TopologySpec:
    name: str
    gpu: GPUSpec
    gpus_per_node: int
    intra_node: IntraNodeSpec
    inter_node: InterNodeSpec
    rank_order: tuple[str, ...] = ("tp", "cp", "dp", "pp")  # innermost first
    physical_gpus_per_node: int = 0  # GPUs a node has when fewer are used ([cluster] gpus_used_per_node)
    notes: tuple[str, ...] = field(default=(), compare=False)  # what loading changed, shown by the CLI
    # [cluster] gpu_speed_spread: coefficient of variation of the per-GPU speed (simulator/gpu_spread.py);
    # None = the GPU architecture's cited value (kernels.toml), 0 = every GPU equally fast
    gpu_speed_spread: float | None = None

    def __post_init__(self) -> None:
        _check_str("name", self.name)
        _check_int("gpus_per_node", self.gpus_per_node, maximum=1024)
        _check_int("gpus_used_per_node", self.physical_gpus_per_node, minimum=0, maximum=1024)
        if self.gpu_speed_spread is not None:
            _check_num("gpu_speed_spread", self.gpu_speed_spread, maximum=MAX_GPU_SPEED_SPREAD)
        if sorted(self.rank_order) != sorted(RANK_AXES):
            raise ConfigError(
                f"must be a permutation of {list(RANK_AXES)}; got {list(self.rank_order)}",
                key="rank_order",
            )

    @property
    def nic_bandwidth_per_node_bytes_per_s(self) -> float:
        return self.inter_node.nics_per_node * self.inter_node.nic_bandwidth_bytes_per_s


# ----------------------------------------------------------------------------- parallel
@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """How the job is split. Cross-checks against the model and cluster live in Scenario."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    schedule: str = "1f1b"
    sequence_parallel: bool = False
    recompute: str = "none"
    # selective recomputation: the Megatron modules re-run in backward (RECOMPUTE_MODULES);
    # empty = Megatron's default ("core_attn"). Only with recompute = "selective".
    recompute_modules: tuple[str, ...] = ()
    zero: int = 0
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    grad_bucket_params: int = 40_000_000  # DP bucket; Megatron: max(40M, 1M*dp) parameters
    etp: int = 0  # expert tensor parallel; 0 = default: 1 with ep > 1, tp with ep = 1 (see expert_tp)
    ep_comm_overlap: bool = False  # EP all-to-all of one micro-batch hidden behind another's compute
    # Megatron-Core --delay-wgrad-compute (TransformerConfig.delay_wgrad_compute, default False; it
    # needs ep_comm_overlap): in the combined 1F1B the experts' weight gradients run as
    # `mlp.backward_dw()` after the dispatch's backward is issued, so that all-to-all waits for
    # the input gradients only (program.combined_layer_s). Megatron-Bridge's
    # _set_moe_a2a_overlap_overrides sets it with the overlap; some recipes turn it off again.
    delay_wgrad_compute: bool = False
    # Megatron-Core --moe-shared-expert-overlap (TransformerConfig.moe_shared_expert_overlap, default
    # False): the shared expert's fc1/activation/fc2 run on a side stream beside the token
    # dispatcher's all-to-alls of the same micro-batch (moe/shared_experts.py SharedExpertMLP,
    # moe/token_dispatcher.py MoEAlltoAllTokenDispatcher @a2d7d674; program.SHARED_OVERLAP_NOTE)
    shared_expert_overlap: bool = False
    # Megatron --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
    # the embedding (loss) counts as one layer of the first (last) virtual stage's share
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    # Megatron --pipeline-model-parallel-layout, decoder layers only: the transformer layers of
    # each virtual stage in path order (pp·vp entries, summing to model.layers), the embedding on
    # the first and the MTP modules and loss on the last; () = the even split (schedules.chunk_layers)
    pipeline_layout: tuple[int, ...] = ()
    # HSDP (issue 14): the ZeRO shard group is dp_shard consecutive data-parallel ranks, and
    # dp = dp_shard x replicas; 0 = dp (full sharding). PyTorch FSDP2's device mesh (replicate,
    # shard), Megatron's --num-distributed-optimizer-instances = replicas.
    dp_shard: int = 0
    # ZeRO-3/FSDP: true re-gathers every layer's parameters for each micro-batch's forward and
    # backward (FSDP2's default); false keeps a stage's gathered parameters (and accumulates
    # unsharded gradients) across its micro-batches: one gather and one reduce-scatter per step
    reshard_after_forward: bool = True
    # gradient accumulation as whole pipeline runs (torch.distributed.pipelining: NeMo AutoModel's
    # step_scheduler.local_batch_size, torchtitan's training.local_batch_size): sequences per
    # data-parallel rank in one `schedule.step()`; the step runs global_batch / (local_batch·dp)
    # of them one after another, each filling and draining the pipeline and reducing the
    # gradients of its micro-batches at each chunk's last backward, where the stage then waits for
    # them (PipelineStage; program.Program.grad_reduce_waits). 0 = the whole step in one run
    # (Megatron-Core: every micro-batch of the step in one pipeline schedule)
    local_batch: int = 0
    # context-parallel attention implementation (CP_COMM_TYPES, program.CP_COMM_NOTE): "p2p" =
    # Transformer Engine's ring (Megatron-Core's default --cp-comm-type)
    cp_comm_type: str = "p2p"

    def __post_init__(self) -> None:
        p = "parallel"
        for key in ("tp", "pp", "dp", "cp", "ep", "vp"):
            _check_int(f"{p}.{key}", getattr(self, key), maximum=MAX_GPUS)
        _check_int(f"{p}.etp", self.etp, minimum=0, maximum=MAX_GPUS)
        for key in (
            "ep_comm_overlap",
            "delay_wgrad_compute",
            "shared_expert_overlap",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ):
            _check_bool(f"{p}.{key}", getattr(self, key))
        _check_int(f"{p}.micro_batch", self.micro_batch, maximum=MAX_DIM)
        _check_int(f"{p}.global_batch", self.global_batch, maximum=100 * MAX_DIM)
        _set(self, "schedule", _check_choice(f"{p}.schedule", self.schedule, SCHEDULES))
        _set(self, "recompute", _check_choice(f"{p}.recompute", self.recompute, RECOMPUTE))
        _set(self, "recompute_modules", _check_modules(f"{p}.recompute_modules", self.recompute_modules))
        if self.recompute_modules and self.recompute != "selective":
            raise ConfigError(
                f'needs recompute = "selective" (Megatron\'s --recompute-modules applies to selective '
                f"recomputation only), got recompute = {self.recompute!r}",
                key=f"{p}.recompute_modules",
            )
        _check_int(f"{p}.zero", self.zero, minimum=0, maximum=3)
        for key in ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"):
            _check_bool(f"{p}.{key}", getattr(self, key))
        _check_int(f"{p}.grad_bucket_params", self.grad_bucket_params, maximum=10**13)
        _check_int(f"{p}.dp_shard", self.dp_shard, minimum=0, maximum=MAX_GPUS)
        _set(self, "pipeline_layout", _check_layout(f"{p}.pipeline_layout", self.pipeline_layout))
        if self.pipeline_layout and self.pipeline_extra_layers:
            raise ConfigError(
                "an explicit layout places the embedding and the loss itself; drop "
                "account_for_embedding/loss_in_pipeline_split",
                key=f"{p}.pipeline_layout",
            )
        _check_bool(f"{p}.reshard_after_forward", self.reshard_after_forward)
        _check_int(f"{p}.local_batch", self.local_batch, minimum=0, maximum=100 * MAX_DIM)
        _set(self, "cp_comm_type", _check_choice(f"{p}.cp_comm_type", self.cp_comm_type, CP_COMM_TYPES))
        if self.dp_shard and self.dp % self.dp_shard:
            raise ConfigError(
                f"must divide dp = {self.dp} (dp = dp_shard x replicas); got {self.dp_shard}",
                key=f"{p}.dp_shard",
            )
        if self.dp_shard not in (0, self.dp) and self.zero == 0:
            raise ConfigError(
                "a shard group needs sharded state: set zero >= 1 (or leave dp_shard = 0)",
                key=f"{p}.dp_shard",
            )
        if not self.reshard_after_forward and self.zero < 3:
            raise ConfigError(
                "applies to zero = 3 (FSDP) only: ZeRO-1/2 keep the full parameters anyway",
                key=f"{p}.reshard_after_forward",
            )
        if self.global_batch % (self.micro_batch * self.dp):
            raise ConfigError(
                f"must be a multiple of micro_batch*dp = {self.micro_batch}*{self.dp}"
                f" = {self.micro_batch * self.dp}; got {self.global_batch}",
                key=f"{p}.global_batch",
            )
        if self.local_batch:
            self._check_local_batch()
        if self.schedule in TWO_CHUNK_SCHEDULES:
            if self.vp > 2:
                raise ConfigError(
                    f"schedule {self.schedule!r} places exactly 2 model chunks per stage; got vp = {self.vp}",
                    key=f"{p}.vp",
                )
            object.__setattr__(self, "vp", 2)  # normalized: the schedule's two chunks
            why = _schedule_problem(self.schedule, self.pp, self.microbatches_per_run)
            if why:
                raise ConfigError(why, key=f"{p}.global_batch" if "micro-batches" in why else f"{p}.pp")
        elif self.vp > 1:
            if self.pp == 1:
                raise ConfigError("vp > 1 (interleaved) needs pp > 1", key=f"{p}.vp")
            if self.schedule != "interleaved":
                raise ConfigError(
                    f"vp = {self.vp} needs schedule = 'interleaved'; got {self.schedule!r}",
                    key=f"{p}.schedule",
                )
            if self.microbatches_per_run % self.pp:
                raise ConfigError(
                    f"the interleaved schedule needs the number of micro-batches "
                    f"({self.microbatches_per_run}{' per pipeline run' if self.local_batch else ''}) "
                    f"to be a multiple of pp ({self.pp})",
                    key=f"{p}.local_batch" if self.local_batch else f"{p}.global_batch",
                )
        elif self.schedule == "interleaved" and self.pp > 1:
            raise ConfigError("schedule 'interleaved' needs vp > 1", key=f"{p}.vp")
        tasks = self.pp * self.vp * self.microbatches_per_run
        if tasks > MAX_PIPELINE_TASKS:
            raise ConfigError(
                f"pp*vp*micro-batches = {self.pp}*{self.vp}*{self.microbatches_per_run} = {tasks:,} pipeline "
                f"tasks per step, over the simulator's budget of {MAX_PIPELINE_TASKS:,}; "
                "raise micro_batch or lower global_batch",
                key=f"{p}.global_batch",
            )

    def _check_local_batch(self) -> None:
        p = "parallel"
        if self.pp == 1:
            raise ConfigError(
                "pipeline runs need pp > 1: without a pipeline, gradient accumulation is the loop "
                "over micro-batches itself (leave local_batch = 0)",
                key=f"{p}.local_batch",
            )
        if self.local_batch % self.micro_batch:
            raise ConfigError(
                f"must be a multiple of micro_batch = {self.micro_batch}; got {self.local_batch}",
                key=f"{p}.local_batch",
            )
        if self.global_batch % (self.local_batch * self.dp):
            raise ConfigError(
                f"global_batch = {self.global_batch} must be a multiple of local_batch*dp = "
                f"{self.local_batch}*{self.dp} = {self.local_batch * self.dp}",
                key=f"{p}.local_batch",
            )
        if self.zero in (1, 2):
            raise ConfigError(
                "pipeline runs are torch.distributed.pipelining's gradient accumulation, with DDP "
                f"(zero = 0) or FSDP (zero = 3); got zero = {self.zero}",
                key=f"{p}.local_batch",
            )
        if not self.overlap_grad_reduce:
            # torch.distributed.pipelining reduces a chunk's gradients at its last backward of the
            # run and waits for them there (Program.grad_reduce_waits): no switch to defer them
            raise ConfigError(
                "with local_batch (torch.distributed.pipelining) each chunk's gradients are reduced "
                "at its last backward of the run, and the stage waits for them: leave "
                "overlap_grad_reduce = true",
                key=f"{p}.overlap_grad_reduce",
            )
        if self.zero == 3 and not self.reshard_after_forward and not self.overlap_param_gather:
            # the gathers would wait until after the optimizer, once per step; FSDP2 gathers each
            # run's parameters at its first forward (the engine's overlapped gathers)
            raise ConfigError(
                "with pipeline runs, FSDP gathers each run's parameters at its first forward: "
                "overlap_param_gather = false (gathers after the optimizer) has no meaning here",
                key=f"{p}.overlap_param_gather",
            )

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per data-parallel rank in the whole step (all pipeline runs)."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def microbatches_per_run(self) -> int:
        """Micro-batches in one pipeline run (one schedule from fill to drain): all of the
        step's, or local_batch / micro_batch with gradient accumulation as pipeline runs."""
        return self.local_batch // self.micro_batch if self.local_batch else self.num_microbatches

    @property
    def pipeline_runs(self) -> int:
        """Pipeline runs per step, one after another (1 unless `local_batch` is set)."""
        return self.num_microbatches // self.microbatches_per_run

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """What selective recomputation re-runs: `recompute_modules`, or Megatron's default
        ("core_attn", Korthikanti et al. 2022 §5) when none are listed; () unless selective."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or DEFAULT_RECOMPUTE_MODULES

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel split of each expert's matrices. Given: `etp`. Default: tp when ep = 1
        (experts split like the dense MLP: Megatron's default expert_tensor_parallel_size = tp),
        1 when ep > 1 (whole experts per rank, as Megatron-Bridge's MoE recipes set it)."""
        if self.etp:
            return self.etp
        return self.tp if self.ep == 1 else 1

    @property
    def shard_size(self) -> int:
        """Ranks of the data-parallel group one ZeRO/FSDP shard group spans (dp_shard, or dp)."""
        return self.dp_shard or self.dp

    @property
    def dp_replicas(self) -> int:
        """HSDP replicas of each shard: dp / dp_shard (1 = full sharding)."""
        return self.dp // self.shard_size

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size: the tp·dp·cp ranks of a stage hold ep·etp expert shards."""
        return max(self.tp * self.dp * self.cp // (self.ep * self.expert_tp), 1)

    @property
    def pipeline_extra_layers(self) -> int:
        """Layer slots the embedding and the loss take in the pipeline split (0, 1 or 2)."""
        return int(self.account_for_embedding_in_pipeline_split) + int(
            self.account_for_loss_in_pipeline_split
        )

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


# ----------------------------------------------------------------------------- run
@dataclass(frozen=True, slots=True)
class DataloaderSpec:
    microbatch_latency_s: float = 0.0
    workers: int = 2
    prefetch: int = 2
    jitter: float = 0.0  # coefficient of variation of the latency
    seed: int = 0

    def __post_init__(self) -> None:
        _check_num("dataloader.microbatch_latency_ms", self.microbatch_latency_s, maximum=3600.0)
        _check_int("dataloader.workers", self.workers, maximum=4096)
        _check_int("dataloader.prefetch", self.prefetch, minimum=0, maximum=4096)
        _check_num("dataloader.jitter", self.jitter, maximum=10.0)
        _check_int("dataloader.seed", self.seed, minimum=0, maximum=2**63 - 1)


@dataclass(frozen=True, slots=True)
class VariabilitySpec:
    """Step-to-step variation (issue 8). All zero = a deterministic step."""

    compute_jitter: float = 0.0  # coefficient of variation of each compute block
    straggler_probability: float = 0.0  # chance that a given GPU is slow this step
    straggler_slowdown: float = 1.0  # its compute time multiplier (>= 1)
    network_jitter: float = 0.0  # coefficient of variation of each collective
    seed: int = 0

    def __post_init__(self) -> None:
        _check_num("variability.compute_jitter", self.compute_jitter, maximum=10.0)
        _check_num("variability.straggler_probability", self.straggler_probability, maximum=1.0)
        _check_num("variability.straggler_slowdown", self.straggler_slowdown, minimum=1.0, maximum=1e3)
        _check_num("variability.network_jitter", self.network_jitter, maximum=10.0)
        _check_int("variability.seed", self.seed, minimum=0, maximum=2**63 - 1)

    @property
    def is_deterministic(self) -> bool:
        return (
            self.compute_jitter == 0
            and self.network_jitter == 0
            and (self.straggler_probability == 0 or self.straggler_slowdown == 1.0)
        )


ATTENTION_IMPLS = ("fa2", "fa3", "cudnn", "triton", "flash-attn-triton", "unfused")
# Attention kernel of today's Megatron-Core + Transformer Engine per architecture: TE's cuDNN fused
# attention on Hopper/Blackwell, FlashAttention-2 on Ampere (no sm80 cuDNN/FA3 path in TE's
# default priority), none on Volta (kernels.default_attention).
DEFAULT_ATTENTION = {"volta": "unfused", "ampere": "fa2", "hopper": "cudnn", "blackwell": "cudnn"}
# Architectures a fused attention kernel is built for (others are refused, check_attention_arch).
# FlashAttention-2: "Ampere, Ada, or Hopper GPUs" (Dao-AILab/flash-attention README.md@0251105a,
# "Installation and features"; its kernels are sm80 code, which Blackwell also runs); FlashAttention-3:
# "optimized for Hopper GPUs", "Requirements: H100 / H800 GPU" (README.md@0251105a), and its hopper/
# package builds only sm80 and sm90a instantiations (hopper/setup.py@0251105a sources_fwd_sm80/_sm90;
# the one *_sm100.cu file is not in the source list, and sm_90a code does not run on sm_100), so
# Blackwell runs FlashAttention-4 (CuTe DSL) or cuDNN, not FA3; cuDNN SDPA: "requires SM80 (Ampere) or newer architectures"
# (cuDNN frontend docs, operations/Attention "Support Matrix"). Not listed (the Triton kernels,
# unfused): every architecture.
ATTENTION_ARCHS = {
    "fa2": ("ampere", "hopper", "blackwell"),
    "fa3": ("hopper",),
    "cudnn": ("ampere", "hopper", "blackwell"),
}
ATTENTION_NAMES = {"fa2": "FlashAttention-2", "fa3": "FlashAttention-3", "cudnn": "cuDNN fused attention"}


# Architectures without BF16 tensor cores: Volta's are FP16-only (NVIDIA V100 datasheet: "Tensor
# Performance" in FP16; BF16 arrived with Ampere, NVIDIA A100 whitepaper). gpus.toml lists the V100's
# BF16 peak at its FP16 rate only because every GPU must have one; a BF16 GEMM there is refused.
NO_BF16_ARCHS = ("volta",)


def check_dtype_arch(dtype: str, arch: str, gpu_name: str, key: str) -> None:
    """Refuse BF16 math on an architecture without BF16 tensor cores (NO_BF16_ARCHS)."""
    if dtype == "bf16" and arch in NO_BF16_ARCHS:
        raise ConfigError(
            f"{gpu_name} ({arch}) has no BF16 tensor cores: use fp16 (its FP16 tensor peak)", key=key
        )


def check_attention_arch(impl: str, arch: str, gpu_name: str, key: str) -> None:
    """Refuse a fused attention kernel on an architecture it has no kernels for (ATTENTION_ARCHS)."""
    archs = ATTENTION_ARCHS.get(impl)
    if archs is not None and arch not in archs:
        raise ConfigError(
            f"{ATTENTION_NAMES[impl]} has no kernels for {arch} ({gpu_name}); it needs "
            f"{' / '.join(a.capitalize() for a in archs)} (unfused attention runs everywhere)",
            key=key,
        )


# Implementations that take a learnable softmax offset (model.attention_sinks): Transformer Engine
# disables FlashAttention for softmax_type != "vanilla" and keeps FusedAttention (cuDNN >= 9.13.1)
# and UnfusedDotProductAttention (transformer_engine/pytorch/attention/dot_product_attention/
# utils.py get_attention_backend, "Filter: Softmax type"@d0067d0d); llm-foundry's triton kernel
# has no such offset either
SINK_ATTENTION_IMPLS = ("cudnn", "unfused")
# Implementations `attention_padding = "unpad"` runs in front of: flash-attn's bert_padding feeds
# flash_attn_varlen_func, in llm-foundry only inside flash_attn_fn (llmfoundry/models/layers/
# attention.py@5e85bd62d; its triton_flash_attn_fn and torch path fold the padding mask into the
# attention bias instead); FA3 has the same varlen entry point (flash_attn_interface)
UNPAD_ATTENTION_IMPLS = ("fa2", "fa3")
CROSS_ENTROPY_IMPLS = ("unfused", "fused", "te", "torch")
ZERO3_COLLECTIVES = ("nccl", "flat")
# software stacks (simulator/stacks.py): fitted residuals in efficiency.toml [stacks.*], or borrowed
# from a fitted stack (stacks.RESIDUALS_OF: "megatron-deepspeed" has no run in the calibration data)
STACK_NAMES = ("megatron-core", "megatron-2021", "composer-fsdp", "megatron-deepspeed")
DEEPSPEED_STACK = "megatron-deepspeed"  # DeepSpeed's PipelineEngine (program.DS_PIPE_NOTE)
# Stacks with no run in the calibration data, and the fitted stack whose system residuals they
# take: Megatron-DeepSpeed runs the 2021-22 Megatron-LM kernels (its megatron/model and mpu are
# Megatron-LM's) under DeepSpeed's pipeline engine, whose own mechanisms program.py costs from the
# source (DS_PIPE_NOTE). A default for a stack not in the data, not a fit (docs/calibration.md).
RESIDUALS_OF = {DEEPSPEED_STACK: "megatron-2021"}


def residuals_stack(stack: str) -> str:
    """The stack whose fitted `[stacks.*]` table `stack` uses (itself unless RESIDUALS_OF says)."""
    return RESIDUALS_OF.get(stack, stack)


ZERO3_BACKWARD_PREFETCH = ("pre", "post")
# How q, k, v reach the attention kernel: "none" = as the layer holds them; "unpad" = through
# flash-attn's bert_padding (unpad_input of q, k and v, pad_input of the output) around
# flash_attn_varlen_func, as llm-foundry's flash_attn_fn does for every batch, padded or not
# (llmfoundry/models/layers/attention.py@5e85bd62d; flash_attn/bert_padding.py@v2.4.2)
ATTENTION_PADDING = ("none", "unpad")
# Bias gradients of the dense linear layers (model.linear_bias): "fused" = in the wgrad GEMM's
# epilogue (Transformer Engine: cuBLASLt BGRADB); "separate" = PyTorch nn.Linear, whose addmm
# backward sums the output gradient over the tokens in a reduction kernel of its own
# (tools/autograd/derivatives.yaml addmm `self: maybe_multiply(grad, beta.conj())`, summed to the
# bias' shape)
BIAS_GRAD_IMPLS = ("fused", "separate")
# the layer norms' kernel: "fused" = a fused norm at streaming-copy speed (Transformer Engine, Apex);
# "torch" = PyTorch's native LayerNorm (kernels.toml [[memory]] kind torch_layer_norm_*)
NORM_IMPLS = ("fused", "torch")
# the q, k, v gradients into the fused qkv projection's: "packed" = as the stack's own split does it
# (Transformer Engine's _SplitAlongDim backward returns a view on MHA's packed dqkv; with GQA the
# Megatron-Core + TE op table charges the concatenation it does then, program.py TE_LAYER_NOTE);
# "cat" = torch.split's backward concatenates them (aten split_with_sizes_backward: one cat
# kernel; llm-foundry)
QKV_GRAD_IMPLS = ("packed", "cat")
# ZeRO-2/3 sharded data parallelism, how each layer's gradient reaches the buffer that is
# reduce-scattered: "direct" = written there (Megatron's grad buffer, FSDP2's per-parameter
# DTensors); "cat" = PyTorch FSDP1's FlatParameter: the module's parameters are split + view views of
# the flat parameter, so autograd concatenates their gradients into the flat gradient
# (split_with_sizes_backward -> at::cat), one read and one write of the layer's 16-bit gradient
FSDP_FLAT_GRAD_IMPLS = ("direct", "cat")
# How a squared-ReLU MLP (model.activation = "squared_relu") runs relu(x)^2 (simulator/program.py
# SQUARED_RELU_NOTE): "compiled" = under @jit_fuser (torch.compile on PyTorch >= 2.2), one fused
# kernel each way, as Megatron-Core (megatron/core/activations.py, megatron/training/activations.py)
# and NeMo 1's megatron models define it; "eager" = torch.pow(F.relu(x), 2) as plain PyTorch ops,
# NeMo 2's NemotronConfig activation (nemo/collections/llm/fn/activation.py)
SQUARED_RELU_IMPLS = ("compiled", "eager")
# Megatron-Core --cuda-graph-impl (transformer_config.py `cuda_graph_impl`): none; local = MCore's
# per-layer graphs; transformer_engine = TE make_graphed_callables per layer; full_iteration = one
# graph for the whole forward-backward pass (the optimizer step excluded)
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
# Megatron-Core --cuda-graph-modules (CudaGraphModule): what the per-layer graphs capture; an empty
# list = the whole transformer layer. attn = TransformerLayer._forward_attention(); mlp = a dense
# layer's _forward_mlp(); moe = a MoE layer's _forward_mlp() (drop-and-pad MoE only); moe_router =
# _forward_mlp() up to MoELayer.router() (with the shared experts); moe_preprocess =
# MoELayer.preprocess() (with moe_router). Megatron's "mamba" is refused: no Mamba layers here.
CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")
# Megatron-Core --moe-token-dispatcher-type alltoall | allgather, or flex with
# --moe-flex-dispatcher-backend deepep | hybridep (token_dispatcher.py)
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")
# SMs the EP dispatch/combine kernels occupy while they run beside compute (`[kernels]
# ep_comm_sms = 0` takes the dispatcher's default). deepep: DeepEP's Buffer.num_sms default 20
# (Megatron-Core transformer_config.py moe_deepep_num_sms: "historical default 20"); hybridep: 32
# blocks of one SM each for dispatch and combine (DeepEP hybrid-ep branch
# csrc/kernels/hybrid_ep_backend_configs.hpp NUM_OF_BLOCKS_DISPATCH_API = NUM_OF_BLOCKS_COMBINE_API
# = 32; the Megatron-Bridge recipes' moe_hybridep_num_sms = 32); alltoall/allgather (NCCL): the 20
# SMs DeepSeek-V3 found enough to saturate IB and NVLink with an all-to-all (arXiv 2412.19437
# §3.2.1), no NCCL figure being published.
DEFAULT_EP_COMM_SMS = {"alltoall": 20, "allgather": 20, "deepep": 20, "hybridep": 32}


@dataclass(frozen=True, slots=True)
class KernelOptions:
    """Implementation switches that change kernel cost, not the model's math (the software stack).

    `attention`: "fa2" | "fa3" | "cudnn" | "unfused", or "" for the default of the GPU's current
    Megatron-Core + Transformer Engine stack (kernels.default_attention). `flash_attention = false`
    is the older spelling of `attention = "unfused"`."""

    flash_attention: bool = True
    attention: str = ""
    # "" = fp32 for bf16/fp8 training (Megatron-LM's main_grad), "bf16" = --grad-reduce-in-bf16
    grad_reduce_dtype: str = ""
    # the routed experts' own reduction dtype where the framework gives them their own FSDP
    # wrapper: "" = grad_reduce_dtype. NeMo AutoModel's apply_fsdp@89e3a9fd wraps the experts in
    # `fully_shard` with no mixed-precision policy, so they reduce in their bf16 dtype
    expert_grad_reduce_dtype: str = ""
    tp_comm_async: bool = True  # TP backward collectives beside the dgrad/wgrad GEMMs (Megatron-Core)
    # "" = "unfused": Megatron-Core's vocab-parallel cross-entropy in eager PyTorch ops
    # (cross_entropy_loss_fusion = False); "fused" = its fused "native" kernels (fusion True,
    # cross_entropy_fusion_impl = "native": NeMo 2 recipes); "te" = Transformer Engine's Triton
    # cross-entropy (cross_entropy_fusion_impl = "te": Megatron-Bridge performance scripts);
    # "torch" = PyTorch F.cross_entropy under bf16 autocast (fp32 log_softmax + nll_loss)
    cross_entropy: str = ""
    # ZeRO-3 parameter all-gathers / gradient reduce-scatters: "nccl" = NCCL on the topology (node
    # NICs aggregated over NVLink), "flat" = flat ring on each GPU's NIC share (DeepSpeed 2021)
    zero3_collectives: str = "nccl"
    # the software stack whose fitted system residuals replace the GPU's default-stack table
    # ("" = the default, Megatron-Core + TE; docs/calibration.md): STACK_NAMES
    stack: str = ""
    # ZeRO-3/FSDP gathers in backward: "pre" = the next layer's gather runs beside this layer's
    # backward (FSDP BACKWARD_PRE, FSDP2, Megatron-FSDP); "post" = issued after this layer's
    # gradients (PyTorch FSDP BACKWARD_POST, composer's default): not hidden by compute
    zero3_backward_prefetch: str = "pre"
    # ATTENTION_PADDING: "unpad" = gather copies of q, k, v before the kernel, scatter of the output
    # after it (simulator/program.py BERT_PADDING_BYTES)
    attention_padding: str = "none"
    # BIAS_GRAD_IMPLS: how the dense linear layers' bias gradients are computed (linear_bias models)
    bias_grad: str = "fused"
    # NORM_IMPLS: the layer norms' kernel (llm-foundry's LPLayerNorm calls PyTorch's native one)
    norm: str = "fused"
    # QKV_GRAD_IMPLS: how the attention's q, k, v gradients reach the fused qkv projection
    qkv_grad: str = "packed"
    # FSDP_FLAT_GRAD_IMPLS: how a sharded (ZeRO-2/3) layer's gradient reaches its flat buffer
    fsdp_flat_grad: str = "direct"
    # SQUARED_RELU_IMPLS: the kernels of a squared-ReLU MLP's activation
    squared_relu: str = "compiled"
    # Megatron-Core use_transformer_engine_op_fuser (Megatron-Bridge cutedsl_fused_grouped_mlp): the
    # experts' activation, its input clamps and the probability-scaled fc2 bias run inside TE's
    # fused grouped-MLP ops instead of eager PyTorch ops (simulator/program.py CLAMPED_GLU_PASSES,
    # EXPERT_BIAS_BYTES)
    fused_grouped_mlp: bool = False
    # Megatron-Core CUDA graphs (--cuda-graph-impl, --cuda-graph-modules; CUDA_GRAPH_IMPLS,
    # CUDA_GRAPH_MODULES): a graphed module costs the host one graph launch instead of issuing each
    # of its kernels (simulator/hostbound.py)
    cuda_graph_impl: str = "none"
    cuda_graph_modules: tuple[str, ...] = ()
    # MoE token dispatcher (--moe-token-dispatcher-type, --moe-flex-dispatcher-backend): MOE_DISPATCHERS.
    # Default "alltoall", as today's stack configures an MoE model with EP > 1: every Megatron-Bridge
    # HF MoE bridge sets it (Megatron-Bridge@067f987d models/deepseek/deepseek_v3_bridge.py:67,
    # qwen/qwen3_moe_bridge.py:67, gpt_oss/gpt_oss_bridge.py:69, ...), as do Megatron-Core's
    # moe/README.md quick start and its examples/ MoE scripts (Megatron-LM@d98e8a64); the
    # TransformerConfig field itself defaults to "allgather" (transformer_config.py:891), which that
    # README recommends for "TP-only setups, small EP" (docs/accuracy.md, "What the checker sees")
    moe_dispatcher: str = "alltoall"
    # SMs the EP dispatch/combine kernels take from compute while overlapped (Megatron-Core
    # --moe-flex-dispatcher-num-sms); 0 = DEFAULT_EP_COMM_SMS[moe_dispatcher]
    ep_comm_sms: int = 0
    # Megatron-Core high_priority_a2a_comm_stream (transformer_config.py, default False): the
    # combined 1F1B's communication stream is created at CUDA's highest stream priority
    # (pipeline_parallel/utils.py set_streams), so its kernels' thread blocks are dispatched before
    # the pending blocks of the compute stream's kernels; at the default priority an EP kernel
    # launched behind a running compute kernel waits for it (program.combined_layer_s)
    ep_comm_high_priority: bool = False

    @property
    def megatron_core(self) -> bool:
        """The default stack, Megatron-Core + Transformer Engine (`stack` "" or "megatron-core"):
        the op tables the 2021 Megatron-LM and composer/FSDP stacks replace."""
        return self.stack in ("", "megatron-core")

    @property
    def ep_comm_sms_used(self) -> int:
        """SMs the EP communication kernels occupy (the key or the dispatcher's default)."""
        return self.ep_comm_sms or DEFAULT_EP_COMM_SMS[self.moe_dispatcher]

    def __post_init__(self) -> None:
        _check_bool("kernels.flash_attention", self.flash_attention)
        _check_bool("kernels.fused_grouped_mlp", self.fused_grouped_mlp)
        _set(
            self,
            "moe_dispatcher",
            _check_choice("kernels.moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS),
        )
        _set(
            self,
            "cuda_graph_impl",
            _check_choice("kernels.cuda_graph_impl", self.cuda_graph_impl, CUDA_GRAPH_IMPLS),
        )
        _set(self, "cuda_graph_modules", _check_graph_modules(self.cuda_graph_impl, self.cuda_graph_modules))
        _check_int("kernels.ep_comm_sms", self.ep_comm_sms, minimum=0, maximum=1024)
        _check_bool("kernels.ep_comm_high_priority", self.ep_comm_high_priority)
        _check_bool("kernels.tp_comm_async", self.tp_comm_async)
        if self.cross_entropy:
            _set(
                self,
                "cross_entropy",
                _check_choice("kernels.cross_entropy", self.cross_entropy, CROSS_ENTROPY_IMPLS),
            )
        _set(
            self,
            "zero3_collectives",
            _check_choice("kernels.zero3_collectives", self.zero3_collectives, ZERO3_COLLECTIVES),
        )
        if self.stack:
            _set(self, "stack", _check_choice("kernels.stack", self.stack, STACK_NAMES))
        _set(
            self,
            "zero3_backward_prefetch",
            _check_choice(
                "kernels.zero3_backward_prefetch", self.zero3_backward_prefetch, ZERO3_BACKWARD_PREFETCH
            ),
        )
        _set(
            self,
            "attention_padding",
            _check_choice("kernels.attention_padding", self.attention_padding, ATTENTION_PADDING),
        )
        _set(self, "bias_grad", _check_choice("kernels.bias_grad", self.bias_grad, BIAS_GRAD_IMPLS))
        _set(self, "norm", _check_choice("kernels.norm", self.norm, NORM_IMPLS))
        _set(self, "qkv_grad", _check_choice("kernels.qkv_grad", self.qkv_grad, QKV_GRAD_IMPLS))
        _set(
            self,
            "fsdp_flat_grad",
            _check_choice("kernels.fsdp_flat_grad", self.fsdp_flat_grad, FSDP_FLAT_GRAD_IMPLS),
        )
        _set(
            self,
            "squared_relu",
            _check_choice("kernels.squared_relu", self.squared_relu, SQUARED_RELU_IMPLS),
        )
        for key in ("grad_reduce_dtype", "expert_grad_reduce_dtype"):
            if getattr(self, key):
                _set(self, key, _check_choice(f"kernels.{key}", getattr(self, key), ("fp32", "bf16")))
        if self.attention:
            _set(self, "attention", _check_choice("kernels.attention", self.attention, ATTENTION_IMPLS))
        if not self.flash_attention and self.attention not in ("", "unfused"):
            raise ConfigError(
                f"kernels.attention = {self.attention!r} contradicts kernels.flash_attention = false",
                key="kernels.attention",
            )


@dataclass(frozen=True, slots=True)
class MemoryOptions:
    """[memory]: what lives in host memory instead of HBM (issue 13)."""

    offload_activations: float = 0.0  # fraction of the stored activations copied to host memory
    offload_optimizer: bool = False  # fp32 master weights + Adam moments on the host, Adam on the CPU
    # storage of Adam's moments (Megatron --exp-avg-dtype / --exp-avg-sq-dtype; DeepSeek-V3
    # report §3.3.3 keeps both in BF16): MOMENT_DTYPES
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    # DeepSeek-V3 report §3.3.4 (2): the inputs of the routed experts' SwiGLU (the fc1 output)
    # cached in FP8 for the backward; needs an fp8-family dtype and MoE. Its output is rebuilt
    # from them with [parallel] recompute_modules = ["moe_act"]. The quantize/dequantize casts
    # are not charged (memory-bound, about 3 bytes per element against the fc1/fc2 GEMMs).
    fp8_moe_act_input: bool = False
    # DeepSeek-V3 report §3.3.3 "Low-Precision Activation" (1): the attention output (the input of
    # the Linear after the attention operator) kept once, in the 12-bit E5M6 format, for both the
    # attention backward and the output projection's Wgrad (memory.E5M6_BYTES); fp8 dtypes only
    e5m6_attention_output: bool = False
    # ZeRO-2/3 gradient shard storage (SHARDED_GRAD_DTYPES): "" = the gradient buffer's dtype plus
    # the optimizer's fp32 copy of a 16-bit one; "fp32" = PyTorch FSDP's fp32 shard only
    sharded_grad_dtype: str = ""
    # ZeRO-3 parameter shard storage (SHARDED_PARAM_DTYPES): "" = a 16-bit shard beside the fp32
    # master; "fp32" = PyTorch FSDP's fp32 shard only, cast to 16-bit at each all-gather
    sharded_param_dtype: str = ""
    # GPU memory kept free (file key headroom_gib, flag --memory-headroom; issue 17): a
    # configuration fits when its peak is within the GPU's memory minus this. Default 0.
    headroom_bytes: float = 0.0

    @property
    def optimizer_bytes_per_param(self) -> int:
        """fp32 master weight + Adam's two moments in their storage formats (12 with fp32)."""
        return 4 + MOMENT_BYTES[self.exp_avg_dtype] + MOMENT_BYTES[self.exp_avg_sq_dtype]

    def __post_init__(self) -> None:
        _check_num("memory.offload_activations", self.offload_activations, maximum=1.0)
        _check_bool("memory.offload_optimizer", self.offload_optimizer)
        _check_bool("memory.fp8_moe_act_input", self.fp8_moe_act_input)
        _check_bool("memory.e5m6_attention_output", self.e5m6_attention_output)
        for key in ("exp_avg_dtype", "exp_avg_sq_dtype"):
            _set(self, key, _check_choice(f"memory.{key}", getattr(self, key), MOMENT_DTYPES))
        if self.sharded_grad_dtype:
            _set(
                self,
                "sharded_grad_dtype",
                _check_choice("memory.sharded_grad_dtype", self.sharded_grad_dtype, SHARDED_GRAD_DTYPES),
            )
        if self.sharded_param_dtype:
            _set(
                self,
                "sharded_param_dtype",
                _check_choice("memory.sharded_param_dtype", self.sharded_param_dtype, SHARDED_PARAM_DTYPES),
            )
        _check_num("memory.headroom_gib", self.headroom_bytes, maximum=2.0**50)


# ----------------------------------------------------------------------------- [run] (issue 15)
# The whole-run plan's inputs and their sourced defaults; simulator/plan.py turns them into days,
# GPU-hours, cost and energy.
# Llama 3 405B pre-training, "The Llama 3 Herd of Models" (Dubey et al. 2024, arXiv 2407.21783,
# §3.3.4 and Table 5): in a 54-day snapshot on 16,384 H100 GPUs, 466 job interruptions, of which
# 47 planned (maintenance) and 419 unexpected; ~78% of the unexpected ones were confirmed or
# suspected hardware issues (GPU 30.1%, HBM3 17.2%, ...). Every unexpected interruption restarts
# the job, so the rate that matters is all 419, per GPU: 419 / 16,384 / (54 / 365.25) = 0.173 per
# GPU-year (hardware alone: 0.78 x that = 0.135). Planned interruptions are not modeled.
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
LLAMA3_NUM_GPUS = 16_384
LLAMA3_SNAPSHOT_DAYS = 54
DEFAULT_GPU_FAILURES_PER_YEAR = (
    LLAMA3_UNEXPECTED_INTERRUPTIONS / LLAMA3_NUM_GPUS / (LLAMA3_SNAPSHOT_DAYS * DAY_S / YEAR_S)
)
# Mixed-precision Adam state per parameter (ZeRO, Rajbhandari et al. 2020, §3.1: 2 + 2 + 12 = 16
# bytes with the fp16/bf16 gradients): a checkpoint holds the bf16 weights (2), the fp32 master
# weights (4) and the two fp32 moments (4 + 4) = 14 bytes; gradients are not saved.
DEFAULT_CHECKPOINT_BYTES_PER_PARAM = 14.0
# Llama 3 paper §3.3.1: Meta's Tectonic file system for the 405B run sustained 2 TB/s (7 TB/s
# peak) across 7,500 SSD servers. Aggregate over the whole job.
DEFAULT_STORAGE_WRITE_GBPS = 2000.0
# Detect the failure, drain and reschedule, re-initialize NCCL, reload the checkpoint. Not
# published for Llama 3; checkpoint-restart runtimes take minutes (TrainMover, Lao et al. 2024,
# arXiv 2412.12636, §2, compares against minute-scale restarts and reaches ~20 s with standby
# machines). 10 minutes is an assumption in that range -- set `restart_min` for your stack.
DEFAULT_RESTART_MIN = 10.0
# Measured draw of 8-GPU H100 HGX nodes while training, as a fraction of the rated 10.2 kW:
# 76% for compute-intensive workloads (Newkirk et al. 2025, "Empirically-calibrated H100 node
# power models", arXiv 2506.14551; Latif et al. 2024, arXiv 2412.08602, peak 8.4 kW = 82%).
# Applied to board power and node overhead alike (the measurement is of the whole node).
DEFAULT_POWER_UTILIZATION = 0.76
# Power usage effectiveness: Google's fleet-wide trailing twelve-month PUE is 1.10 (Google data
# center efficiency report, 2023); Meta reports ~1.08-1.09. Cooling and power delivery.
DEFAULT_PUE = 1.10


@dataclass(frozen=True, slots=True)
class RunSpec:
    """The whole training run (`[run]`, issue 15): how many tokens, what failures cost. SI inside."""

    tokens: float
    usd_per_gpu_hour: float | None = None  # None = no cost reported
    gpu_failure_rate_per_s: float = DEFAULT_GPU_FAILURES_PER_YEAR / YEAR_S  # per GPU
    checkpoint_interval_s: float = 0.0  # seconds of training between checkpoints; 0 = Young/Daly optimum
    checkpoint_bytes_per_param: float = DEFAULT_CHECKPOINT_BYTES_PER_PARAM
    checkpoint_async: bool = False
    storage_write_bytes_per_s: float = DEFAULT_STORAGE_WRITE_GBPS * GIGA  # aggregate
    restart_s: float = DEFAULT_RESTART_MIN * MIN_S  # detect + reschedule + reload
    power_utilization: float = DEFAULT_POWER_UTILIZATION  # average draw / rated power
    pue: float = DEFAULT_PUE  # facility power / IT power

    def __post_init__(self) -> None:
        p = "run"
        _check_num(f"{p}.tokens", self.tokens, strict=True, maximum=1e18)
        if self.usd_per_gpu_hour is not None:
            _check_num(f"{p}.usd_per_gpu_hour", self.usd_per_gpu_hour, maximum=1e6)
        # 1e-3 per GPU-second = 31,557 failures per GPU-year: far beyond any real hardware
        _check_num(f"{p}.gpu_failures_per_year", self.gpu_failure_rate_per_s, maximum=1e-3)
        _check_num(f"{p}.checkpoint_interval_min", self.checkpoint_interval_s, maximum=1e9)
        _check_num(
            f"{p}.checkpoint_bytes_per_param", self.checkpoint_bytes_per_param, strict=True, maximum=1e3
        )
        _check_bool(f"{p}.checkpoint_async", self.checkpoint_async)
        _check_num(f"{p}.storage_write_GBps", self.storage_write_bytes_per_s, strict=True, maximum=1e18)
        _check_num(f"{p}.restart_min", self.restart_s, maximum=1e9)
        _check_num(f"{p}.power_utilization", self.power_utilization, strict=True, maximum=1.0)
        _check_num(f"{p}.pue", self.pue, minimum=1.0, maximum=10.0)


# dtypes whose weights Megatron-Core can keep as Transformer Engine FP8 parameters
# (--fp8-param-gather: Float8Tensor for per-tensor scaling, MXFP8Tensor for MXFP8)
FP8_PARAM_DTYPES = ("fp8", "mxfp8")
# [precision] fp8_recipe: how per-tensor "fp8" picks its scale (Megatron-Core --fp8-recipe; Transformer
# Engine recipes): "delayed" (DelayedScaling, Megatron-Core's default: the scale from an amax history,
# updated inside the cast) or "current" (Float8CurrentScaling: the tensor's own amax first, then the
# cast; Megatron-Bridge's bf16_with_fp8_current_scaling_mixed preset) or "blockwise" (Float8BlockScaling,
# Megatron-Core --fp8-recipe blockwise, DeepSeek-V3's scheme, arXiv 2412.19437 §3.3: 1x128 activation
# and gradient tiles, 128x128 weight blocks, fp32 scales; transformer_engine/common/recipe/__init__.py
# @d0067d0d). Blockwise is Hopper-only here: TE runs it natively on SM 9.0 only and emulates it with
# MXFP8 on Blackwell (docs/features/low_precision_training/fp8_blockwise_scaling/
# fp8_blockwise_scaling.rst@d0067d0d "Supported devices"; use precision.dtype "mxfp8" there) and
# refuses it below SM 9.0 (pytorch/quantization.py _compute_fp8_block_scaling_support)
FP8_RECIPES = ("delayed", "current", "blockwise")


@dataclass(frozen=True, slots=True)
class Scenario:
    """One model on one cluster with one parallel configuration."""

    name: str
    model: ModelSpec
    topology: TopologySpec
    num_gpus: int
    parallel: ParallelConfig
    dtype: str = "bf16"
    dataloader: DataloaderSpec = field(default_factory=DataloaderSpec)
    variability: VariabilitySpec = field(default_factory=VariabilitySpec)
    kernels: KernelOptions = field(default_factory=KernelOptions)
    sweep: tuple[tuple[str, tuple[object, ...]], ...] = ()
    source: str = ""  # file it came from, for messages
    run: RunSpec | None = None  # the whole-run plan's inputs ([run]); None = no plan
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    # [precision] fp8_param_gather: Megatron-Core's --fp8-param-gather (Transformer Engine quantized
    # parameters: the GEMM weights exist only in FP8, the optimizer keeps the fp32 master copy)
    fp8_param_gather: bool = False
    fp8_recipe: str = "delayed"  # [precision] fp8_recipe (FP8_RECIPES); only with dtype "fp8"

    def __post_init__(self) -> None:
        _check_str("name", self.name)
        _check_int("cluster.num_gpus", self.num_gpus, maximum=MAX_GPUS)
        _set(self, "dtype", _check_choice("precision.dtype", self.dtype, DTYPES))
        _check_bool("precision.fp8_param_gather", self.fp8_param_gather)
        _set(self, "fp8_recipe", _check_choice("precision.fp8_recipe", self.fp8_recipe, FP8_RECIPES))
        if self.fp8_recipe != "delayed" and self.dtype != "fp8":
            raise ConfigError(
                "precision.fp8_recipe chooses how per-tensor FP8 scales are picked: needs "
                f'precision.dtype "fp8" (got {self.dtype}; mxfp8 and nvfp4 carry their own block scales)',
                key="precision.fp8_recipe",
            )
        if self.fp8_recipe == "blockwise":
            # Hopper-class: FP8 tensor cores and no FP4 (block-scaled) ones (GPUSpec.peak_flop_per_s)
            if self.gpu.peak_fp8_flop_per_s <= 0 or self.gpu.peak_fp4_flop_per_s > 0:
                raise ConfigError(
                    f'precision.fp8_recipe "blockwise" runs natively on Hopper only (got {self.gpu.name}): '
                    'Transformer Engine emulates it with MXFP8 on Blackwell (use precision.dtype "mxfp8") '
                    "and needs SM 9.0 or newer",
                    key="precision.fp8_recipe",
                )
            if self.fp8_param_gather:
                raise ConfigError(
                    'precision.fp8_recipe "blockwise" with precision.fp8_param_gather (Float8BlockwiseQTensor '
                    "parameters, a compact-format all-gather with its block scales) is not modelled",
                    key="precision.fp8_recipe",
                )
        if self.fp8_param_gather and self.dtype not in FP8_PARAM_DTYPES:
            raise ConfigError(
                "precision.fp8_param_gather keeps the weights in FP8 only: needs precision.dtype "
                f"{' or '.join(FP8_PARAM_DTYPES)} (got {self.dtype})",
                key="precision.fp8_param_gather",
            )
        self.gpu.peak_flop_per_s(self.dtype)  # raises if the GPU lacks this dtype
        check_parallel_fits(self.model, self.parallel, self.num_gpus)
        _check_recompute_modules(self.model, self.parallel.recompute_modules)
        _check_cuda_graphs(self.model, self.parallel, self.kernels, self.memory)
        if self.parallel.pipeline_runs > 1 and (
            not self.variability.is_deterministic or self.dataloader.microbatch_latency_s > 0
        ):
            # the step repeats one replayed run (engine/replay.py repeat_runs): exact only when
            # every run is the same
            raise ConfigError(
                f"{self.parallel.pipeline_runs} pipeline runs per step are replayed as one run repeated, "
                "which needs a deterministic step: no [variability] and no dataloader latency",
                key="parallel.local_batch",
            )
        _check_deepspeed_stack(self.parallel, self.kernels)
        _check_ep_overlap(self.parallel, self.kernels, self.gpu)
        _check_shared_expert_overlap(self.model, self.parallel, self.kernels)
        _check_load_imbalance(self.model, self.parallel.ep)
        # the attention implementation when the file names it (the GPU's default: loading.py)
        impl = self.kernels.attention if self.kernels.flash_attention else "unfused"
        if impl:
            check_attention_head_dim(impl, attention_head_dim(self.model))
            check_attention_head_alignment(impl, attention_head_dims(self.model))
        if impl and self.model.attention_sinks:
            check_sink_attention(impl)
        if impl and self.kernels.attention_padding == "unpad":
            check_unpad_attention(impl)
        if self.kernels.bias_grad == "separate" and self.model.linear_bias and self.model.mla is not None:
            raise ConfigError(
                "separate bias-gradient reductions are modelled for the standard attention and MLP "
                'projections, not MLA\'s: use "fused" or a model without [model.mla]',
                key="kernels.bias_grad",
            )
        if self.kernels.fsdp_flat_grad == "cat" and self.parallel.zero < 2:
            raise ConfigError(
                "a flat-parameter gradient concatenation needs sharded data parallelism (FSDP:"
                ' parallel.zero 2 or 3): use "direct" or set parallel.zero',
                key="kernels.fsdp_flat_grad",
            )
        if self.kernels.qkv_grad == "cat" and self.model.mla is not None:
            raise ConfigError(
                "the qkv gradient concatenation is modelled for a fused q, k, v projection, not"
                ' MLA\'s low-rank projections: use "packed" or a model without [model.mla]',
                key="kernels.qkv_grad",
            )
        if self.memory.fp8_moe_act_input and not (
            self.model.is_moe and self.dtype in ("fp8", "mxfp8", "nvfp4")
        ):
            raise ConfigError(
                "memory.fp8_moe_act_input caches MoE expert activations in FP8: needs an MoE model "
                f"and precision.dtype fp8, mxfp8 or nvfp4 (got {self.dtype})",
                key="memory.fp8_moe_act_input",
            )
        if self.memory.e5m6_attention_output and self.dtype not in ("fp8", "mxfp8", "nvfp4"):
            raise ConfigError(
                "memory.e5m6_attention_output caches the attention output in E5M6 as FP8 training "
                f"does (DeepSeek-V3 §3.3.3): needs precision.dtype fp8, mxfp8 or nvfp4 (got {self.dtype})",
                key="memory.e5m6_attention_output",
            )
        if self.memory.sharded_grad_dtype and self.parallel.zero < 2:
            raise ConfigError(
                "memory.sharded_grad_dtype sets how a ZeRO-2/3 (FSDP) rank keeps its gradient shard: "
                f"needs parallel.zero >= 2 (got {self.parallel.zero})",
                key="memory.sharded_grad_dtype",
            )
        if self.memory.sharded_param_dtype and (self.parallel.zero < 3 or self.fp8_param_gather):
            raise ConfigError(
                "memory.sharded_param_dtype sets how a ZeRO-3 (FSDP) rank keeps its parameter shard: "
                f"needs parallel.zero = 3 (got {self.parallel.zero}) and no precision.fp8_param_gather "
                "(Megatron-Core's FP8 parameter buffer)",
                key="memory.sharded_param_dtype",
            )
        if (self.memory.offload_activations or self.memory.offload_optimizer) and not (
            self.gpu.host_link_bytes_per_s > 0
        ):
            raise ConfigError(
                f"GPU {self.gpu.name} has no host link bandwidth (host_link_GBps) in the catalog",
                key="memory",
            )
        if self.memory.headroom_bytes >= self.gpu.hbm_bytes:
            # usable memory is the GPU's minus the headroom (memory.py): none or less would be a
            # negative capacity, not a configuration that merely does not fit
            raise ConfigError(
                f"must be below GPU {self.gpu.name}'s memory ({self.gpu.hbm_bytes / 2.0**30:g} GiB), "
                f"got {self.memory.headroom_bytes / 2.0**30:g}",
                key="memory.headroom_gib",
            )

    @property
    def gpu(self) -> GPUSpec:
        return self.topology.gpu

    @property
    def peak_flop_per_s(self) -> float:
        return self.gpu.peak_flop_per_s(self.dtype)

    @property
    def expert_load_imbalance(self) -> float:
        """Busiest EP rank's routed tokens / the mean for this layout (ModelSpec.busiest_rank_load):
        a rank routes the b·s/cp tokens of its micro-batch (1/tp of them with tp > 1, as
        program.py `_moe` does), gathered over the expert-TP group, over `ep` such ranks."""
        m, par = self.model, self.parallel
        if not m.is_moe:
            return 1.0
        tokens = par.micro_batch * m.seq_len // par.cp
        if par.tp > 1:
            tokens //= par.tp
        return m.busiest_rank_load(par.ep, tokens * par.expert_tp * par.ep)

    @property
    def tokens_per_step(self) -> int:
        return self.parallel.global_batch * self.model.seq_len

    def warnings(self) -> list[str]:
        """Legal but suspicious choices, printed on stderr by the CLI."""
        out = list(self.model.notes) + list(self.topology.notes)
        par = self.parallel
        if par.tp > self.topology.gpus_per_node:
            out.append(
                f"tp = {par.tp} exceeds gpus_per_node = {self.topology.gpus_per_node}: "
                "tensor-parallel traffic crosses the inter-node network"
            )
        idle = self.topology.physical_gpus_per_node - self.topology.gpus_per_node
        if self.topology.physical_gpus_per_node and idle > 0:
            out.append(
                f"gpus_used_per_node = {self.topology.gpus_per_node}: {idle} of "
                f"{self.topology.physical_gpus_per_node} GPUs per node stay idle"
            )
        if par.pp > 1 and par.microbatches_per_run < par.pp:
            out.append(
                f"only {par.microbatches_per_run} micro-batches"
                f"{' per pipeline run' if par.local_batch else ''} for pp = {par.pp}: "
                "the pipeline never fills (bubble > 50%)"
            )
        if par.pp == 1 and par.schedule in NO_PIPELINE_SAME_AS_1F1B:
            out.append(
                f'parallel.schedule = "{par.schedule}" changes nothing at pp = 1: there is no pipeline, '
                "the step runs as 1F1B's"
            )
        if par.pp == 1 and par.schedule in NO_PIPELINE_DEFERRED_WGRAD:
            # one stage: no bubble to fill; what remains of the schedule is its pass order
            out.append(
                f'parallel.schedule = "{par.schedule}" (vp = {par.vp}) has no pipeline bubble to fill at '
                "pp = 1: only its deferral of the weight-gradient passes remains (it can leave more of the "
                "gradient reduce exposed than 1F1B does)"
            )
        if par.ep_comm_overlap and par.schedule in ("dualpipe", "dualpipev"):
            out.append(
                f"ep_comm_overlap = true changes nothing under {par.schedule}: its paired forward and "
                "backward chunks already hide the EP all-to-all (not Megatron-Core's combined 1F1B)"
            )
        if self.kernels.bias_grad == "separate" and not self.model.linear_bias:
            # PyTorch nn.Linear(bias=False) has no bias and computes no bias gradient
            out.append(
                'kernels.bias_grad = "separate" changes nothing: the model has no linear biases '
                "(model.linear_bias = false), so there is no bias gradient to compute"
            )
        k = self.kernels
        if not self.model.is_moe:
            # expert-only switches on a dense model: accepted (a sweep may share one [kernels]
            # table between dense and MoE models) but said, as bias_grad is
            moe_only = [
                name
                for name, on in (
                    ("ep_comm_sms", k.ep_comm_sms != 0),
                    ("ep_comm_high_priority", k.ep_comm_high_priority),
                    ("expert_grad_reduce_dtype", k.expert_grad_reduce_dtype != ""),
                    ("fused_grouped_mlp", k.fused_grouped_mlp),
                )
                if on
            ]
            if moe_only:
                out.append(
                    f"kernels.{', kernels.'.join(moe_only)} change{'s' if len(moe_only) == 1 else ''} "
                    "nothing: the model has no experts"
                )
        fsdp_only = [
            name
            for name, on in (
                ("zero3_collectives", k.zero3_collectives != "nccl"),
                ("zero3_backward_prefetch", k.zero3_backward_prefetch != "pre"),
            )
            if on
        ]
        if fsdp_only and par.zero != 3:
            # program.py reads both only for ZeRO-3 / FSDP's per-layer gathers
            out.append(
                f"kernels.{', kernels.'.join(fsdp_only)} change{'s' if len(fsdp_only) == 1 else ''} "
                f"nothing: parallel.zero = {par.zero} gathers no parameters per layer (zero = 3 does)"
            )
        tp_only = [
            name
            for name, on in (
                ("sequence_parallel", par.sequence_parallel),
                ("tp_comm_overlap", par.tp_comm_overlap),
            )
            if on
        ]
        if tp_only and par.tp == 1:
            # Megatron-LM turns sequence parallelism off at tp = 1 (and TP overlap needs it)
            out.append(
                f"parallel.{', parallel.'.join(tp_only)} = true change{'s' if len(tp_only) == 1 else ''} "
                "nothing: tp = 1 has no tensor-parallel communication"
            )
        if par.tp_comm_overlap and par.tp > 1 and not par.sequence_parallel:
            # Megatron-LM megatron/training/arguments.py asserts it ("Tensor parallel communication/GEMM
            # overlap can happen only when sequence parallelism is enabled"); torchtitan's async TP
            # runs on the sequence-parallel layout too
            out.append(
                "parallel.tp_comm_overlap = true without parallel.sequence_parallel: Megatron-Core's "
                "userbuffer overlap and PyTorch's async TP both need sequence parallelism (Megatron-LM "
                "refuses the pair); costed as all-reduces hidden behind the layer's GEMMs, which no "
                "framework runs: set sequence_parallel = true"
            )
        if k.squared_relu != "compiled" and self.model.activation != "squared_relu":
            out.append(
                f'kernels.squared_relu = "{k.squared_relu}" changes nothing: the model\'s MLP is not '
                'squared ReLU (model.activation = "squared_relu")'
            )
        pieces = num_virtual_stages(par.schedule, par.pp, par.vp)
        if not par.pipeline_layout and (self.model.layers + par.pipeline_extra_layers) % pieces:
            out.append(
                f"{self.model.layers} layers do not divide into "
                f"{'pp' if par.schedule == 'dualpipe' else 'pp*vp'} = {pieces} "
                "equal stages: the first stages get one layer more"
            )
        return out


def check_sink_attention(impl: str) -> None:
    """model.attention_sinks needs an attention implementation with a learnable softmax offset
    (SINK_ATTENTION_IMPLS); `impl` is the one the scenario runs."""
    if impl not in SINK_ATTENTION_IMPLS:
        raise ConfigError(
            f"{impl!r} has no learnable softmax offset for model.attention_sinks (Transformer Engine "
            'disables FlashAttention for it): use "cudnn" or "unfused"',
            key="kernels.attention",
        )


# The largest head dimension a fused attention kernel takes (Q·K and V alike): FlashAttention-2
# (Dao-AILab/flash-attention@0251105a csrc/flash_attn/flash_api.cpp:416 "FlashAttention forward only
# supports head dimension at most 256", :868 backward), FlashAttention-3 (hopper/flash_api.cpp
# get_max_headdim() = 256), cuDNN's SDPA (NVIDIA/cudnn-frontend@3929da2 include/cudnn_frontend/node/
# scaled_dot_product_flash_attention.h:1143 "Num hidden_dim should be less than or equal to 256"; 128
# on other architectures and some Blackwell layouts, not checked here). Above it only the unfused
# path (or Transformer Engine's fallback to it) runs.
MAX_FUSED_ATTENTION_HEAD_DIM = 256


def check_attention_head_dim(impl: str, head_dim: int, key: str = "kernels.attention") -> None:
    """A fused attention implementation takes head dimensions up to MAX_FUSED_ATTENTION_HEAD_DIM;
    `head_dim` is the larger of the query/key and value head dimensions."""
    if impl != "unfused" and head_dim > MAX_FUSED_ATTENTION_HEAD_DIM:
        raise ConfigError(
            f"{impl!r} attention takes head dimensions up to {MAX_FUSED_ATTENTION_HEAD_DIM} (FlashAttention-2/-3 "
            f'and cuDNN refuse larger ones); this one is {head_dim}, which only "unfused" runs',
            key=key,
        )


# Head dimensions that are not a multiple of 8 (16-bit elements: 16-byte rows for the kernels' vector
# loads and TMA). FlashAttention-2 pads them: flash_attn/flash_attn_interface.py (Dao-AILab/flash-
# attention@0251105a) :481-484 (FlashAttnFunc :851-854, the varlen and packed functions alike) pads q,
# k, v with zeros to the next multiple of 8 before the kernel, whose C++ entry refuses anything else
# (csrc/flash_attn/flash_api.cpp:417 "head_size that is a multiple of 8"), and slices the output back
# (:507); the kernel's time is that of the padded head dim (kernels.attention_time_s), its useful FLOPs
# the model's. FlashAttention-3 does not pad: hopper/flash_api.cpp:854-856 refuses ("head_size should be
# a multiple of 8", 16 for FP8) and hopper/flash_attn_interface.py passes q, k, v through unpadded.
# cuDNN's SDPA refuses too (NVIDIA/cudnn-frontend@3929da2 include/cudnn_frontend/node/
# scaled_dot_product_flash_attention.h:1143-1145 "hidden_dim should be multiple of 8",
# sdpa_support_surface.h:222).
ATTENTION_HEAD_DIM_ALIGN = 8
ALIGNED_HEAD_DIM_IMPLS = ("fa3", "cudnn")  # refuse an unaligned head dim; fa2 pads it


def attention_head_dims(model: ModelSpec) -> tuple[int, int]:
    """The query/key and the value head dimension (equal but for MLA)."""
    return model.dim_per_head, model.v_dim // model.heads


def check_attention_head_alignment(
    impl: str, head_dims: tuple[int, ...], key: str = "kernels.attention"
) -> None:
    """FlashAttention-3 and cuDNN run head dimensions that are multiples of 8 only (see
    ATTENTION_HEAD_DIM_ALIGN: FlashAttention-2 pads the others, the unfused path takes any)."""
    if impl not in ALIGNED_HEAD_DIM_IMPLS:
        return
    for dim in head_dims:
        if dim % ATTENTION_HEAD_DIM_ALIGN:
            raise ConfigError(
                f"{impl!r} attention takes head dimensions that are multiples of {ATTENTION_HEAD_DIM_ALIGN} only "
                f'(FlashAttention-3 and cuDNN refuse others); this one is {dim}: "fa2" pads it to '
                f'{-(-dim // ATTENTION_HEAD_DIM_ALIGN) * ATTENTION_HEAD_DIM_ALIGN}, "unfused" runs it as is',
                key=key,
            )


def check_cp_comm_type(impl: str, par: ParallelConfig) -> None:
    """A context-parallel implementation other than the p2p ring runs fused attention kernels only
    (Transformer Engine's all-gather and all-to-all CP: flash or cuDNN; PyTorch's context_parallel: the SDPA
    flash, efficient or cuDNN ops); `impl` is the one the scenario runs."""
    if par.cp > 1 and impl == "unfused" and par.cp_comm_type != "p2p":
        raise ConfigError(
            f"cp_comm_type = {par.cp_comm_type!r} runs fused attention kernels only (Transformer Engine's "
            "all-gather and all-to-all CP: flash or cuDNN; PyTorch's context_parallel: SDPA flash, efficient "
            "or cuDNN); "
            "the unfused path has context parallelism only as 'p2p'",
            key="parallel.cp_comm_type",
        )


def attention_head_dim(model: ModelSpec) -> int:
    """The larger of the query/key and the value head dimension (MLA: qk_head_dim vs v_head_dim)."""
    return max(model.dim_per_head, model.v_dim // model.heads)


def check_unpad_attention(impl: str) -> None:
    """`attention_padding = "unpad"` exists only in front of a varlen flash kernel
    (UNPAD_ATTENTION_IMPLS); `impl` is the one the scenario runs."""
    if impl not in UNPAD_ATTENTION_IMPLS:
        raise ConfigError(
            "unpad is flash-attn's bert_padding around flash_attn_varlen_func (llm-foundry "
            f'flash_attn_fn): needs kernels.attention "fa2" or "fa3", not {impl!r}',
            key="kernels.attention_padding",
        )


def _check_load_imbalance(model: ModelSpec, ep: int) -> None:
    """An explicit `load_imbalance` no layout can reach is refused: the busiest of `ep` ranks
    holding m = num_experts/ep experts receives at most min(top_k, m) copies of each token, so its
    share of the mean is at most ep·min(k, m)/k (routing_skew.busiest_rank_factor's own cap)."""
    if not model.is_moe or not model.load_imbalance:
        return
    k, m = model.top_k, model.num_experts / ep
    cap = ep * min(k, m) / k
    if model.load_imbalance > cap * (1 + 1e-12):
        raise ConfigError(
            f"{model.load_imbalance:g} exceeds its maximum {cap:g} for ep = {ep}: the busiest rank of "
            f"{m:g} experts gets at most min(top_k, experts per rank) = {min(k, m):g} of each token's "
            f"{k} copies (ep·min(k, m)/k)",
            key="model.moe.load_imbalance",
        )


def _check_recompute_modules(model: ModelSpec, modules: tuple[str, ...]) -> None:
    """A listed module the model does not have would recompute nothing: refused, not ignored."""
    need = {
        "mla_up_proj": (model.mla is not None, "a model without [model.mla]"),
        "moe": (model.is_moe, "a dense model"),
        "moe_act": (model.is_moe, "a dense model"),
        "shared_experts": (
            bool(model.is_moe and model.shared_expert_ffn_hidden),
            "a model without shared experts",
        ),
        "mlp": (model.num_moe_layers < model.layers, "a model without dense MLP layers"),
    }
    for name in modules:
        has, what = need.get(name, (True, ""))
        if not has:
            raise ConfigError(f"{name!r} recomputes nothing in {what}", key="parallel.recompute_modules")


def _check_deepspeed_stack(par: ParallelConfig, kern: KernelOptions) -> None:
    """`stack = "megatron-deepspeed"` runs DeepSpeed's PipelineEngine (program.DS_PIPE_NOTE), which
    has one schedule, TrainSchedule (1F1B, no interleaving: deepspeed/runtime/pipe/schedule.py
    @50893458), refuses ZeRO-2/3 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
    pipe/engine.py:73@50893458) and is not torch.distributed.pipelining."""
    if kern.stack != "megatron-deepspeed":
        return
    if par.zero >= 2:
        raise ConfigError(
            f"DeepSpeed's pipeline engine refuses ZeRO-{par.zero} (pipe/engine.py: 'ZeRO-2 and ZeRO-3 "
            "are incompatible with pipeline parallelism'): use zero = 0 or 1",
            key="kernels.stack",
        )
    if par.schedule != "1f1b" or par.vp > 1:
        raise ConfigError(
            "DeepSpeed's pipeline engine runs only its TrainSchedule (1F1B without interleaving): "
            f'schedule = "1f1b", vp = 1 (got schedule = {par.schedule!r}, vp = {par.vp})',
            key="kernels.stack",
        )
    if par.local_batch > 0:
        raise ConfigError(
            "local_batch is torch.distributed.pipelining's gradient accumulation, not DeepSpeed's "
            "pipeline engine",
            key="kernels.stack",
        )


def _check_shared_expert_overlap(model: ModelSpec, par: ParallelConfig, kern: KernelOptions) -> None:
    """`shared_expert_overlap` as Megatron-Core accepts --moe-shared-expert-overlap
    (transformer_config.py __post_init__ @a2d7d6748a9a): only with the "alltoall" token
    dispatcher ("moe_shared_expert_overlap only works with alltoall token dispatcher"), not with
    "shared_experts" recomputed ("shared_experts recompute cannot work with
    --moe-shared-expert-overlap"), not with --overlap-moe-expert-parallel-comm ("disable
    moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"). Refused besides
    where the simulator has nothing to cost or cannot cost it: no shared expert, no expert
    parallelism (ep = 1: no all-to-all to hide behind), and DualPipe's own F&B pairs."""
    if not par.shared_expert_overlap:
        return
    key = "parallel.shared_expert_overlap"
    if not (model.is_moe and model.shared_expert_ffn_hidden):
        raise ConfigError(
            "overlaps the shared expert with the all-to-all; this model has no shared expert "
            "([model.moe] shared_expert_ffn_hidden)",
            key=key,
        )
    if kern.moe_dispatcher != "alltoall":
        raise ConfigError(
            'Megatron-Core runs the shared-expert overlap only with the "alltoall" token dispatcher, '
            f"not {kern.moe_dispatcher!r}",
            key=key,
        )
    if par.ep_comm_overlap:
        raise ConfigError(
            "Megatron-Core refuses the shared-expert overlap together with the EP all-to-all "
            "overlap (ep_comm_overlap = true)",
            key=key,
        )
    if par.recompute == "selective" and "shared_experts" in par.recomputed_modules:
        raise ConfigError(
            "Megatron-Core refuses the shared-expert overlap with 'shared_experts' in recompute_modules",
            key=key,
        )
    if par.ep < 2:
        raise ConfigError(
            "hides the EP all-to-all behind the shared expert; with ep = 1 there is none to hide "
            "(the simulator costs only that overlap)",
            key=key,
        )
    if par.schedule in ("dualpipe", "dualpipev"):
        raise ConfigError(
            f"{par.schedule} already hides the all-to-all behind its paired F&B; the shared-expert "
            "overlap inside it is not costed",
            key=key,
        )


def _check_ep_overlap(par: ParallelConfig, kern: KernelOptions, gpu: GPUSpec) -> None:
    """`ep_comm_overlap` as Megatron-Core accepts --overlap-moe-expert-parallel-comm
    (transformer_config.py __post_init__): with pp > 1 only under the interleaved schedule (its
    combined 1F1B needs virtual_pipeline_model_parallel_size), not with full recomputation nor
    with "moe" recomputed. The other orders (GPipe, zero-bubble, DualPipe, which overlaps by
    itself) have no such mode. And the EP kernels must leave SMs to the compute they overlap."""
    key = "parallel.ep_comm_overlap"
    if kern.ep_comm_sms_used >= gpu.num_sms:
        raise ConfigError(
            f"{kern.ep_comm_sms_used} SMs for EP communication leave none of the {gpu.num_sms} SMs of "
            f"{gpu.name} to compute",
            key="kernels.ep_comm_sms",
        )
    if par.delay_wgrad_compute and not par.ep_comm_overlap:
        # transformer_config.py: "overlap_moe_expert_parallel_comm must be enabled when enabling
        # delay_wgrad_compute"
        raise ConfigError(
            "Megatron-Core delays the weight gradients only under the EP all-to-all overlap "
            "(ep_comm_overlap = true)",
            key="parallel.delay_wgrad_compute",
        )
    if not par.ep_comm_overlap or par.schedule in ("dualpipe", "dualpipev"):
        return  # DualPipe's F&B pairs hide the all-to-all by themselves: true only agrees with it
    if par.schedule not in ("1f1b", "interleaved") or (par.pp > 1 and par.schedule != "interleaved"):
        hint = " (DualPipe overlaps the all-to-all by itself)" if par.schedule.startswith("dualpipe") else ""
        raise ConfigError(
            f'Megatron-Core\'s EP all-to-all overlap runs a combined 1F1B: schedule = "1f1b" with '
            f'pp = 1, or "interleaved" (virtual pipeline), not {par.schedule!r} with pp = {par.pp}{hint}',
            key=key,
        )
    if par.recompute == "full" or "moe" in par.recomputed_modules:
        raise ConfigError(
            "Megatron-Core refuses the EP all-to-all overlap with full recomputation or 'moe' in "
            "recompute_modules",
            key=key,
        )
    # transformer_config.py: "overlap_moe_expert_parallel_comm is only supported with expert model
    # parallelism" and "... with alltoall/flex token dispatcher"
    if par.ep < 2:
        raise ConfigError(
            "Megatron-Core runs the EP all-to-all overlap only with expert parallelism (ep > 1)", key=key
        )
    if kern.moe_dispatcher == "allgather":
        raise ConfigError(
            'Megatron-Core runs the EP all-to-all overlap only with the "alltoall" or a flex '
            '("deepep", "hybridep") dispatcher, not "allgather"',
            key=key,
        )


def _check_cuda_graphs(
    model: ModelSpec, par: ParallelConfig, kern: KernelOptions, mem: MemoryOptions
) -> None:
    """CUDA-graph and dispatcher choices the model can run, as Megatron-Core checks them
    (transformer_config.py __post_init__ "Cuda Graphs"; moe/README.md "CUDA Graph")."""
    impl, mods = kern.cuda_graph_impl, kern.cuda_graph_modules
    key = "kernels.cuda_graph_modules"
    if not model.is_moe:
        if kern.moe_dispatcher != "alltoall":
            raise ConfigError(
                f"{kern.moe_dispatcher!r} dispatches tokens to experts; a dense model has none",
                key="kernels.moe_dispatcher",
            )
        for name in ("moe_router", "moe_preprocess"):
            if name in mods:
                raise ConfigError(f"{name!r} graphs part of a MoE layer; a dense model has none", key=key)
    if "mlp" in mods and model.num_moe_layers >= model.layers:
        raise ConfigError("'mlp' graphs a dense MLP; every layer of this model is MoE", key=key)
    if impl in ("local", "transformer_engine"):
        if not mods and model.is_moe:
            # moe/README.md: without drop-and-pad "the resulting dynamic shapes make MoE layers
            # uncapturable"; a whole-layer graph would capture the MoE layer
            raise ConfigError(
                "[] graphs whole layers, but dropless MoE layers cannot be captured (dynamic shapes, "
                'the dispatcher\'s device-to-host sync): list the modules, e.g. ["attn", "moe_router", '
                '"moe_preprocess"]',
                key=key,
            )
        if par.recompute == "full":
            raise ConfigError(
                f'recompute = "full" needs cuda_graph_impl = "full_iteration" (Megatron-Core), not {impl!r}',
                key="kernels.cuda_graph_impl",
            )
        if impl == "transformer_engine" and "moe" in par.recompute_modules and "moe_router" in mods:
            raise ConfigError(
                "'moe' recomputation cannot run with a 'moe_router' graph under transformer_engine (Megatron-Core)",
                key=key,
            )
        if mem.offload_activations:
            raise ConfigError(
                f"CUDA graphs ({impl}) do not run with activation offloading (Megatron-Core)",
                key="kernels.cuda_graph_impl",
            )
    if (
        impl == "full_iteration"
        and model.is_moe
        and not (kern.moe_dispatcher == "hybridep" and kern.fused_grouped_mlp)
    ):
        # One graph for the step holds no device-to-host sync: only HybridEP with a per-rank token
        # budget (moe_expert_rank_capacity_factor, which needs TE's fused grouped MLP) dispatches
        # without one (token_dispatcher.py _HybridEPManager; transformer_config.py)
        raise ConfigError(
            f"a MoE step with the {kern.moe_dispatcher!r} dispatcher syncs with the host in every MoE "
            'layer and cannot be one graph: full_iteration needs moe_dispatcher = "hybridep" with '
            "fused_grouped_mlp = true (a per-rank token budget)",
            key="kernels.cuda_graph_impl",
        )


def _schedule_problem(schedule: str, pp: int, m: int) -> str | None:
    return check_schedule(schedule, pp, m, num_layers=MAX_LAYERS)


def check_parallel_fits(model: ModelSpec, par: ParallelConfig, num_gpus: int) -> None:
    """Cross-checks between the model, the split and the cluster (raise ConfigError)."""
    p = "parallel"
    if par.num_gpus != num_gpus:
        rest = par.tp * par.pp * par.cp
        fix = (
            f" (dp = {num_gpus // rest} fits; leave dp out to derive it)"
            if num_gpus % rest == 0 and num_gpus // rest != par.dp
            else ""
        )
        raise ConfigError(
            f"tp*pp*dp*cp = {par.tp}*{par.pp}*{par.dp}*{par.cp} = {par.num_gpus} "
            f"must equal cluster.num_gpus = {num_gpus}{fix}",
            key=f"{p}.dp",
        )
    if model.heads % par.tp:
        raise ConfigError(f"tp = {par.tp} must divide the number of heads ({model.heads})", key=f"{p}.tp")
    kv = model.num_kv_heads
    if kv % par.tp and par.tp % kv:
        # Megatron needs tp | kv_heads; with tp > kv_heads the KV heads are replicated,
        # which only works when kv_heads divides tp.
        raise ConfigError(f"tp = {par.tp} and kv_heads = {kv}: one must divide the other", key=f"{p}.tp")
    if par.pipeline_layout:
        pieces = num_virtual_stages(par.schedule, par.pp, par.vp)
        if len(par.pipeline_layout) != pieces or sum(par.pipeline_layout) != model.layers:
            raise ConfigError(
                f"{len(par.pipeline_layout)} virtual stages holding {sum(par.pipeline_layout)} layers; "
                f"the {par.schedule} split of pp = {par.pp}, vp = {par.vp} has {pieces} virtual stages "
                f"and the model {model.layers} layers",
                key=f"{p}.pipeline_layout",
            )
    slots = model.layers + par.pipeline_extra_layers  # embedding / loss may take a stage's slot
    if par.pp > slots:
        raise ConfigError(f"pp = {par.pp} exceeds the number of layers ({model.layers})", key=f"{p}.pp")
    if par.schedule in ("zb-v", "dualpipev") and slots < 2 * par.pp:
        raise ConfigError(
            f"{par.schedule} cuts the model into 2*pp = {2 * par.pp} chunks; it has only {model.layers} layers",
            key=f"{p}.pp",
        )
    if par.vp > 1 and par.schedule == "interleaved" and slots < par.pp * par.vp:
        raise ConfigError(
            f"pp*vp = {par.pp * par.vp} model chunks exceed the number of layers ({model.layers})"
            + (f" + {par.pipeline_extra_layers} (embedding/loss)" if par.pipeline_extra_layers else ""),
            key=f"{p}.vp",
        )
    if model.seq_len % par.cp or (par.cp > 1 and model.seq_len % (2 * par.cp)):
        raise ConfigError(
            f"cp = {par.cp}: seq_len ({model.seq_len}) must be a multiple of 2*cp "
            "(load-balanced causal context parallelism)",
            key=f"{p}.cp",
        )
    if par.cp > 1 and model.has_local_attention:
        # LOCAL_CP_NOTE: Transformer Engine runs sliding-window attention under context parallelism
        # only with cp_comm_type "a2a" or "all_gather" (attention/dot_product_attention/
        # context_parallel.py:5054-5060@d0067d0d asserts it); mfusim models the a2a exchange's
        # whole-sequence kernel with the window (program._cp_a2a_attention), not the all-gather's
        # windowed chunks; Llama 4's chunks are no window Transformer Engine or Megatron-Core runs
        chunked = any(model.attention_window(i)[0] == "chunked" for i in range(model.layers))
        if chunked:
            raise ConfigError(
                f"cp = {par.cp} over chunked attention layers is not modeled; use cp = 1", key=f"{p}.cp"
            )
        if par.cp_comm_type != "a2a":
            raise ConfigError(
                f"cp_comm_type = {par.cp_comm_type!r} over sliding-window layers is not modeled "
                "(Transformer Engine runs windows under CP with a2a or all_gather only; mfusim models "
                'a2a): use "a2a" or cp = 1',
                key=f"{p}.cp_comm_type",
            )
    kv_local = max(model.num_kv_heads // par.tp, 1)
    if par.cp > 1 and par.cp_comm_type == "a2a" and ((model.heads // par.tp) % par.cp or kv_local % par.cp):
        raise ConfigError(
            f"a2a splits the attention heads over cp = {par.cp} ranks (Transformer Engine asserts it): "
            f"the {model.heads // par.tp} query and {kv_local} key/value heads per TP rank must be "
            "multiples of cp",
            key=f"{p}.cp_comm_type",
        )
    if par.sequence_parallel and par.tp > 1 and model.seq_len // par.cp % par.tp:
        raise ConfigError(
            f"sequence parallel needs tp = {par.tp} to divide the sequence per CP rank "
            f"({model.seq_len // par.cp})",
            key=f"{p}.sequence_parallel",
        )
    if par.ep > 1:
        if not model.is_moe:
            raise ConfigError("ep > 1 needs a mixture-of-experts model ([model.moe])", key=f"{p}.ep")
        if model.num_experts % par.ep:
            raise ConfigError(f"ep = {par.ep} must divide num_experts ({model.num_experts})", key=f"{p}.ep")
        if (par.dp * par.cp * par.tp) % par.ep:
            raise ConfigError(
                f"ep = {par.ep} must divide dp*cp*tp = {par.dp * par.cp * par.tp} "
                "(expert-parallel groups are carved from the data-parallel ranks)",
                key=f"{p}.ep",
            )
    if par.etp > 1 or par.ep_comm_overlap:
        if not model.is_moe:
            key = "etp" if par.etp > 1 else "ep_comm_overlap"
            raise ConfigError(f"{key} needs a mixture-of-experts model ([model.moe])", key=f"{p}.{key}")
    if model.is_moe:
        etp = par.expert_tp
        if (par.dp * par.cp * par.tp) % (par.ep * etp):
            raise ConfigError(
                f"ep*etp = {par.ep}*{etp} must divide tp*dp*cp = {par.dp * par.cp * par.tp} "
                "(Megatron carves the expert groups from the same ranks)",
                key=f"{p}.etp",
            )
        if model.expert_ffn % etp:
            raise ConfigError(
                f"etp = {etp} must divide the expert FFN width ({model.expert_ffn})", key=f"{p}.etp"
            )
