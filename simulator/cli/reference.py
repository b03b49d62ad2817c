"""docs/reference.md and the scenario JSON Schema, generated from the code (issue 17).

    python -m simulator.cli.reference            # print docs/reference.md
    python -m simulator.cli.reference --write    # rewrite docs/reference.md and simulator/scenario.schema.json

Nothing here is typed twice: the keys a file may hold are found by asking the loader itself
(`accepted_keys` feeds it a probe key in every table and reads the `allowed` list of the
error it raises), defaults come from the spec dataclasses or from loading a minimal file,
allowed values from the catalogs and the spec constants, the `--json` objects by running
each command on a small input, the CSV columns from the modules that write and read them.
Only the one-line meanings are written here, in `KEYS` / `JSON_FIELDS`; a test fails when
a key or a field has none, and when the committed files differ from what this generates.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..timeline import CATEGORIES

PROBE = "__reference_probe__"
SINCE_DEFAULT = "0.1.0"
NEXT = "0.2.0"  # the round-2 release ([Unreleased] in CHANGELOG.md)

# A scenario the loader accepts with nothing else given: every default shows through it.
MINIMAL_SCENARIO: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "cluster": {"topology": "dgx-a100", "num_gpus": 8},
    "parallel": {"global_batch": 8},
}
MINIMAL_TOPOLOGY: dict[str, Any] = {"gpu": "a100-80gb", "gpus_per_node": 8}


# ----------------------------------------------------------------------------- keys, asked of the loader
def _allowed_at(build: Callable[[dict[str, Any]], object], base: Mapping[str, Any], path: tuple[str, ...]):
    """The keys the loader accepts in the table at `path` (None: not a table)."""
    data = copy.deepcopy(dict(base))
    node = data
    for part in path:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[PROBE] = 1
    try:
        build(data)
    except ConfigError as err:
        if err.key == ".".join((*path, PROBE)) and err.allowed is not None:
            return err.allowed
    return None


def _walk(build, base, path: tuple[str, ...] = ()) -> dict[str, str]:
    out: dict[str, str] = {}
    for key in _allowed_at(build, base, path) or ():
        sub = _allowed_at(build, base, (*path, key)) if len(path) < 3 else None
        out[".".join((*path, key))] = "table" if sub is not None else "value"
        if sub is not None:
            out.update(_walk(build, base, (*path, key)))
    return out


def accepted_keys(kind: str = "scenario") -> dict[str, str]:
    """Every key of a scenario or topology file, dotted (`parallel.tp`), as 'table' or 'value',
    in the loader's own order."""
    from ..loading import scenario_from_dict, topology_from_dict

    if kind == "scenario":
        return _walk(lambda d: scenario_from_dict(d, base_dir=Path.cwd()), MINIMAL_SCENARIO)
    return _walk(topology_from_dict, MINIMAL_TOPOLOGY)


# ----------------------------------------------------------------------------- what each key means
@dataclass(frozen=True)
class Key:
    """The documentation of one key. Empty fields are filled from the code (see `key_rows`)."""

    meaning: str
    type: str = ""
    unit: str = ""
    default: str | None = None  # None: from the spec dataclass / the minimal scenario
    allowed: Callable[[], tuple[str, ...]] | None = None
    since: str = SINCE_DEFAULT


def _gpus() -> tuple[str, ...]:
    from ..loading import load_gpu_catalog

    return tuple(load_gpu_catalog())


def _presets() -> tuple[str, ...]:
    from ..loading import load_model_presets

    return tuple(load_model_presets())


def _topologies() -> tuple[str, ...]:
    from ..resources import topology_names

    return tuple(topology_names())


def _spec(name: str) -> Callable[[], tuple[str, ...]]:
    def get() -> tuple[str, ...]:
        from .. import specs

        return tuple(getattr(specs, name))

    return get


TOPOLOGY_NOTE = "from the topology"
KEYS: dict[str, Key] = {
    # top level
    "name": Key("label in reports", "string", default="the file name"),
    "model": Key("the model: a preset, a Hugging Face config.json, or every dimension", "table"),
    "cluster": Key("the machine: a topology and how many GPUs", "table"),
    "parallel": Key("how the job is split and scheduled", "table"),
    "precision": Key("training number format", "table"),
    "dataloader": Key("input pipeline feeding pipeline stage 0 (default: never stalls)", "table"),
    "variability": Key("step-to-step variation (docs/variability.md)", "table"),
    "kernels": Key("implementation switches that change kernel cost, not the model's math", "table"),
    "sweep": Key("lists of values for `mfusim sweep` (the product, filtered to valid ones)", "table"),
    "run": Key("the whole training run for the plan (docs/plan.md)", "table", since=NEXT),
    # [model]
    "model.preset": Key("a catalog model (`mfusim presets`)", "string", default="—", allowed=_presets),
    "model.hf_config": Key(
        "path to a Hugging Face config.json, read offline (instead of preset)", "string", default="—"
    ),
    "model.name": Key("label of the model", "string", default="the preset name"),
    "model.layers": Key("transformer layers", "integer", default="required (or preset)"),
    "model.hidden": Key("hidden size", "integer", default="required (or preset)"),
    "model.heads": Key("attention heads", "integer", default="required (or preset)"),
    "model.kv_heads": Key("key/value heads (GQA/MQA when fewer than heads)", "integer", default="heads"),
    "model.ffn_hidden": Key("MLP inner size", "integer", default="4 × hidden"),
    "model.vocab": Key("vocabulary size", "integer", default="required (or preset)"),
    "model.seq_len": Key("sequence length", "integer", unit="tokens", default="required (or preset)"),
    "model.gated_mlp": Key("SwiGLU-style MLP (three matrices)", "boolean"),
    "model.head_dim": Key(
        "per-head width when it differs from hidden / heads", "integer", default="hidden / heads"
    ),
    "model.tied_embeddings": Key("output layer shares the input embedding", "boolean"),
    "model.position_embeddings": Key("learned absolute positions (GPT-2/3); false = rotary", "boolean"),
    "model.activation": Key(
        'MLP activation when not the default (SwiGLU if gated_mlp, else GELU): "squared_relu" '
        "(Nemotron-4; its kernels: kernels.squared_relu) or "
        '"clamped_quick_geglu" (GPT-OSS, gated: its input clamps run unfused)',
        "string",
        default='""',
    ),
    "model.linear_bias": Key(
        "biases on the linear layers and experts (Megatron add_bias_linear; GPT-OSS): the experts' "
        "output bias is added per local expert by eager 16-bit ops",
        "boolean",
        since=NEXT,
    ),
    "model.qk_norm": Key(
        "RMSNorm of each query and key head before RoPE (Qwen3's q_norm/k_norm; Megatron qk_layernorm)",
        "boolean",
        since=NEXT,
    ),
    "model.rope_mscale": Key(
        "YaRN attention factor on RoPE's cos/sin (GPT-OSS 1.3466); not 1 = Megatron-Core's unfused RoPE",
        "number",
        since=NEXT,
    ),
    "model.attention_sinks": Key(
        "a learnable softmax offset per attention head (GPT-OSS sinks; Megatron-Core softmax_type = "
        '"learnable"): cuDNN fused attention takes it, and its gradient adds a reduction over the '
        "backward's softmax statistics (one memory-bound op, 'attention sink grad'); needs "
        'kernels.attention "cudnn" or "unfused" (TE disables FlashAttention for it)',
        "boolean",
        since=NEXT,
    ),
    "model.moe": Key(
        "mixture of experts (balanced routing unless [model.moe] routing says dropless or round_robin)",
        "table",
        default="dense model",
    ),
    "model.moe.num_experts": Key("routed experts per MoE layer", "integer", default="0 (dense)"),
    "model.moe.top_k": Key("experts each token is routed to", "integer"),
    "model.moe.expert_ffn_hidden": Key("MLP inner size of one expert", "integer", default="ffn_hidden"),
    "model.moe.shared_expert_ffn_hidden": Key("MLP inner size of the always-on shared expert", "integer"),
    "model.moe.layer_interval": Key("every k-th layer is MoE", "integer"),
    "model.moe.first_dense_layers": Key(
        "leading layers with a dense MLP (DeepSeek first_k_dense_replace)", "integer", since=NEXT
    ),
    "model.moe.routing": Key(
        "balanced (forced: random router logits, Megatron moe_router_force_load_balancing),"
        " dropless (a trained router's skew on real text, aux-loss-balanced ones included) or"
        " round_robin (token t to experts t·k … t·k+k−1 mod E, NeMo AutoModel's benchmark"
        " FakeBalancedGate: exact balance, a token's experts on adjacent ranks; ignores"
        " max_nodes_per_token)",
        "string",
        allowed=_spec("ROUTING"),
        since=NEXT,
    ),
    "model.moe.load_imbalance": Key(
        "busiest EP rank's tokens / mean (>= 1); 0: the expected maximum over the EP ranks of the"
        " micro-batch's sampling spread (balanced) plus the experts' skew (dropless; routing_skew.py);"
        " 1: exact balance, every expert the same token count; at most ep·min(top_k, experts per"
        " rank)/top_k",
        "number",
        default="0 (from routing and layout)",
        since=NEXT,
    ),
    "model.moe.max_nodes_per_token": Key(
        "node-limited routing (DeepSeek-V3: 4)", "integer", default="0 (unlimited)", since=NEXT
    ),
    "model.moe.dispatch_dtype": Key(
        "all-to-all dispatch dtype (fp8: FP8 dispatch, BF16 combine)",
        "string",
        allowed=_spec("DISPATCH_DTYPES"),
        since=NEXT,
    ),
    "model.mla": Key(
        "multi-head latent attention (DeepSeek-V2/V3, Kimi-K2)",
        "table",
        default="— (standard attention)",
        since=NEXT,
    ),
    "model.mla.q_lora_rank": Key("query low-rank width (0: full-rank queries)", "integer", since=NEXT),
    "model.mla.kv_lora_rank": Key("compressed key/value width", "integer", since=NEXT),
    "model.mla.qk_nope_head_dim": Key("per-head query/key width without rotary", "integer", since=NEXT),
    "model.mla.qk_rope_head_dim": Key(
        "per-head rotary query/key width (one shared key head)", "integer", since=NEXT
    ),
    "model.mla.v_head_dim": Key("per-head value width", "integer", since=NEXT),
    "model.allow_unmodeled": Key(
        "config.json keys of architectures not modeled, to ignore with a warning (else an error)",
        "list of strings",
        default="[]",
        since=NEXT,
    ),
    "model.dropout": Key(
        "hidden/attention dropout probability; 0 = none, and no dropout masks are stored "
        "(default: Megatron-LM's 0.1; the MoE presets 0 as their configs)",
        since=NEXT,
    ),
    "model.sliding_window": Key(
        "sliding-window attention: each query attends to its last N positions, itself included "
        "(HF sliding_window; Megatron-Core window_size = (N - 1, 0)), on the layers layer_types / "
        'layer_pattern marks "sliding" (every layer when neither is given); 0 = none; N >= seq_len '
        "is full causal attention",
        "integer",
        "tokens",
        since=NEXT,
    ),
    "model.attention_chunk_size": Key(
        "chunked local attention (Llama 4): causal within N-token chunks, on the layers layer_types / "
        'layer_pattern marks "chunked" (every layer when neither is given); 0 = none',
        "integer",
        "tokens",
        since=NEXT,
    ),
    "model.layer_types": Key(
        "each layer's attention, one entry per layer: full, sliding or chunked (HF's full_attention / "
        "sliding_attention / chunked_attention accepted); empty = every layer uses the window given",
        "list of strings",
        since=NEXT,
    ),
    "model.layer_pattern": Key(
        'layer_types as a pattern repeated from layer 0: ["sliding", "full"] = GPT-OSS\'s and Gemma '
        "2's alternation (give this or layer_types)",
        "list of strings",
        default="(none)",
        since=NEXT,
    ),
    "model.mtp_layers": Key(
        "DeepSeek multi-token-prediction modules (one layer each)", "integer", since=NEXT
    ),
    # [cluster]
    "cluster.topology": Key(
        "a shipped topology name or a topology TOML file", "string", default="required", allowed=_topologies
    ),
    "cluster.num_gpus": Key("GPUs in the job", "integer", default="required"),
    "cluster.gpu": Key(
        "override of the topology's GPU; a topology NVLink faster than the GPU's own ports carry "
        "(gpus.toml nvlink_GBps_per_direction, e.g. h800 on dgx-h100) is capped to them, with a warning",
        "string",
        default=TOPOLOGY_NOTE,
        allowed=_gpus,
    ),
    "cluster.gpus_per_node": Key("override of the topology's node size", "integer", default=TOPOLOGY_NOTE),
    "cluster.gpus_used_per_node": Key(
        "GPUs the job uses in each node when fewer than the node has",
        "integer",
        default="gpus_per_node",
        since=NEXT,
    ),
    "cluster.rank_order": Key(
        "rank layout, innermost first (a permutation of tp, cp, dp, pp)",
        "list of strings",
        default=TOPOLOGY_NOTE,
    ),
    "cluster.gpu_speed_spread": Key(
        "coefficient of variation of the per-GPU speed: the step waits sigma x E[max of num_gpus"
        " normals] x its compute, recompute and bubble for the slowest GPU (breakdown gpu_spread,"
        " simulator/gpu_spread.py); 0 = all GPUs equally fast",
        "number, 0 to 0.5",
        default="the architecture's (kernels.toml [gpu_speed_spread]: Hopper 0.0104, Blackwell 0.0241, else 0)",
        since=NEXT,
    ),
    "cluster.intra_node": Key("override of the topology's [intra_node] keys", "table", default=TOPOLOGY_NOTE),
    "cluster.inter_node": Key("override of the topology's [inter_node] keys", "table", default=TOPOLOGY_NOTE),
    # [parallel]
    "parallel.tp": Key("tensor-parallel size"),
    "parallel.pp": Key("pipeline-parallel stages"),
    "parallel.dp": Key("data-parallel replicas", default="num_gpus / (tp·pp·cp)"),
    "parallel.cp": Key(
        "context-parallel size (sequence split across GPUs; its implementation: cp_comm_type)"
    ),
    "parallel.cp_comm_type": Key(
        "context-parallel attention implementation: p2p = Transformer Engine's load-balanced ring"
        " (Megatron-Core's default --cp-comm-type); allgather = TE's all-gather CP (the Llama 3"
        " paper's design: K/V all-gather and dK/dV reduce-scatter exposed, two kernels per rank);"
        " a2a = TE's all-to-all CP (DeepSpeed-Ulysses: q/k/v and out all-to-all'd to head shards,"
        " exposed, one kernel on heads/cp; heads per TP rank must divide by cp);"
        " torch-allgather / torch-alltoall = PyTorch's experimental context_parallel with that"
        " rotate method (torchtitan: allgather): fp32 eager merges, K/V expanded to the query heads",
        allowed=_spec("CP_COMM_TYPES"),
        since=NEXT,
    ),
    "parallel.ep": Key("expert-parallel size (MoE)"),
    "parallel.etp": Key("expert tensor-parallel size", default="0 (1 with ep > 1, else tp)", since=NEXT),
    "parallel.ep_comm_overlap": Key(
        "EP all-to-all of one micro-batch hidden behind another's compute (Megatron-Core"
        " --overlap-moe-expert-parallel-comm, a combined 1F1B: pp = 1 or interleaved, ep > 1)",
        since=NEXT,
    ),
    "parallel.delay_wgrad_compute": Key(
        "under ep_comm_overlap: the experts' weight gradients run after the dispatch's backward is"
        " issued, which then waits for their input gradients only (Megatron-Core --delay-wgrad-compute;"
        " needs ep_comm_overlap)",
        default="false",
        since=NEXT,
    ),
    "parallel.shared_expert_overlap": Key(
        "the shared expert's GEMMs on a side stream beside the same micro-batch's EP all-to-alls:"
        " only the all-to-all's excess over them stays exposed, plus the EP kernels' SM interference"
        " (Megatron-Core --moe-shared-expert-overlap; alltoall dispatcher, ep > 1, a shared expert,"
        " not with ep_comm_overlap or 'shared_experts' recomputed)",
        default="false",
        since=NEXT,
    ),
    "parallel.dp_shard": Key(
        "HSDP: ZeRO/FSDP shard group of consecutive dp ranks (dp = dp_shard x replicas)",
        default="0 (= dp, full sharding)",
        since=NEXT,
    ),
    "parallel.reshard_after_forward": Key(
        "ZeRO-3/FSDP: re-gather parameters each micro-batch (true) or keep them for the step (false)",
        since=NEXT,
    ),
    "parallel.local_batch": Key(
        "gradient accumulation as whole pipeline runs (torch.distributed.pipelining: AutoModel's"
        " step_scheduler.local_batch_size, torchtitan's training.local_batch_size): sequences per"
        " dp rank in one run; the step runs global_batch/(local_batch*dp) runs one after another,"
        " each filling and draining the pipeline; a chunk's last backward of a run waits for its"
        " gradient reduction before sending on; needs pp > 1",
        default="0 (the whole step in one run, Megatron-Core)",
        since=NEXT,
    ),
    "parallel.account_for_embedding_in_pipeline_split": Key(
        "the embedding counts as one layer when splitting layers over stages (Megatron flag)", since=NEXT
    ),
    "parallel.account_for_loss_in_pipeline_split": Key(
        "the output layer and loss count as one layer when splitting (Megatron flag)", since=NEXT
    ),
    "parallel.pipeline_layout": Key(
        "transformer layers of each virtual stage in path order (pp*vp counts summing to the layers; "
        "embedding on the first, MTP and loss on the last), or the same as a Megatron "
        '--pipeline-model-parallel-layout string such as "Et*4|(t*4|)*14tmL" (E embedding, t layer, '
        "m MTP module, L loss, | between virtual stages)",
        "list or string",
        default="[] (even split)",
        since=NEXT,
    ),
    "parallel.vp": Key("virtual pipeline chunks per stage (interleaved schedule)"),
    "parallel.micro_batch": Key("sequences per micro-batch", unit="sequences"),
    "parallel.global_batch": Key("sequences per step", unit="sequences", default="required"),
    "parallel.schedule": Key(
        "pipeline schedule", default="1f1b (interleaved when vp > 1)", allowed=_spec("SCHEDULES")
    ),
    "parallel.sequence_parallel": Key("Megatron sequence parallelism (with tp > 1)"),
    "parallel.recompute": Key(
        "activation recomputation (selective = Megatron-Core's modules, recompute_modules; not"
        " torchtitan's op-level selective policy)",
        allowed=_spec("RECOMPUTE"),
    ),
    "parallel.recompute_modules": Key(
        "selective recomputation: the Megatron-Core modules re-run in backward (--recompute-modules); "
        '[] = Megatron\'s default ["core_attn"]; needs recompute = "selective"; memory drops what '
        "they keep, time and HFU add their forward work",
        "list of strings",
        default="[]",
        allowed=_spec("RECOMPUTE_MODULES"),
        since=NEXT,
    ),
    "parallel.zero": Key("ZeRO stage: 0 none, 1 optimizer, 2 + gradients, 3 + parameters (FSDP)"),
    "parallel.overlap_grad_reduce": Key("DP gradient reduction overlapped with the backward pass"),
    "parallel.overlap_param_gather": Key("ZeRO-1/2 parameter all-gather overlapped with the forward pass"),
    "parallel.tp_comm_overlap": Key(
        "TP communication overlapped with GEMMs (Megatron tp-comm-overlap: Transformer Engine userbuffers);"
        " not PyTorch's async TP, which gained about half as much in torchtitan's published runs"
        " (docs/limits.md)"
    ),
    "parallel.grad_bucket_params": Key(
        "DP gradient bucket size; Megatron uses max(this, 1M·dp)", unit="parameters"
    ),
    # [precision]
    "precision.dtype": Key(
        "training number format of the GEMMs: fp8 = per-tensor scaling (memory counts Megatron-Core's"
        " default delayed recipe), mxfp8 / nvfp4 = block-scaled (Blackwell)",
        "string",
        default="bf16",
        allowed=_spec("DTYPES"),
    ),
    "precision.fp8_param_gather": Key(
        "GEMM weights kept only in FP8 (Megatron-Core --fp8-param-gather: no 16-bit copy; the DP"
        " parameter all-gather moves 1 byte per weight with fp8, BF16 through the gradient buffer"
        " with mxfp8); needs dtype fp8 or mxfp8",
        "boolean",
        default="false",
        since=NEXT,
    ),
    "precision.fp8_recipe": Key(
        "how per-tensor fp8 picks its scales (Megatron-Core --fp8-recipe): delayed = from an amax"
        " history, updated inside the cast (Megatron-Core's default); current = each tensor's own amax"
        " first (Transformer Engine Float8CurrentScaling: one more 16-bit read per quantized"
        " element; the attention output projection keeps its 16-bit input, no FP8 copy); blockwise ="
        " Transformer Engine Float8BlockScaling / DeepSeek-V3 (1x128 activation and gradient tiles,"
        " 128x128 weight blocks, fp32 scales: one quantize kernel writing both FP8 copies with"
        " their scales, GEMMs as blockwise-scaled kernels; Hopper only, refused with"
        " fp8_param_gather); needs dtype fp8",
        "string",
        default="delayed",
        allowed=_spec("FP8_RECIPES"),
        since=NEXT,
    ),
    # [dataloader]
    "dataloader.microbatch_latency_ms": Key("time one worker needs for one micro-batch", "number", unit="ms"),
    "dataloader.workers": Key("loader worker processes"),
    "dataloader.prefetch": Key("batches each worker may buffer ahead"),
    "dataloader.jitter": Key("coefficient of variation of the latency (lognormal)"),
    "dataloader.seed": Key("random seed of the loader jitter"),
    # [variability]
    "variability.compute_jitter": Key("coefficient of variation of each compute block"),
    "variability.straggler_probability": Key("chance that a given GPU is slow this step"),
    "variability.straggler_slowdown": Key("compute time multiplier of a straggler (>= 1)"),
    "variability.network_jitter": Key("coefficient of variation of each collective"),
    "variability.seed": Key("random seed of the step's variation"),
    # [kernels]
    "kernels.flash_attention": Key(
        'fused attention; false = attention "unfused" (two batched GEMMs and a fused softmax)'
    ),
    "kernels.attention": Key(
        "attention kernel; empty = today's Megatron-Core + TE on the GPU (cudnn on Hopper/Blackwell,"
        " fa2 on Ampere); speeds from published benchmarks (`mfusim kernel attention`)",
        default='""',
        allowed=_spec("ATTENTION_IMPLS"),
        since=NEXT,
    ),
    "kernels.grad_reduce_dtype": Key(
        "dtype of the data-parallel gradient reduction; empty = fp32 (fp16 for fp16 training),"
        " bf16 = Megatron-Core --grad-reduce-in-bf16 (half the traffic)",
        default='""',
        allowed=lambda: ("fp32", "bf16"),
        since=NEXT,
    ),
    "kernels.expert_grad_reduce_dtype": Key(
        "dtype of the routed experts' data-parallel gradient reduction; empty = grad_reduce_dtype;"
        " bf16 = NeMo AutoModel's expert fully_shard without a mixed-precision policy",
        default='""',
        allowed=lambda: ("fp32", "bf16"),
        since=NEXT,
    ),
    "kernels.tp_comm_async": Key(
        "tensor-parallel backward collectives beside the GEMMs (Megatron-Core); false = all exposed"
        " (Megatron-LM 2021)",
        since=NEXT,
    ),
    "kernels.cross_entropy": Key(
        "loss kernel over the logits; empty = unfused (Megatron-Core cross_entropy_loss_fusion ="
        " false: fp32 cast, max, subtract, exp, sum, divide as separate passes), fused = its fused"
        " kernels (cross_entropy_fusion_impl = native: 22 + 10 bytes per logit, NeMo 2 recipes),"
        " te = Transformer Engine's Triton kernel (cross_entropy_fusion_impl = te: 6 + 4 bytes per"
        " logit, gradient in place; Megatron-Bridge performance scripts), torch = PyTorch"
        " F.cross_entropy under bf16 autocast (fp32 log_softmax + nll_loss; llm-foundry)",
        default='""',
        allowed=_spec("CROSS_ENTROPY_IMPLS"),
        since=NEXT,
    ),
    "kernels.fused_grouped_mlp": Key(
        "experts' activation (with GPT-OSS's clamps) and probability-scaled fc2 bias inside TE's fused"
        " grouped-MLP ops (Megatron-Core use_transformer_engine_op_fuser) instead of eager PyTorch ops",
        "boolean",
        since=NEXT,
    ),
    "kernels.cuda_graph_impl": Key(
        "CUDA graphs (Megatron-Core --cuda-graph-impl): none; local (MCore) or transformer_engine (TE"
        " make_graphed_callables) = per-layer graphs of cuda_graph_modules; full_iteration = one graph"
        " for the forward-backward pass. A graphed module costs the host one graph launch instead of"
        " issuing each kernel",
        default='"none"',
        allowed=_spec("CUDA_GRAPH_IMPLS"),
        since=NEXT,
    ),
    "kernels.cuda_graph_modules": Key(
        "what per-layer CUDA graphs capture (Megatron-Core --cuda-graph-modules): attn, mlp (dense"
        " layers), moe (refused: needs drop-and-pad MoE), moe_router, moe_preprocess (with moe_router);"
        " [] = the whole layer (refused for dropless MoE layers); must be [] with none or full_iteration",
        "list of strings",
        default="[]",
        allowed=_spec("CUDA_GRAPH_MODULES"),
        since=NEXT,
    ),
    "kernels.moe_dispatcher": Key(
        "MoE token dispatcher (Megatron-Core --moe-token-dispatcher-type alltoall|allgather, or flex"
        " with --moe-flex-dispatcher-backend deepep|hybridep); deepep/hybridep send a token once per"
        " destination rank (per node over RDMA) at their published kernel bandwidth; need NVLink"
        " inside a node and deepep Ampere or newer (A100: intra-node only), hybridep Hopper or newer",
        default='"alltoall"',
        allowed=_spec("MOE_DISPATCHERS"),
        since=NEXT,
    ),
    "kernels.ep_comm_sms": Key(
        "SMs the EP dispatch/combine kernels hold while they overlap compute (Megatron-Core"
        " --moe-flex-dispatcher-num-sms); the overlapped compute runs on the rest. 0 = the"
        " dispatcher's default: deepep 20 (DeepEP Buffer.num_sms), hybridep 32 (HybridEP"
        " NUM_OF_BLOCKS_DISPATCH_API), alltoall/allgather 20 (DeepSeek-V3 §3.2.1)",
        since=NEXT,
    ),
    "kernels.ep_comm_high_priority": Key(
        "under ep_comm_overlap: the communication stream at CUDA's highest priority (Megatron-Core"
        " high_priority_a2a_comm_stream); false = default priority, where an EP kernel launched"
        " beside a running compute kernel waits for it",
        default="false",
        since=NEXT,
    ),
    "kernels.zero3_backward_prefetch": Key(
        "when ZeRO-3/FSDP gathers the next layer's parameters in backward: pre = beside this layer's"
        " backward (FSDP BACKWARD_PRE, FSDP2, Megatron-FSDP), post = after this layer's gradients"
        " (PyTorch FSDP BACKWARD_POST, composer's default), so the gather is not hidden",
        default='"pre"',
        allowed=lambda: ("pre", "post"),
        since=NEXT,
    ),
    "kernels.attention_padding": Key(
        "how q, k, v reach the attention kernel: none = as the layer holds them, unpad = through"
        " flash-attn's bert_padding (gather copies of q, k, v before flash_attn_varlen_func, a"
        " zero-filled scatter of the output after it; llm-foundry's flash_attn_fn): needs attention fa2 or fa3",
        default='"none"',
        allowed=lambda: ("none", "unpad"),
        since=NEXT,
    ),
    "kernels.bias_grad": Key(
        "bias gradients of the dense linear layers (model.linear_bias): fused = in the wgrad GEMM's"
        " epilogue (Transformer Engine), separate = a reduction kernel over each layer's output"
        " gradient (PyTorch nn.Linear; llm-foundry); without linear biases a warning (nothing to"
        " compute), with MLA refused (not modelled)",
        default='"fused"',
        allowed=lambda: ("fused", "separate"),
        since=NEXT,
    ),
    "kernels.norm": Key(
        "the layer norms' kernel: fused = a fused norm at streaming-copy speed (Transformer Engine,"
        " Apex), torch = PyTorch's native LayerNorm at its measured bandwidth (Liger-Kernel's"
        " torch.nn.LayerNorm runs, kernels.toml; llm-foundry's LPLayerNorm)",
        default='"fused"',
        allowed=lambda: ("fused", "torch"),
        since=NEXT,
    ),
    "kernels.qkv_grad": Key(
        "how the attention's q, k, v gradients reach the fused qkv projection: packed = as the"
        " stack's split does it (Transformer Engine's SplitAlongDim backward: a view on MHA's packed"
        " dqkv, a concatenation with GQA under Megatron-Core + TE), cat ="
        " torch.split's backward concatenates them (one cat kernel, read + write of the qkv"
        " gradient; llm-foundry); with MLA refused (not modelled)",
        default='"packed"',
        allowed=lambda: ("packed", "cat"),
        since=NEXT,
    ),
    "kernels.squared_relu": Key(
        'how a squared-ReLU MLP (model.activation = "squared_relu") runs relu(x)^2: compiled = under'
        " torch.compile, one fused kernel each way (2 passes over the fc1 output forward, 3 backward;"
        " Megatron-Core's and NeMo 1's squared_relu, @jit_fuser), eager = torch.pow(F.relu(x), 2) as"
        " PyTorch ops (4 passes in 2 kernels forward, 10 in 4 backward; NeMo 2's NemotronConfig)",
        default='"compiled"',
        allowed=lambda: ("compiled", "eager"),
        since=NEXT,
    ),
    "kernels.fsdp_flat_grad": Key(
        "how a ZeRO-2/3 layer's gradient reaches the buffer that is reduce-scattered: direct ="
        " written there (Megatron's grad buffer, FSDP2), cat = PyTorch FSDP1's FlatParameter, whose"
        " parameters are views of the flat parameter: autograd concatenates their gradients (a"
        " read and a write of the layer's 16-bit gradient per micro-batch); needs parallel.zero >= 2",
        default='"direct"',
        allowed=lambda: ("direct", "cat"),
        since=NEXT,
    ),
    "kernels.zero3_collectives": Key(
        "ZeRO-3 parameter all-gathers and gradient reduce-scatters: nccl = NCCL on the topology"
        " (node NICs aggregated over NVLink), flat = a flat ring on each GPU's share of the node's"
        " NICs (DeepSpeed 2021 ZeRO-3)",
        default='"nccl"',
        allowed=lambda: ("nccl", "flat"),
        since=NEXT,
    ),
    "kernels.stack": Key(
        "software stack whose fitted system residuals (sustained clock, launch gap, host overhead"
        " per micro-batch, NCCL fraction, overlap slowdown) replace the GPU's default-stack table;"
        " empty = Megatron-Core + TE; megatron-deepspeed (no calibration run) takes megatron-2021's"
        " residuals and adds DeepSpeed's pipeline-engine mechanisms; refused on an architecture the"
        " stack was not fitted on",
        default='""',
        allowed=_spec("STACK_NAMES"),
        since=NEXT,
    ),
    # [memory]
    "memory": Key(
        "what the GPU keeps: offloading to host memory, optimizer-state and FP8 activation formats,"
        " the headroom `fits` leaves free",
        "table",
        since=NEXT,
    ),
    "memory.offload_activations": Key(
        "fraction of the stored activations copied to host memory", "number", since=NEXT
    ),
    "memory.headroom_gib": Key(
        "GPU memory kept free: fits means peak <= GPU memory - this (also --memory-headroom)",
        "number",
        unit="GiB",
        default="0",
        since=NEXT,
    ),
    "memory.offload_optimizer": Key(
        "fp32 master weights and Adam moments on the host, Adam on the CPU", since=NEXT
    ),
    "memory.fp8_moe_act_input": Key(
        "routed experts' SwiGLU inputs cached in FP8 for the backward (DeepSeek-V3 §3.3.4; fp8 dtypes, MoE)",
        since=NEXT,
    ),
    "memory.e5m6_attention_output": Key(
        "attention output (the output projection's input) kept once in E5M6, 1.5 bytes per element, "
        "for the attention backward and the projection (DeepSeek-V3 §3.3.3; fp8 dtypes)",
        since=NEXT,
    ),
    "memory.exp_avg_dtype": Key(
        "storage format of Adam's first moment (Megatron --exp-avg-dtype; DeepSeek-V3: bf16)",
        allowed=_spec("MOMENT_DTYPES"),
        since=NEXT,
    ),
    "memory.exp_avg_sq_dtype": Key(
        "storage format of Adam's second moment (Megatron --exp-avg-sq-dtype; DeepSeek-V3: bf16)",
        allowed=_spec("MOMENT_DTYPES"),
        since=NEXT,
    ),
    "memory.sharded_grad_dtype": Key(
        "how a ZeRO-2/3 rank keeps its gradient shard between micro-batches: empty = in the"
        " gradient buffer's dtype (grad_reduce_dtype; Megatron-FSDP, DeepSpeed), the optimizer"
        " adding an fp32 copy of a 16-bit one; fp32 = PyTorch FSDP, which casts each"
        " reduce-scattered shard to the fp32 parameter's dtype and keeps only that",
        default='""',
        allowed=_spec("SHARDED_GRAD_DTYPES"),
        since=NEXT,
    ),
    "memory.sharded_param_dtype": Key(
        "how a ZeRO-3 rank keeps its parameter shard: empty = a 16-bit shard beside the optimizer's"
        " fp32 master (Megatron-FSDP, DeepSpeed); fp32 = PyTorch FSDP mixed precision, whose fp32"
        " shard is the only one, cast to 16-bit before each all-gather and freed after it",
        default='""',
        allowed=_spec("SHARDED_PARAM_DTYPES"),
        since=NEXT,
    ),
    # [run] (simulator/specs.py holds the sourced defaults, next to RunSpec)
    "run.tokens": Key(
        "training tokens of the whole run", "number", unit="tokens", default="required", since=NEXT
    ),
    "run.usd_per_gpu_hour": Key(
        "price of one GPU-hour", "number", unit="USD", default="— (no cost)", since=NEXT
    ),
    "run.gpu_failures_per_year": Key(
        "job interruptions per GPU-year (Llama 3 405B: 0.173)", "number", since=NEXT
    ),
    "run.checkpoint_interval_min": Key(
        "minutes between checkpoints", "number", unit="min", default="0 (Young/Daly optimum)", since=NEXT
    ),
    "run.checkpoint_bytes_per_param": Key(
        "checkpoint size per parameter", "number", unit="bytes", since=NEXT
    ),
    "run.checkpoint_async": Key(
        "checkpoint written in the background", "boolean", default="false", since=NEXT
    ),
    "run.storage_write_GBps": Key("aggregate checkpoint write bandwidth", "number", unit="GB/s", since=NEXT),
    "run.restart_min": Key(
        "time to detect, reschedule and reload after a failure", "number", unit="min", since=NEXT
    ),
    "run.power_utilization": Key("average power draw / rated power", "number", since=NEXT),
    "run.pue": Key("power usage effectiveness of the facility", "number", since=NEXT),
}
# Topology files (and [cluster.intra_node] / [cluster.inter_node] overrides).
TOPOLOGY_KEYS: dict[str, Key] = {
    "name": Key("label of the machine", "string", default="topology"),
    "gpu": Key("GPU catalog name", "string", default="required", allowed=_gpus),
    "gpus_per_node": Key("GPUs per node (NVLink domain)", "integer", default="required"),
    "rank_order": Key("rank layout, innermost first", "list of strings", default='["tp", "cp", "dp", "pp"]'),
    "intra_node": Key("the fabric inside a node", "table"),
    "intra_node.fabric": Key("intra-node fabric", "string", allowed=_spec("INTRA_FABRICS")),
    "intra_node.link_GBps_per_direction": Key(
        "NVLink/PCIe bandwidth per GPU, one direction, at least 0.001 (1 MB/s); stated above the GPU's "
        "own NVLink ports it is simulated as given (a what-if), with a warning",
        "number",
        unit="GB/s (decimal)",
    ),
    "intra_node.latency_us": Key(
        "per-message latency inside a node (send/recv, all-to-all rounds; NCCL collectives use NCCL's tuning latencies)",
        "number",
        unit="µs",
    ),
    "intra_node.nvls": Key("NVLink SHARP in-switch reductions (NVSwitch gen 3+)", "boolean"),
    "inter_node": Key("the network between nodes", "table"),
    "inter_node.fabric": Key("network layout", "string", allowed=_spec("INTER_FABRICS")),
    "inter_node.nics_per_node": Key("NICs per node", "integer"),
    "inter_node.nic_Gbps": Key(
        "bandwidth of one NIC, one direction, at least 0.008 (1 MB/s)", "number", unit="Gb/s (decimal, bits)"
    ),
    "inter_node.latency_us": Key(
        "per-message latency between nodes (send/recv, all-to-all rounds; NCCL collectives use NCCL's tuning latencies)",
        "number",
        unit="µs",
    ),
    "inter_node.nodes_per_leaf": Key("nodes under one leaf switch (a scalable unit)", "integer"),
    "inter_node.oversubscription": Key("leaf downlink : uplink bandwidth ratio (1 = non-blocking)", "number"),
    "inter_node.tiers": Key(
        "switch levels; 0 = the fewest a folded Clos of the switch radix needs", "integer", since=NEXT
    ),
    "inter_node.nodes_per_pod": Key(
        "nodes under one spine group (3+ tiers); 0 = what two tiers hold", "integer", since=NEXT
    ),
    "inter_node.pod_oversubscription": Key(
        "spine -> core bandwidth ratio above a pod (1 = non-blocking)", "number", since=NEXT
    ),
    "inter_node.switch_radix": Key(
        "ports per switch; 0 = 40/64/144 by NIC speed (HDR/NDR/XDR)", "integer", since=NEXT
    ),
    "inter_node.planes": Key("multi-plane NICs: independent networks per NIC port", "integer", since=NEXT),
}
# File-unit conversions of the keys whose spec field is in SI (default shown in the file's unit).
_TOPOLOGY_FIELDS = {
    "intra_node.fabric": ("IntraNodeSpec", "fabric", 1.0),
    "intra_node.link_GBps_per_direction": ("IntraNodeSpec", "link_bandwidth_bytes_per_s", 1e-9),
    "intra_node.latency_us": ("IntraNodeSpec", "latency_s", 1e6),
    "intra_node.nvls": ("IntraNodeSpec", "nvls", 1.0),
    "inter_node.fabric": ("InterNodeSpec", "fabric", 1.0),
    "inter_node.nics_per_node": ("InterNodeSpec", "nics_per_node", 1.0),
    "inter_node.nic_Gbps": ("InterNodeSpec", "nic_bandwidth_bytes_per_s", 8e-9),
    "inter_node.latency_us": ("InterNodeSpec", "latency_s", 1e6),
    "inter_node.nodes_per_leaf": ("InterNodeSpec", "nodes_per_leaf", 1.0),
    "inter_node.oversubscription": ("InterNodeSpec", "oversubscription", 1.0),
    "inter_node.tiers": ("InterNodeSpec", "tiers", 1.0),
    "inter_node.nodes_per_pod": ("InterNodeSpec", "nodes_per_pod", 1.0),
    "inter_node.pod_oversubscription": ("InterNodeSpec", "pod_oversubscription", 1.0),
    "inter_node.switch_radix": ("InterNodeSpec", "switch_radix", 1.0),
    "inter_node.planes": ("InterNodeSpec", "planes", 1.0),
}


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _scalar_type(value: object) -> str | None:
    """The TOML/JSON name of a scalar's type (bool before int: a bool is an int), else None."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _type_name(value: object) -> str:
    scalar = _scalar_type(value)
    if scalar is not None:
        return scalar
    return "list" if isinstance(value, list | tuple) else type(value).__name__


def _section_dataclass(section: str):
    from .. import specs

    return {
        "parallel": specs.ParallelConfig,
        "kernels": specs.KernelOptions,
        "variability": specs.VariabilitySpec,
        "dataloader": specs.DataloaderSpec,
        "model": specs.ModelSpec,
        "model.moe": specs.ModelSpec,
        "model.mla": getattr(specs, "MLASpec", None),
        "memory": getattr(specs, "MemoryOptions", None),
    }.get(section)


def _field_default(cls, name: str) -> object:
    if cls is None or not is_dataclass(cls):
        return MISSING
    for f in fields(cls):
        if f.name == name or (name == "layer_interval" and f.name == "moe_layer_interval"):
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
    return MISSING


def _run_default(name: str) -> object:
    from .. import specs

    table = {
        "gpu_failures_per_year": round(specs.DEFAULT_GPU_FAILURES_PER_YEAR, 4),
        "checkpoint_bytes_per_param": specs.DEFAULT_CHECKPOINT_BYTES_PER_PARAM,
        "storage_write_GBps": specs.DEFAULT_STORAGE_WRITE_GBPS,
        "restart_min": specs.DEFAULT_RESTART_MIN,
        "power_utilization": specs.DEFAULT_POWER_UTILIZATION,
        "pue": specs.DEFAULT_PUE,
    }
    return table.get(name, MISSING)


@dataclass(frozen=True)
class KeyRow:
    key: str
    kind: str  # table / value
    type: str
    default: str
    unit: str
    allowed: tuple[str, ...]
    since: str
    meaning: str


def key_rows(kind: str = "scenario") -> list[KeyRow]:
    """One row per accepted key, with everything the reference shows about it."""
    from .. import specs

    docs = KEYS if kind == "scenario" else TOPOLOGY_KEYS
    rows = []
    for key, what in accepted_keys(kind).items():
        section, _, name = key.rpartition(".")
        doc = docs.get(key)
        if kind == "scenario" and doc is None and section == "sweep":
            doc = Key(f"values of `{'cluster' if name == 'num_gpus' else 'parallel'}.{name}` to try", "list")
        if kind == "scenario" and doc is None and section.startswith("cluster.") and name:
            base = TOPOLOGY_KEYS.get(key.removeprefix("cluster."))
            if base is not None:
                doc = Key(base.meaning, base.type, base.unit, TOPOLOGY_NOTE, base.allowed, base.since)
        doc = doc or Key("")
        default: object = MISSING if doc.default is None else doc.default
        if default is MISSING and section == "run":
            default = _run_default(name)
        if default is MISSING and kind == "topology" and key in _TOPOLOGY_FIELDS:
            cls_name, field_name, scale = _TOPOLOGY_FIELDS[key]
            value = _field_default(getattr(specs, cls_name), field_name)
            default = value * scale if isinstance(value, float) else value
        field_value = _field_default(_section_dataclass(section), name)
        if default is MISSING:
            default = field_value
        if default is MISSING and what == "table":
            default = "—"
        typed = field_value if field_value is not MISSING else default
        type_name = doc.type or ("table" if what == "table" else _type_name(typed))
        rows.append(
            KeyRow(
                key=key,
                kind=what,
                type=type_name,
                default="—" if default is MISSING else _literal(default),
                unit=doc.unit,
                allowed=doc.allowed() if doc.allowed else (),
                since=doc.since,
                meaning=doc.meaning,
            )
        )
    return rows


# ----------------------------------------------------------------------------- JSON Schema
_JSON_TYPES = {
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "string": "string",
    "table": "object",
    "list": "array",
    "list of strings": "array",
    "list or string": ["array", "string"],
}


NAME_MATCH_NOTE = (
    "any case, with -, _ or spaces either way, or an alias listed under Names in docs/reference.md"
)


def _any_case(text: str) -> str:
    """An ECMA-262 regex (JSON Schema `pattern`) matching `text` in any case. Only syntax
    characters are escaped: ECMA-262 with the `u` flag refuses other escapes (`\\-`), which
    Python's `re.escape` writes."""
    return "".join(
        f"[{c.lower()}{c.upper()}]"
        if c.lower() != c.upper()
        else ("\\" + c if c in "^$\\.*+?()[]{}|/" else c)
        for c in text
    )


def name_pattern(allowed: tuple[str, ...]) -> str:
    """The spellings `names.canonical` accepts for `allowed`, as one anchored pattern: each
    choice in any case with separators (-, _, space) anywhere or nowhere, and each alias of a
    choice in any case (as written, or squashed when the squashed form is itself an alias)."""
    from ..names import ALIASES, _squash

    sep = "[-_ ]*"
    alternatives = {sep + sep.join(_any_case(c) for c in _squash(name)) + sep for name in allowed}
    alternatives |= {_any_case(alias) for alias, target in ALIASES.items() if target in allowed}
    return "^(?:" + "|".join(sorted(alternatives)) + ")$"


def scenario_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a scenario file, for editors (taplo, Even Better TOML)."""
    root: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mfusim scenario",
        "description": "A scenario file of mfusim (docs/reference.md). Generated by simulator/cli/reference.py.",
        "type": "object",
        "properties": {},
        "required": ["model", "cluster"],
        "additionalProperties": False,
    }
    nodes: dict[str, dict[str, Any]] = {"": root}
    for row in key_rows("scenario"):
        section, _, name = row.key.rpartition(".")
        node: dict[str, Any] = {"description": row.meaning}
        if row.unit:
            node["description"] += f" [{row.unit}]"
        json_type = _JSON_TYPES.get(row.type)
        if section == "sweep":
            node["type"] = ["array", "string", "number", "boolean"]
        elif json_type == "object":
            node.update({"type": "object", "properties": {}, "additionalProperties": False})
        elif json_type is not None:
            node["type"] = json_type
            if json_type == "array" and row.type == "list of strings":
                node["items"] = {"type": "string"}
        if row.allowed and json_type == "string":
            # the loader matches names as simulator/names.py `canonical` does; a plain enum
            # refused "BF16" or "1F1B" in an editor while mfusim ran them: the enum stays for
            # completion, the pattern accepts exactly the other spellings the loader does
            # (an empty string, where it is the default, says "the default" as the loader reads it)
            empty = [""] if row.default == '""' else []
            node["anyOf"] = [{"enum": list(row.allowed) + empty}, {"pattern": name_pattern(row.allowed)}]
            node["description"] += f" ({NAME_MATCH_NOTE})"
        if row.default not in ("—", "") and json_type in ("integer", "number", "boolean"):
            with contextlib.suppress(ValueError):
                node["default"] = json.loads(row.default.replace(",", "").replace("_", ""))
        parent = nodes.get(section)
        if parent is None:
            continue
        parent["properties"][name] = node
        nodes[row.key] = node
    root["properties"]["cluster"]["required"] = ["topology", "num_gpus"]
    return root


def schema_text() -> str:
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------- `--json` objects
# Each command's --json run on a small input; `{tmp}` is a scratch folder with `sweep.toml` and
# `runs.csv` (one row of the shipped calibration set).
JSON_EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": ("run", "{scenarios}/teaching-pp4.toml", "--set", "run.tokens=1e9", "--json"),
    "compare": (
        "compare",
        "{scenarios}/teaching-pp4.toml",
        "{scenarios}/teaching-pp4.toml",
        "--set",
        "run.tokens=1e9",
        "--json",
    ),
    "whatif": ("whatif", "{scenarios}/teaching-pp4.toml", "--json"),
    "sweep": ("sweep", "{tmp}/sweep.toml", "--json", "--jobs", "1", "--engine", "analytic"),
    "mfu": (
        "mfu",
        "--model",
        "llama3-8b",
        "--tokens-per-s",
        "1e5",
        "--gpus",
        "8",
        "--gpu",
        "h100-sxm",
        "--json",
    ),
    "validate": ("validate", "{tmp}/runs.csv", "--json"),
    "topo": ("topo", "dgx-h100", "--json"),
    "presets": ("presets", "--json"),
    # one kind shown; the other kinds' fields are documented below all the same (JSON_FIELDS)
    "kernel": (
        "kernel",
        "attention",
        "--gpu",
        "h100-sxm",
        "--seq",
        "8192",
        "--heads",
        "64",
        "--head-dim",
        "64",
        "--window",
        "128",
        "--json",
    ),
}
# Keys of a JSON map that are names from a list rather than fixed fields: shown as `<what>`.
_NAME_SETS: dict[str, Callable[[], tuple[str, ...]]] = {
    "category": lambda: __import__("simulator.timeline", fromlist=["CATEGORIES"]).CATEGORIES,
    "preset": _presets,
    "gpu": _gpus,
    "topology": _topologies,
    "scenario": lambda: tuple(
        __import__("simulator.resources", fromlist=["scenario_names"]).scenario_names()
    ),
}


def _example_inputs(tmp: Path) -> None:
    from ..resources import data_dir, published_runs_csv

    teaching = (data_dir("scenarios") / "teaching-pp4.toml").read_text(encoding="utf-8")
    (tmp / "sweep.toml").write_text(
        teaching.replace("num_gpus = 4", "num_gpus = 8")
        + "\n[sweep]\ntp = [1, 2]\nmicro_batch = [1, 2]\npp = [4]\n",
        encoding="utf-8",
    )
    lines = published_runs_csv().read_text(encoding="utf-8").splitlines()
    (tmp / "runs.csv").write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")


def _collapse(keys: list[str]) -> str | None:
    for what, names in _NAME_SETS.items():
        if keys and set(keys) <= set(names()):
            return f"<{what}>"
    return None


# JSON maps keyed by free-form names (publications, GPU labels): their keys show as `<name>`.
NAMED_MAPS = ("summary.by_source", "summary.by_gpu", "summary.by_dtype")


def json_fields(
    obj: object, prefix: str = "", out: dict[str, str] | None = None, stop: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Dotted paths of a JSON value with their JSON types: `a.b`, `rows[].mfu`, `breakdown_s.<category>`.
    Paths in `stop` are listed but not entered."""
    out = {} if out is None else out
    stop = stop or {}
    if prefix in stop:
        return out
    if isinstance(obj, dict):
        keys = list(obj)
        name = "<name>" if prefix in NAMED_MAPS and keys else _collapse(keys)
        items = [(name, obj[keys[0]])] if name else list(obj.items())
        for key, value in items:
            path = f"{prefix}.{key}" if prefix else str(key)
            out.setdefault(path, _json_type(value))
            json_fields(value, path, out, stop)
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        merged: dict[str, Any] = {}
        for item in obj:
            if isinstance(item, dict):
                for k, v in item.items():
                    if merged.get(k) is None:
                        merged[k] = v
        if prefix + "[]" in stop:
            out.setdefault(prefix + "[]", "object")
        else:
            json_fields(merged, prefix + "[]", out, stop)
    return out


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    scalar = _scalar_type(value)
    if scalar is not None:
        return scalar
    if isinstance(value, list):
        inner = {_json_type(v) for v in value}
        return f"array of {inner.pop()}" if len(inner) == 1 else "array"
    return "object"


def command_json(command: str, tmp: Path) -> object:
    """What `mfusim <command> ... --json` prints for the command's example input."""
    from ..resources import data_dir
    from .app import main

    scenarios = str(data_dir("scenarios"))
    argv = [a.replace("{tmp}", str(tmp)).replace("{scenarios}", scenarios) for a in JSON_EXAMPLES[command]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"mfusim {' '.join(argv)} exited {code}: {err.getvalue().strip()}")
    return json.loads(out.getvalue())


def all_json_fields() -> dict[str, dict[str, str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        _example_inputs(tmp)
        return {
            command: json_fields(command_json(command, tmp), stop=JSON_STOP.get(command, {}))
            for command in JSON_EXAMPLES
        }


# ----------------------------------------------------------------------------- CSV columns
def csv_columns() -> dict[str, tuple[str, ...]]:
    """The CSV files mfusim writes or reads, column by column, from the modules that do it."""
    from ..sweep.columns import COLUMNS
    from ..validate.columns import CSV_COLUMNS, REQUIRED_COLUMNS
    from ..validate.report import OUT_COLUMNS

    required = set(REQUIRED_COLUMNS)
    return {
        "sweep": tuple(COLUMNS),
        "validate-in": tuple(c + (" (required)" if c in required else "") for c in CSV_COLUMNS),
        "validate-out": tuple(OUT_COLUMNS),
    }


CSV_FILES = {
    "sweep": "`mfusim sweep --out FILE.csv` (`.jsonl`: one JSON object per line with the same keys; "
    "`sweep --json` lists the best rows as such objects under `top`)",
    "validate-in": "`mfusim validate RUNS.csv`: the published runs read (the shipped set is "
    "`scenarios/published/calibration_runs.csv`); empty cells = not published",
    "validate-out": "`mfusim validate --out FILE.csv`: one row per published run",
}
_CATEGORY_MEANING = (
    "seconds of the step in this category (mean over pipeline stages; they sum to step_time_s)"
)
COLUMN_MEANINGS: dict[str, str] = {
    # sweep
    "status": "ok, infeasible_memory (valid but over the GPU memory) or invalid",
    "reason": "why a configuration is invalid or does not fit (empty when ok)",
    "step_time_s": "simulated step time [s]",
    "tokens_per_s": "tokens per second, whole job",
    "mfu": "model FLOPs utilization (0-1): model FLOPs / (step time × GPUs × peak)",
    "hfu": "hardware FLOPs utilization (0-1): with recomputation counted",
    "peak_memory_gib": "peak memory per GPU [GiB] (the fullest pipeline stage)",
    "num_gpus": "GPUs of this configuration",
    "num_microbatches": "micro-batches per step per pipeline = global_batch / (micro_batch · dp)",
    "capacity_gib": "usable GPU memory [GiB]",
    "engine": "analytic (closed form) or des (discrete-event engine: the row was checked by it)",
    "closed_form_mfu": "on a row the engine checked (--engine auto), the closed form's MFU it replaced",
    "fingerprint": "hash of the scenario (minus the row's own configuration) and mfusim version; `--resume` reuses only rows of this scenario",
    "time_to_train_days": "wall days of the whole run ([run] table; empty without one)",
    "gpu_hours": "GPU-hours of the whole run",
    "cost_usd": "cost of the whole run (with run.usd_per_gpu_hour)",
    "energy_mwh": "facility energy of the whole run [MWh]",
    "goodput": "share of wall time spent on useful training (0-1)",
    # validate, published runs
    "id": "row identifier",
    "source": "publication the row comes from",
    "model_name": "model as published",
    "params_b": "parameters, billions (as published)",
    "layers": "transformer layers",
    "hidden": "hidden size",
    "heads": "attention heads",
    "kv_heads": "key/value heads",
    "ffn_hidden": "MLP inner size",
    "vocab": "vocabulary size",
    "seq_len": "sequence length [tokens]",
    "gpu": "GPU label as published (e.g. A100-SXM-80GB)",
    "tp": "tensor-parallel size",
    "pp": "pipeline-parallel size",
    "dp": "data-parallel size",
    "cp": "context-parallel size",
    "vp": "virtual pipeline chunks",
    "ep": "expert-parallel size",
    "micro_batch": "sequences per micro-batch",
    "global_batch": "sequences per step",
    "recompute": "none, selective or full",
    "sequence_parallel": "true/false",
    "zero_or_dist_opt": "ZeRO stage or distributed optimizer, as published",
    "precision": "bf16, fp16 or fp8",
    "measured_tflops_per_gpu": "measured model TFLOP/s per GPU",
    "measured_mfu_pct": "measured MFU [%]",
    "measured_hfu_pct": "measured HFU [%]",
    "iteration_time_s": "measured step time [s]",
    "notes": "free text",
    # validate --out
    "dtype": "training dtype of the simulation",
    "target": "true for the A100/H100 dense 16-bit rows the accuracy target is stated on",
    "metric": "which measurement is compared (step time, tokens/s, TFLOP/s, MFU or HFU)",
    "flop_convention": "how the publication counted FLOPs (docs/validate-assumptions.md)",
    "predicted": "the simulated value of the metric",
    "measured": "the published value of the metric",
    "error_pct": "(predicted - measured) / measured [%]",
    "memory_fits": "whether the simulated configuration fits in GPU memory",
    "assumptions": "what the row did not say and was assumed (; separated)",
}


def column_meaning(column: str) -> str:
    """A CSV column's meaning: written here, or derived (breakdown categories, [parallel] keys)."""
    from ..timeline import CATEGORIES

    name = column.removesuffix(" (required)")
    if name.endswith("_s") and name[:-2] in CATEGORIES:
        return _CATEGORY_MEANING
    if name in COLUMN_MEANINGS:
        return COLUMN_MEANINGS[name]
    key = KEYS.get(f"parallel.{name}")
    return f"[parallel] {name}: {key.meaning}" if key else ""


# Fields several commands share (what was simulated), documented once.
COMMON_JSON_FIELDS: dict[str, str] = {
    "model": "the model simulated",
    "model.name": "model name",
    "model.params": "parameters",
    "model.active_params": (
        "parameters active per token (MoE: shared + top-k experts; dense: all), both embedding tables"
        " included (DeepSeek/Kimi/OpenAI publish theirs without the input one: docs/hf-import.md)"
    ),
    "model.non_embedding_params": "parameters without the embeddings",
    "model.layers": "transformer layers",
    "model.hidden": "hidden size",
    "model.heads": "attention heads",
    "model.kv_heads": "key/value heads",
    "model.head_dim": "per-head width",
    "model.ffn_hidden": "MLP inner size",
    "model.vocab": "vocabulary size",
    "model.seq_len": "sequence length [tokens]",
    "model.attention": "attention kind as simulated (mha, gqa, mqa or mla)",
    "model.mla": "MLA ranks and head widths as simulated (MLA models only)",
    "model.local_attention": (
        "sliding-window / chunked attention as simulated: the window, the chunk and how many layers use"
        " each (models with local attention shorter than seq_len only)"
    ),
    "gpu": "GPU catalog name",
    "topology": "topology name",
    "dtype": "training dtype",
    "seq_len": "sequence length [tokens]",
    "accuracy": (
        "how far the model lands from measured throughput on comparable published runs: `mfusim validate`'s"
        " rows of this GPU architecture, model kind and precision class run on the scenario's software stack"
        " (simulator/catalog/accuracy.toml)"
    ),
    "accuracy.group": "architecture, dense or moe, and precision class (16bit, fp8, fp4)",
    "accuracy.stack": "the software stack simulated ([kernels] stack; megatron-core when not set)",
    "accuracy.residuals_of": (
        "the stack whose fitted residuals the simulation uses: the stack itself, or the one a stack with no"
        " published run of its own borrows (docs/calibration.md)"
    ),
    "accuracy.rows": "published runs of the group on this stack (0: none; then the errors are null)",
    "accuracy.mape_pct": "their mean absolute error [%]",
    "accuracy.bias_pct": "their mean signed error [%] (> 0: the model predicted faster than measured)",
    "accuracy.all_stacks": "the same over the group's published runs of every stack",
    "accuracy.all_stacks.rows": "published runs in the group (0: none; then the errors are null)",
    "accuracy.all_stacks.mape_pct": "their mean absolute error [%]",
    "accuracy.all_stacks.bias_pct": "their mean signed error [%] (> 0: the model predicted faster than measured)",
    "accuracy.note": "what the figures are",
    "mfusim_version": "the mfusim version that produced this output",
    "warnings": "what the simulation approximated or assumed (also printed on stderr)",
}
# Meanings of the --json fields. A path ending in a name shown as `<category>` / `<preset>` /
# `<gpu>` stands for every name of that list; a path in JSON_STOP is documented elsewhere.
_RUN_PARALLEL = "the configuration simulated (the [parallel] keys, with dp and the schedule resolved)"
JSON_STOP: dict[str, dict[str, str]] = {
    "compare": {
        "scenarios[]": "one `mfusim run --json` object per scenario (fields above), with its `label`"
    },
    "sweep": {"top[]": "one row of the sweep CSV as an object: the columns below (CSV section)"},
    "validate": {"rows[].scenario": "the scenario the row was simulated as, in scenario-file keys"},
}
JSON_FIELDS: dict[str, dict[str, str]] = {
    "run": {
        "name": "scenario name (the file's, also under overrides)",
        "overrides": (
            "the command line's --set / --unset / --tokens / --usd-per-gpu-hour / --memory-headroom as given,"
            " in order of application (absent without): the values simulated are the scenario's with these applied"
        ),
        "num_gpus": "GPUs in the job",
        "parallel": _RUN_PARALLEL,
        "parallel.num_microbatches": "micro-batches per step per pipeline = global_batch / (micro_batch · dp)",
        "parallel.pipeline_layout": "layers per virtual stage as simulated from [parallel] pipeline_layout; "
        "[] = the even split",
        "parallel.cp_comm_type": "the context-parallel implementation (p2p, allgather, a2a, torch-allgather, "
        "torch-alltoall); only at cp > 1, where it moves the step",
        "step_time_s": "simulated step time [s]",
        "tokens_per_s": "tokens per second, whole job",
        "tokens_per_s_per_gpu": "tokens per second per GPU",
        "model_flops_per_step": "model FLOPs of one step (exact count, no recomputation)",
        "hardware_flops_per_step": "FLOPs executed, recomputation included",
        "model_tflops_per_gpu": "model TFLOP/s per GPU",
        "mfu": "model FLOPs utilization = model FLOPs / (step time × GPUs × peak), 0-1",
        "hfu": "hardware FLOPs utilization: like mfu with recomputation counted",
        "mfu_6psi": "MFU with the 6Ψ approximation (6 × parameters × tokens, no attention FLOPs)",
        "kernels": "the software stack the step was costed with (issue 12, docs/calibration.md)",
        "kernels.architecture": "GPU architecture whose kernel-model parameters apply (kernels.toml)",
        "kernels.attention": "attention kernel used: fa2, fa3, cudnn, triton, flash-attn-triton or unfused",
        "kernels.grad_reduce_dtype": "dtype of the data-parallel gradient reduction",
        "kernels.tp_comm_async": "TP backward collectives overlapped with the GEMMs",
        "kernels.cross_entropy": "loss kernel: unfused (eager passes over the logits), fused, te or torch",
        "kernels.zero3_collectives": "how ZeRO-3 collectives are costed: nccl or flat",
        "kernels.stack": "[kernels] stack whose system residuals were applied (empty: the default tables)",
        "kernels.zero3_backward_prefetch": "ZeRO-3/FSDP backward gathers: pre (hidden) or post (exposed)",
        "kernels.fused_grouped_mlp": "experts' activation and fc2 bias in TE's fused grouped-MLP ops",
        "kernels.cuda_graph_impl": "CUDA graph implementation: none, local, transformer_engine or full_iteration",
        "kernels.cuda_graph_modules": "modules the per-layer CUDA graphs capture ([] = whole layer)",
        "kernels.moe_dispatcher": "MoE token dispatcher: alltoall, allgather, deepep or hybridep",
        "kernels.ep_comm_sms": "SMs the EP dispatch/combine kernels take from overlapped compute (key or dispatcher default)",
        "kernels.system": "system residuals of the GPU's default stack (efficiency.toml)",
        "kernels.system.sustained_clock_fraction": "compute speed under sustained load vs the microbenchmarks (the calibrated clock x the board-power law, simulator/clocks.py)",
        "kernels.system.kernel_launch_s": "unhidden launch gap per kernel [s]",
        "kernels.system.microbatch_overhead_s": "host overhead per micro-batch and phase [s]",
        "kernels.system.nccl_bw_fraction": "achieved fraction of link bandwidth of collectives in the job",
        "kernels.system.overlap_slowdown": "compute slowdown while communication overlaps it",
        "kernels.system.fp4_matmul_fraction": "NVFP4 MMA pipe throughput relative to the kernel model's low-precision main loop (recipes.toml; latency and memory floor unscaled)",
        "kernels.system.tensor_activity": "tensor FLOP rate of the most power-limited pipeline stage's kernels relative to a saturating GEMM, fused attention weighted by its power per unit of it (kernels.toml attention_power_factor), 0 where no power law applies (simulator/clocks.py)",
        "kernels.system.power_limited_clock": "clock the board power limit allows for that stage's kernel mix (the lowest stage clock), relative to the benchmarks' boost clock (simulator/clocks.py)",
        "kernels.system.gpu_speed_spread": "coefficient of variation of the per-GPU speed ([cluster] gpu_speed_spread or the architecture's, simulator/gpu_spread.py)",
        "kernels.system.slowest_gpu_factor": "expected extra time of the slowest of num_gpus GPUs, as a fraction of compute + recompute + bubble (sigma x E[max of N normals])",
        "kernels.system.expert_gemm_overhead_s": "time per eager per-expert GEMM of TE GroupedLinear's multi-stream path [s] (fitted on the MoE rows, docs/calibration.md; charged only on that path)",
        "kernels.expert_gemm_overhead": "MoE models only: the eager per-expert GEMM residual as this step pays it (trace segments 'eager expert GEMM overhead')",
        "kernels.expert_gemm_overhead.eager_path": "the routed experts run TE GroupedLinear's eager multi-stream path (no fused grouped MLP, no CUDA graph of the MoE layer)",
        "kernels.expert_gemm_overhead.per_gemm_s": "time charged per eager per-expert GEMM [s] (0 off the eager path)",
        "kernels.expert_gemm_overhead.gemms_per_moe_layer_microbatch": "per-expert GEMMs of one MoE layer and micro-batch: local experts x (fc1, fc2) x (forward, dgrad, wgrad)",
        "kernels.expert_gemm_overhead.per_moe_layer_microbatch_s": "their residual per MoE layer and micro-batch [s], on the compute stream",
        "breakdown_s": "seconds of the step per category, mean over pipeline stages (sums to step_time_s)",
        "breakdown_s.<category>": "seconds in this category",
        "breakdown_by_stage_s": "the same per pipeline stage (each sums to step_time_s)",
        "breakdown_by_stage_s[].<category>": "seconds in this category on this stage",
        "memory": "memory per GPU",
        "memory.peak_gib_per_gpu": "peak memory of the fullest stage [GiB]",
        "memory.capacity_gib": "usable GPU memory [GiB]: the GPU's minus memory.headroom_gib",
        "memory.fits": "peak within capacity",
        "memory.parts_gib": "peak split by part [GiB]",
        "memory.parts_gib.weights": "model weights held by this GPU",
        "memory.parts_gib.grads": "gradients",
        "memory.parts_gib.optimizer": "optimizer state (fp32 master weights and Adam moments)",
        "memory.parts_gib.activations": "activations kept for the backward pass (peak in flight)",
        "memory.parts_gib.buffers": "communication and temporary buffers",
        "memory.parts_gib.reserved": "CUDA context and allocator reserve",
        "memory.peak_gib_by_stage": "peak memory of each pipeline stage [GiB]",
        "collectives": "every collective of the step, costed once per distinct group",
        "collectives[].group": "tp, cp, ep, dp or pp",
        "collectives[].kind": "allreduce, allgather, reducescatter, alltoall or p2p",
        "collectives[].message_bytes": "bytes per GPU of one call",
        "collectives[].algorithm": "algorithm the cost model chose (ring, tree, nvls, ...; deepep or hybridep for"
        " those dispatchers' EP dispatch/combine)",
        "collectives[].time_s": "time of one call [s]",
        "collectives[].bottleneck": "the link that limits it (DeepEP/HybridEP: also their published kernel"
        " rate or the NVLink forwarding leg)",
        "collectives[].bus_bandwidth_bytes_per_s": "bus bandwidth achieved (nccl-tests convention)",
        "plan": "the whole training run, when the scenario has a [run] table (docs/plan.md)",
        "plan.tokens": "training tokens of the run",
        "plan.num_steps": "steps = tokens / tokens per step",
        "plan.tokens_per_s": "tokens per second while training",
        "plan.compute_days": "days of training without failures or checkpoints",
        "plan.days": "wall-clock days of the run, with checkpoints, restarts and lost work",
        "plan.optimal_checkpoint_interval_s": "the Young/Daly optimum interval [s]",
        "plan.checkpoint_every_steps": "steps between checkpoints (the interval rounded to whole steps)",
        "plan.gpu_hours": "GPU-hours of the run (wall time × GPUs)",
        "plan.cost_usd": "cost of the run at run.usd_per_gpu_hour",
        "plan.usd_per_gpu_hour": "price per GPU-hour used",
        "plan.energy_mwh": "facility energy [MWh] (GPU power × utilization × PUE)",
        "plan.facility_power_mw": "facility power while training [MW]",
        "plan.goodput": "share of wall time spent on useful training (0-1)",
        "plan.time_fractions": "wall time split (sums to 1)",
        "plan.time_fractions.useful": "training that is kept",
        "plan.time_fractions.checkpoint": "writing checkpoints (stalls)",
        "plan.time_fractions.restart": "restarting after failures",
        "plan.time_fractions.lost_work": "training redone after a failure",
        "plan.checkpoint_interval_s": "time between checkpoints [s]",
        "plan.checkpoint_interval_source": "young-daly (the optimum), storage-bound (an asynchronous "
        "checkpoint's write outlasts the optimum), given (run.checkpoint_interval_min) or none (no "
        "failures and no interval given: no checkpoints)",
        "plan.checkpoint_bytes": "size of one checkpoint [bytes]",
        "plan.checkpoint_write_s": "time to write one checkpoint [s]",
        "plan.checkpoint_stall_s": "training time lost per checkpoint [s]",
        "plan.checkpoint_async": "checkpoints written in the background",
        "plan.job_mtbf_hours": "mean time between job interruptions [h]",
        "plan.expected_interruptions": "interruptions expected over the run",
        "plan.restart_s": "time per restart [s]",
        "plan.pue": "power usage effectiveness used",
        "plan.it_power_w_per_gpu": "average IT power per GPU [W]",
    },
    "whatif": {
        "name": "scenario name",
        "headline": "the one-sentence answer printed first",
        "bottleneck": "the largest non-compute category",
        "bottleneck.category": "its name",
        "bottleneck.fraction_of_step": "its share of the step (0-1)",
        "baseline": "the scenario as given",
        "baseline.mfu": "MFU (0-1)",
        "baseline.hfu": "HFU (0-1)",
        "baseline.step_time_s": "step time [s]",
        "baseline.tokens_per_s": "tokens per second",
        "baseline.breakdown_s": "seconds per category",
        "baseline.breakdown_s.<category>": "seconds in this category",
        "baseline.breakdown_fraction": "share of the step per category (0-1)",
        "baseline.breakdown_fraction.<category>": "share of the step",
        "baseline.attributed_fraction": "share of the step attributed to each category",
        "baseline.attributed_fraction.<category>": "share attributed",
        "baseline.memory_fits": "the baseline fits in GPU memory",
        "cheapest_fit": "for a baseline that does not fit: the key of the fitting lever that keeps the most MFU",
        "levers": "every lever simulated, best first (`fit_*` levers: ways to fit an out-of-memory baseline)",
        "levers[].key": "the lever's identifier (e.g. interleave_vp2, fit_zero3; the scenario keys it sets are in change)",
        "levers[].name": "the lever in words",
        "levers[].change": "each scenario key it sets, old -> new value (`run --set KEY=NEW` of each simulates the "
        "lever; pad_shapes' mfu counts the unpadded model's FLOPs)",
        "levers[].addresses": "the categories it acts on (`memory` for a way to fit)",
        "levers[].mfu": "MFU with the lever (0-1)",
        "levers[].gain": "MFU gain over the baseline (0-1, negative = worse)",
        "levers[].step_time_s": "step time with the lever [s]",
        "levers[].tokens_per_s": "tokens per second with the lever",
        "levers[].peak_memory_gib": "peak memory per GPU with the lever [GiB]",
        "levers[].fits": "fits in GPU memory (with the headroom)",
        "levers[].note": "a caveat (e.g. why it does not fit)",
        "skipped": "levers that do not apply to this scenario",
        "skipped[].key": "the lever's identifier",
        "skipped[].name": "the lever in words",
        "skipped[].change": "the change it would be",
        "skipped[].addresses": "the categories it would act on",
        "skipped[].skipped": "why it does not apply (a schedule lever towards a larger pipeline bubble is not one)",
    },
    "sweep": {
        "name": "scenario name",
        "num_configurations": "configurations evaluated",
        "counts": "configurations by status",
        "counts.ok": "valid and fit in memory",
        "counts.infeasible_memory": "valid but over the GPU memory",
        "counts.invalid": "not a valid configuration (the reason column says why)",
        "rank_by": "the quantity ranked by (--rank-by)",
        "engines": "which engine produced the numbers",
        "largest_closed_form_engine_gap": "largest |closed form − engine| / engine MFU over the rows the engine checked (--engine auto)",
        "top": "the best --top rows",
    },
    "mfu": {
        "gpu": "GPU catalog name",
        "dtype": "dtype whose peak is used",
        "num_gpus": "GPUs",
        "peak_flop_per_s_per_gpu": "peak FLOP/s of one GPU in that dtype",
        "tokens_per_s": "measured tokens per second, whole job",
        "model": "model preset (when given)",
        "params": "parameters",
        "non_embedding_params": "parameters without the embeddings",
        "seq_len": "sequence length [tokens]",
        "flops_per_token": "FLOPs per token under each convention",
        "flops_per_token.6psi": "6 × parameters",
        "flops_per_token.6psi_attn": "6 × parameters + attention (PaLM appendix B)",
        "flops_per_token.exact": "every matrix multiplication of the model (SPEC §4)",
        "mfu": "MFU with the exact count (0-1)",
        "mfu_6psi": "MFU with 6Ψ",
        "mfu_6psi_attn": "MFU with 6Ψ + attention",
        "hfu": "HFU: with recomputation counted",
        "model_tflops_per_gpu": "model TFLOP/s per GPU",
    },
    "validate": {
        "csv": "the runs file read",
        "summary": "mean absolute percentage errors",
        "summary.overall": "over every usable row",
        "summary.overall.mape_pct": "mean absolute percentage error [%]",
        "summary.overall.rows": "rows",
        "summary.target_a100_h100_dense_16bit": "over the rows of the accuracy target (A100/H100, dense, 16-bit)",
        "summary.target_a100_h100_dense_16bit.mape_pct": "mean absolute percentage error [%]",
        "summary.target_a100_h100_dense_16bit.rows": "rows",
        "summary.by_source": "per publication",
        "summary.by_source.<name>": "that publication's rows",
        "summary.by_source.<name>.mape_pct": "mean absolute percentage error [%]",
        "summary.by_source.<name>.rows": "rows",
        "summary.by_gpu": "per GPU label",
        "summary.by_gpu.<name>": "that GPU's rows",
        "summary.by_gpu.<name>.mape_pct": "mean absolute percentage error [%]",
        "summary.by_gpu.<name>.rows": "rows",
        "summary.by_dtype": "per dtype",
        "summary.by_dtype.<name>": "that dtype's rows",
        "summary.by_dtype.<name>.mape_pct": "mean absolute percentage error [%]",
        "summary.by_dtype.<name>.rows": "rows",
        "summary.moe": "mixture-of-experts rows (issue 13)",
        "summary.moe.all": "every usable MoE row",
        "summary.moe.all.mape_pct": "mean absolute percentage error [%]",
        "summary.moe.all.rows": "rows",
        "summary.moe.all.bias_pct": "mean signed error [%] (> 0: predicted too fast / too high)",
        "summary.moe.all.spread_floor_pct": "the MAPE no simulator can go below on these rows [%]: rows "
        "that simulate the very same scenario but were measured apart contribute the best error a "
        "single prediction reaches (the data's own spread), every other row 0",
        "summary.moe.newest_release": "each configuration's row from its newest container release",
        "summary.moe.newest_release.mape_pct": "mean absolute percentage error [%]",
        "summary.moe.newest_release.rows": "rows",
        "summary.moe.newest_release.bias_pct": "mean signed error [%]",
        "summary.moe.newest_release.spread_floor_pct": "as summary.moe.all.spread_floor_pct [%]",
        "summary.moe.by_family": "per MoE model family: `all` and `newest_release` as above",
        "summary.moe.data_spread": "configurations the simulator cannot tell apart measured > 20% apart "
        "(model, gpu, num_gpus, rows, measured_min, measured_max, ratio, predicted): reported, not fitted",
        "summary.memory_disagreements": "rows that ran although the memory model says they do not fit "
        "(the model over-counts there or misses a saving the run used): reported, predictions unchanged",
        "summary.memory_disagreements.rows": "such rows",
        "summary.memory_disagreements.of": "rows simulated",
        "summary.memory_disagreements.by_gpu": "such rows per GPU label",
        "summary.unusable_rows": "rows that could not be simulated",
        "rows": "one object per usable row (the --out CSV columns)",
        "rows[].id": "row identifier",
        "rows[].source": "publication",
        "rows[].gpu": "GPU label",
        "rows[].dtype": "dtype simulated",
        "rows[].target": "a row of the accuracy target",
        "rows[].metric": "the measurement compared",
        "rows[].flop_convention": "how the publication counted FLOPs",
        "rows[].predicted": "simulated value",
        "rows[].measured": "published value",
        "rows[].error_pct": "(predicted - measured) / measured [%]",
        "rows[].step_time_s": "simulated step time [s]",
        "rows[].mfu": "simulated MFU (0-1)",
        "rows[].memory_fits": "the configuration fits in GPU memory",
        "rows[].assumptions": "what the row did not say and was assumed",
        "unusable": "rows that could not be simulated, with the reason",
    },
    "topo": {
        "name": "topology name",
        "gpu": "GPU catalog name",
        "num_gpus": "GPUs summarized (--gpus)",
        "gpus_per_node": "GPUs per node",
        "num_nodes": "nodes",
        "intra_node_fabric": "fabric inside a node",
        "nvls": "NVLink SHARP available",
        "intra_node_GBps_per_gpu": "intra-node bandwidth per GPU, one direction [GB/s]",
        "intra_node_latency_us": "intra-node latency [µs]",
        "inter_node_fabric": "network layout",
        "nics_per_node": "NICs per node",
        "nic_Gbps": "one NIC [Gb/s]",
        "nic_GBps_per_gpu": "network bandwidth per GPU [GB/s]",
        "nic_GBps_per_node": "network bandwidth per node [GB/s]",
        "inter_node_latency_us": "inter-node latency [µs]",
        "nodes_per_leaf": "nodes per leaf switch",
        "num_scalable_units": "leaf groups (scalable units)",
        "num_leaf_switches": "leaf switches",
        "num_spine_switches": "spine switches",
        "num_core_switches": "switches above the spine (3+ tiers)",
        "switch_radix": "ports per switch (times the planes)",
        "planes": "independent network planes per NIC port",
        "num_tiers": "switch levels",
        "tiers": "per switch level, leaf first",
        "tiers[].name": "leaf, spine, core, ... (rail-only: per rail)",
        "tiers[].switches": "switches at this level",
        "tiers[].radix": "ports per switch",
        "tiers[].nodes_per_group": "nodes under one group of this level",
        "tiers[].gpus_per_group": "GPUs under one group of this level",
        "tiers[].oversubscription": "downlink : uplink bandwidth of this level (1 at the top)",
        "nodes_per_pod": "nodes under one spine group (all nodes below 3 tiers)",
        "num_pods": "spine groups (pods)",
        "pod_oversubscription": "spine -> core bandwidth ratio above a pod",
        "oversubscription": "leaf downlink : uplink ratio",
        "leaf_uplink_GBps": "uplink bandwidth of one leaf [GB/s]",
        "bisection_GBps": "bisection bandwidth of the job's network [GB/s]",
        "bisection_GBps_per_gpu": "the same per GPU [GB/s]",
        "rank_order": "rank layout, innermost first",
    },
    "compare": {
        "scenarios": "the scenarios compared, in the order given",
        "best_mfu": "label of the scenario with the highest MFU",
        "best_tokens_per_s": "label of the scenario with the most tokens per second",
        "fastest_run": "label of the scenario whose whole run ([run]) finishes first",
    },
    "kernel": {
        "kernel": "the kind: gemm, attention, memory, allreduce, allgather, reducescatter or alltoall",
        "gpu": "GPU catalog name (gemm, attention, memory)",
        "impl": "attention kernel run: fa2, fa3, cudnn, triton, flash-attn-triton or unfused",
        "pass": "attention pass: fwd, bwd or fwd+bwd",
        "batch": "batch (gemm: batched GEMMs; attention: sequences)",
        "seq": "attention sequence length",
        "heads": "attention heads",
        "head_dim": "attention head dimension",
        "causal": "causal mask (true with --window)",
        "window": "sliding window of keys per query, itself included; only with --window (>= seq: full causal)",
        "time_s": "kernel time [s]",
        "tflops": "achieved TFLOP/s (attention: FlashAttention's FLOP convention, the mask's and window's "
        "useful work)",
        "flops": "FLOPs counted",
        "dtype": "GEMM dtype",
        "m": "GEMM rows",
        "n": "GEMM columns",
        "k": "GEMM inner dimension",
        "tile": "GEMM tile chosen (rows x columns)",
        "split_k": "GEMM split-K factor, or stream-k",
        "waves": "GEMM waves of tiles over the SMs",
        "kind": "memory access kind",
        "bytes": "bytes moved (collectives: the message, as nccl-tests counts it)",
        "GBps": "memory bandwidth achieved [GB/s]",
        "topology": "topology of a collective",
        "gpus": "ranks in a collective",
        "gpus_per_node": "ranks per node of a collective (only with --gpus-per-node)",
        "algbw_GBps": "collective algorithm bandwidth = bytes / time [GB/s]",
        "busbw_GBps": "collective bus bandwidth, nccl-tests' convention [GB/s]",
        "algorithm": "NCCL algorithm/protocol the time is for (e.g. ring/Simple, nvls/Simple): NCCL's tuner "
        "choice unless --algo",
        "bottleneck": "the link that bounds it (nvlink, nic, ...)",
    },
    "presets": {
        "scenarios": "shipped scenarios (usable by name)",
        "scenarios.<scenario>": "one scenario",
        "scenarios.<scenario>.name": "its title",
        "scenarios.<scenario>.model": "model name",
        "scenarios.<scenario>.num_gpus": "GPUs",
        "scenarios.<scenario>.gpu": "GPU catalog name",
        "scenarios.<scenario>.topology": "topology name",
        "gpus.<gpu>.board_power_w": "rated board power [W]",
        "models": "model presets",
        "models.<preset>": "one preset",
        "models.<preset>.params": "parameters",
        "models.<preset>.active_params": (
            "parameters active per token (MoE: shared + top-k experts), both embedding tables included"
        ),
        "models.<preset>.layers": "layers",
        "models.<preset>.hidden": "hidden size",
        "models.<preset>.seq_len": "sequence length",
        "gpus": "GPU catalog",
        "gpus.<gpu>": "one GPU",
        "gpus.<gpu>.peak_bf16_tflops": "dense BF16 peak [TFLOP/s]",
        "gpus.<gpu>.peak_fp8_tflops": "dense FP8 peak [TFLOP/s]",
        "gpus.<gpu>.peak_mxfp8_tflops": "dense MXFP8 peak [TFLOP/s] (0: none)",
        "gpus.<gpu>.peak_nvfp4_tflops": "dense NVFP4 peak [TFLOP/s] (0: none)",
        "gpus.<gpu>.hbm_gib": "memory [GiB]",
        "gpus.<gpu>.hbm_TBps": "memory bandwidth [TB/s]",
        "topologies": "shipped topology names",
    },
}


# --json fields that can be null: (their type otherwise, when they are null). The example run
# of each command shows one of the two cases only, so the reference says both; a test checks
# that every field an example prints as null is listed here.
_NO_POWER = "the GPU's catalog entry has no board_power_w (energy not reported, with a warning)"
_NO_CHECKPOINTS = "run.gpu_failures_per_year = 0 and no run.checkpoint_interval_min: no checkpoints"
_NO_MOE = "no MoE row was simulated"
_NO_ACCURACY_ROWS = {
    f"accuracy.{group}{name}": ("number", "rows = 0 (no published run of the group)")
    for group in ("", "all_stacks.")
    for name in ("mape_pct", "bias_pct")
}
NULLABLE: dict[str, dict[str, tuple[str, str]]] = {
    "run": {
        **_NO_ACCURACY_ROWS,
        "plan.cost_usd": ("number", "run.usd_per_gpu_hour (--usd-per-gpu-hour) is not given"),
        "plan.usd_per_gpu_hour": ("number", "not given"),
        "plan.energy_mwh": ("number", _NO_POWER),
        "plan.facility_power_mw": ("number", _NO_POWER),
        "plan.it_power_w_per_gpu": ("number", _NO_POWER),
        "plan.job_mtbf_hours": ("number", "run.gpu_failures_per_year = 0: no interruptions"),
        "plan.checkpoint_interval_s": ("number", _NO_CHECKPOINTS),
        "plan.checkpoint_every_steps": ("integer", _NO_CHECKPOINTS),
        "plan.optimal_checkpoint_interval_s": ("number", "run.gpu_failures_per_year = 0: no optimum"),
    },
    "whatif": {"cheapest_fit": ("string", "the baseline fits, or no lever tried fits"), **_NO_ACCURACY_ROWS},
    "sweep": {"largest_closed_form_engine_gap": ("number", "the engine checked no row"), **_NO_ACCURACY_ROWS},
    "validate": {
        f"summary.moe.{group}.{name}": ("number", _NO_MOE)
        for group in ("all", "newest_release")
        for name in ("mape_pct", "bias_pct", "spread_floor_pct")
    },
}


def json_type_cell(command: str, path: str, example_type: str) -> str:
    """The type column of a --json field: `number or null` for the fields that can be null."""
    nullable = NULLABLE.get(command, {}).get(path)
    return example_type if nullable is None else f"{nullable[0]} or null"


def json_meaning(command: str, path: str) -> str:
    """A --json field's meaning: written above, or a [parallel] key's own (run's `parallel.tp`)."""
    docs = {**JSON_FIELDS.get(command, {}), **JSON_STOP.get(command, {})}
    nullable = NULLABLE.get(command, {}).get(path)
    if path in docs:
        return docs[path] + ("" if nullable is None else f"; null when {nullable[1]}")
    if path in COMMON_JSON_FIELDS:
        return COMMON_JSON_FIELDS[path]
    head, _, name = path.rpartition(".")
    if head in ("parallel", "baseline.parallel") and f"parallel.{name}" in KEYS:
        return KEYS[f"parallel.{name}"].meaning
    return ""


# ----------------------------------------------------------------------------- the document
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _allowed_cell(values: tuple[str, ...]) -> str:
    if not values:
        return ""
    shown = ", ".join(f"`{v}`" for v in values[:12])
    return shown + (f", … ({len(values)} in all)" if len(values) > 12 else "")


def _key_table(rows: list[KeyRow], strip: str = "") -> list[str]:
    out = [
        "| key | type | default | unit | allowed | since | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        key = r.key.removeprefix(strip)
        out.append(
            f"| `{key}` | {r.type} | {_cell(r.default)} | {r.unit} | {_allowed_cell(r.allowed)} | {r.since} "
            f"| {_cell(r.meaning)} |"
        )
    return out


def _sections(rows: list[KeyRow]) -> dict[str, list[KeyRow]]:
    """Rows grouped by their table: "" for the top level, then `model`, `model.moe`, ..."""
    tables = {r.key for r in rows if r.kind == "table"}
    out: dict[str, list[KeyRow]] = {"": []}
    for r in rows:
        section = r.key.rpartition(".")[0]
        if r.kind == "table" and section == "":
            out[""].append(r)
            out.setdefault(r.key, [])
        elif section in tables or section == "":
            out.setdefault(section, []).append(r)
    return out


def reference_markdown(json_fields_by_command: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The whole docs/reference.md."""
    from .. import __version__
    from ..names import ALIASES

    lines = [
        "# mfusim reference",
        "",
        "<!-- Generated by `python -m simulator.cli.reference --write` from the code; do not edit by hand. -->",
        "",
        "Every key of scenario and topology files, the `--json` object of every command, the CSV columns",
        f"and every command's flags, for mfusim {__version__}. Generated from the loader, the spec dataclasses",
        "and the commands themselves (simulator/cli/reference.py); a test keeps this file up to date. The JSON",
        "Schema of a scenario file ships as `simulator/scenario.schema.json` (`mfusim schema` prints it;",
        "point an editor's TOML schema setting at it to complete keys). Units: SI inside the simulator,",
        "human units in files as each key's name says (`_ms`, `_us`, `_GBps` = GB/s decimal bytes,",
        "`_Gbps` = Gb/s decimal bits, `_gib` = GiB binary). Unknown keys are errors naming the file",
        "and the key, with the closest allowed key.",
        "",
        "`run`, `compare`, `whatif` and `sweep` change any key from the command line, checked like",
        "the file: `--set section.key=VALUE` (a TOML literal, or a bare word as a string) gives a",
        "value; `--unset section.key` removes the key, or a whole table (`--unset run`), so its",
        "default applies as if the file never set it (`--unset parallel.dp`: dp derived from the",
        "GPUs again). Both repeat; unsets apply first, so `--unset run --set run.tokens=1e12` plans",
        "a run with every other `[run]` key at its default. An unknown key, a required key (no",
        "default: `cluster.num_gpus`) and a key both set and unset are refused, naming the flag. In",
        'Python, `mfusim.load_scenario(..., overrides={"parallel.dp": None})` unsets the same way.',
        "",
        "## Contents",
        "",
        "- [Scenario file](#scenario-file)",
        "- [Topology file](#topology-file)",
        "- [Names](#names)",
        "- [`--json` output of each command](#--json-output-of-each-command)",
        "- [CSV files](#csv-files)",
        "- [Command-line flags](#command-line-flags)",
        "",
        "## Scenario file",
        "",
        "A TOML file (`mfusim run FILE.toml`). `since` is the mfusim version that first read the key.",
        "",
    ]
    scenario_rows = key_rows("scenario")
    table_meaning = {r.key: r.meaning for r in scenario_rows if r.kind == "table"}
    for section, rows in _sections(scenario_rows).items():
        if not rows:
            continue
        lines += [f"### `[{section}]`" if section else "### Top level", ""]
        meaning = table_meaning.get(section, "")
        if meaning:
            lines += [meaning[0].upper() + meaning[1:] + ".", ""]
        if section == "sweep":
            lines += [
                "Any key of `[parallel]`, and `cluster.num_gpus`, given a list of values; the sweep",
                "is their product, filtered to valid configurations. Without a `[sweep]` table,",
                "`mfusim sweep` sweeps a default grid and says so.",
                "",
            ]
            names = [r.key.removeprefix(section + ".") for r in rows]
            lines += ["Keys: " + ", ".join(f"`{n}`" for n in names) + ".", ""]
            continue
        lines += _key_table(rows, f"{section}." if section else "")
        lines.append("")
    lines += [
        "## Topology file",
        "",
        "A TOML file under `topologies/` (or any path given as `cluster.topology`). A scenario's",
        "`[cluster.intra_node]` / `[cluster.inter_node]` tables override the same keys.",
        "",
    ]
    for section, rows in _sections(key_rows("topology")).items():
        if not rows:
            continue
        lines += [f"### `[{section}]`" if section else "### Top level", ""]
        lines += _key_table(rows, f"{section}." if section else "")
        lines.append("")
    lines += _names_section(ALIASES)
    lines += [
        "## `--json` output of each command",
        "",
        "Every `--json` prints one strict JSON object (no NaN or Infinity) on stdout; a type",
        "`X or null` is a field that is null in the case its meaning states. Paths are",
        "dotted; `[]` is each element of an array; `<category>` stands for each breakdown category",
        "(" + ", ".join(CATEGORIES) + "; host_bound: the GPU waits for the CPU to issue",
        "kernels, simulator/hostbound.py), `<preset>` / `<gpu>` for each catalog name, `<name>` for",
        "each key of a map.",
        "",
    ]
    fields_by_command = json_fields_by_command if json_fields_by_command is not None else all_json_fields()
    for command, paths in fields_by_command.items():
        example = " ".join(JSON_EXAMPLES[command]).replace("{scenarios}/", "").replace("{tmp}/", "")
        lines += [f"### `mfusim {command}`", "", f"Example: `mfusim {example}`", ""]
        lines += ["| field | type | meaning |", "|---|---|---|"]
        for path, type_name in paths.items():
            cell = json_type_cell(command, path, type_name)
            lines.append(f"| `{path}` | {cell} | {_cell(json_meaning(command, path))} |")
        lines.append("")
    lines += ["## CSV files", ""]
    for name, columns in csv_columns().items():
        lines += [f"### {CSV_FILES[name]}", "", "| column | meaning |", "|---|---|"]
        for column in columns:
            lines.append(f"| `{column}` | {_cell(column_meaning(column))} |")
        lines.append("")
    lines += flags_section()
    return "\n".join(lines).rstrip() + "\n"


def command_parsers() -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's one-line help and parser by its command line (`kernel gemm`), as
    `mfusim --help` builds them."""
    from .parser import build_parser

    out: dict[str, tuple[str, argparse.ArgumentParser]] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, child in action.choices.items():
                    command = f"{prefix} {name}".strip()
                    if not any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                        out[command] = (helps.get(name, ""), child)
                    walk(child, command)

    walk(build_parser(), "")
    return out


def _flag_default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.required:
        return "required"
    if action.default in (None, [], argparse.SUPPRESS):
        return "—"
    return f"`{action.default}`"


def flags_section() -> list[str]:
    """Every command's arguments and flags, from the parser itself (what `--help` prints)."""
    lines = [
        "## Command-line flags",
        "",
        "Every command's arguments and flags as `mfusim COMMAND --help` prints them (generated from",
        "the argument parser). `—` = no default (not used unless given).",
        "",
    ]
    for command, (summary, parser) in command_parsers().items():
        lines += [f"### `mfusim {command}`", ""]
        if summary:
            lines += [summary[0].upper() + summary[1:] + ".", ""]
        lines += ["| argument | value | default | meaning |", "|---|---|---|---|"]
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
            if action.nargs == 0:
                value = ""
            elif action.choices is not None:
                value = " | ".join(f"`{c}`" for c in action.choices)
            else:
                metavar = action.metavar or action.dest.upper()
                value = " ".join(metavar) if isinstance(metavar, tuple) else str(metavar)
            if action.option_strings and action.nargs in ("+", "*"):
                value += " ..."
            elif not action.option_strings and action.nargs == "?":
                name += " (optional)"
            elif not action.option_strings and action.nargs == "+":
                name += " ..."
            default = "—" if not action.option_strings else _flag_default(action)
            if isinstance(action, argparse._AppendAction):
                default, value = "—", value + " (repeatable)"
            lines.append(f"| {name} | {_cell(value)} | {default} | {_cell(action.help or '')} |")
        lines.append("")
    return lines


def _names_section(aliases: Mapping[str, str]) -> list[str]:
    from ..loading import load_gpu_catalog, load_model_presets
    from ..resources import scenario_names, topology_names

    lines = [
        "## Names",
        "",
        "Names of presets, GPUs, topologies, schedules, dtypes and recompute modes are matched in",
        "any case and with `-`, `_` or spaces written either way (`llama-3-8b` = `llama3-8b`,",
        "`1F1B` = `1f1b`); a misspelled name is answered with the closest one (simulator/names.py).",
        "",
        f"- Model presets: {', '.join(f'`{n}`' for n in load_model_presets())}",
        f"- GPUs: {', '.join(f'`{n}`' for n in load_gpu_catalog())}",
        f"- Topologies: {', '.join(f'`{n}`' for n in topology_names())}",
        f"- Shipped scenarios (usable by name): {', '.join(f'`{n}`' for n in scenario_names())}",
        "",
        "Aliases:",
        "",
        "| alias | means |",
        "|---|---|",
    ]
    lines += [f"| `{a}` | `{b}` |" for a, b in sorted(aliases.items(), key=lambda kv: (kv[1], kv[0]))]
    lines.append("")
    return lines


# ----------------------------------------------------------------------------- files
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent


def schema_path() -> Path:
    from ..resources import scenario_schema_file

    return scenario_schema_file()


def reference_path() -> Path:
    """docs/reference.md: the checkout's, or the copy installed in the wheel (simulator/docs)."""
    installed = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
    return installed if installed.is_file() else repo_root() / "docs" / "reference.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.cli.reference", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--write", action="store_true", help="rewrite docs/reference.md and the schema")
    args = parser.parse_args(argv)
    text = reference_markdown()
    if args.write:
        (repo_root() / "docs" / "reference.md").write_text(text, encoding="utf-8")
        schema_path().write_text(schema_text(), encoding="utf-8")
        print(f"wrote {repo_root() / 'docs' / 'reference.md'} and {schema_path()}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
