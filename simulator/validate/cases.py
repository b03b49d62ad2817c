"""A published row -> a Case (scenario + comparison convention + assumptions) or Unusable."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .architectures import FAMILY_VOCAB, GATED_FAMILIES, MOE_MARKERS, known_architecture, preset_for
from .cells import parse_dtype, parse_recompute, parse_zero
from .columns import (
    ARCH_COLUMNS,
    MEASURED_COLUMNS,
    METRIC_HFU,
    METRIC_ITERATION_TIME,
    METRIC_MFU,
    METRIC_TFLOPS,
    METRIC_TOKENS,
    TARGET_DTYPES,
    TARGET_GPU_PREFIXES,
)
from .gpus import GPUMapping, gpu_mapping
from .recipes import (
    bf16_moments_for,
    fp8_param_gather_for,
    fp8_recipe_for,
    pipeline_layout_for,
    recipe_for,
    recorded_not_simulated,
    scenario_kernels,
    unexpressible_for,
)
from .runs import PublishedRun, _is_number
from .sources import STACK_RULE_KEYS, SourceRules, source_rules
from .supplement import supplemented


# ----------------------------------------------------------------------------- row -> case
@dataclass(frozen=True, slots=True)
class Case:
    """A usable row: the scenario to simulate and how to compare it with the measurement."""

    run_id: str
    source: str
    source_key: str
    gpu: str
    scenario: Mapping[str, Any]  # shaped like a scenario TOML (SPEC §1)
    metric: str
    measured: float
    flop_convention: str
    dtype: str
    is_moe: bool
    assumptions: tuple[str, ...]
    # the launch recipe applied (validate/recipes.py): everything it sets, as one line ("" = none),
    # and the [parallel] table as published before it (what data-spread groups compare)
    recipe_settings: str = ""
    published_parallel: Mapping[str, Any] | None = None

    @property
    def is_target(self) -> bool:
        """A100/H100, dense, BF16/FP16: the set the accuracy target is stated on."""
        return (
            any(prefix in self.gpu.upper() for prefix in TARGET_GPU_PREFIXES)
            and self.dtype in TARGET_DTYPES
            and not self.is_moe
        )


@dataclass(frozen=True, slots=True)
class Unusable:
    """A row that cannot be simulated, and why (never dropped silently)."""

    run_id: str
    source: str
    source_key: str
    gpu: str
    reason: str


@dataclass(frozen=True, slots=True)
class RowResult:
    """A simulated Case: the prediction next to its measurement (validate.results sums them up)."""

    case: Case
    predicted: float
    step_time_s: float
    mfu: float
    memory_fits: bool | None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.case.measured) / self.case.measured


def _arch_int(run: PublishedRun, column: str) -> int | None | str:
    """An architecture cell: an int, None when empty, or the raw text when annotated."""
    text = run.get(column)
    if not text:
        return None
    if _is_number(text) and float(text) == int(float(text)) and float(text) > 0:
        return int(float(text))
    return text


def _model_table(run: PublishedRun, rules: SourceRules, notes: list[str]) -> dict[str, Any] | str:
    """The [model] table of the scenario, or the reason the row has no usable architecture."""
    name = run.get("model_name") or run.run_id
    lname = name.lower()
    ep = run.int_cell("ep") or 1
    arch = {c: _arch_int(run, c) for c in ARCH_COLUMNS}
    annotated = {c: v for c, v in arch.items() if isinstance(v, str)}
    moe = (
        ep > 1
        or any(m in lname for m in MOE_MARKERS)
        or any("expert" in v.lower() for v in annotated.values())
    )
    if moe:
        known = known_architecture(name)
        if known is not None:
            arch_table, citation = known
            notes.append(f"model: {citation} (the CSV has no expert columns)")
            if not rules.mtp and arch_table.get("preset") == "deepseek-v3" and "mtp_layers" not in arch_table:
                arch_table["mtp_layers"] = 0
                notes.append(f"model: no MTP module ({rules.key} does not build it)")
            if "tokendrop" in lname:
                # Megatron-Bridge apply_moe_token_drop (moe_token_drop.py:18-55@684a68616):
                # capacity factor 1.0, moe_pad_expert_input_to_capacity = True -- every expert of
                # every rank is padded to ceil(T·top_k/E) token rows, so every EP rank's load is
                # the same (no sampling spread: routing_skew.py)
                arch_table["moe"] = {**arch_table.get("moe", {}), "load_imbalance": 1.0}
                notes.append(
                    "moe: published as token-dropping (capacity factor 1.0, padded to capacity); "
                    "simulated with every token reaching top_k experts, load_imbalance = 1 "
                    "(every expert padded to the same capacity)"
                )
            elif rules.moe_routing:
                arch_table["moe"] = {**arch_table.get("moe", {}), "routing": rules.moe_routing}
                notes.append(f"moe: routing = {rules.moe_routing} ({rules.key} benchmarks' gate)")
            else:
                notes.append(
                    "moe: routing = balanced (the page force-balances tokens among experts: random "
                    "router logits, the busiest EP rank's sampling spread)"
                )
            seq = run.int_cell("seq_len")
            return {"name": name, **arch_table, **({"seq_len": seq} if seq else {})}
        return (
            "mixture-of-experts model: the CSV has no expert columns (num_experts, top_k, expert ffn), "
            "the notes point to an external config we do not carry (or to MLA / hybrid Mamba layers "
            "the simulator does not model); not simulated"
            + (
                f" (annotated cells: {', '.join(f'{k}={v!r}' for k, v in annotated.items())})"
                if annotated
                else ""
            )
        )
    if annotated:
        return "non-numeric architecture cell(s): " + ", ".join(f"{k}={v!r}" for k, v in annotated.items())
    table: dict[str, Any] = {"name": name}
    preset = preset_for(name)
    if preset is not None:
        table["preset"] = preset
    for column in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        value = arch[column]
        if isinstance(value, int):
            table[column] = value
    seq_len = run.int_cell("seq_len")
    if seq_len:
        table["seq_len"] = seq_len
    elif preset is not None:
        notes.append("seq_len: not given -> the preset's")
    if preset is None:
        missing = [c for c in ("layers", "hidden", "heads") if c not in table]
        if missing:
            return f"architecture not given ({', '.join(missing)} empty) and no model preset matches {name!r}"
        if "vocab" not in table:
            for family, vocab, why in FAMILY_VOCAB:
                if family in lname:
                    table["vocab"] = vocab
                    notes.append(f"vocab: {why}")
                    break
            else:
                return f"vocabulary not given and no model preset matches {name!r}"
        # Family conventions (the CSV has no column for them).
        if rules.key == "mpt" or lname.startswith("mpt"):
            table["tied_embeddings"] = True  # and MPT_BENCHMARK_MODEL below
        elif any(f in lname for f in GATED_FAMILIES):
            table["gated_mlp"] = True
        elif "nemotron" in lname:
            # Nemotron-4 (NeMo NemotronConfig): activation squared-relu, not gated
            table["activation"] = "squared_relu"
        elif lname.startswith("gpt"):
            table["tied_embeddings"] = True  # Megatron GPT shares embedding and output weights
            table["position_embeddings"] = True  # learned absolute positions
    else:
        notes.append(f"model: preset {preset!r} for the fields the row leaves empty")
    if lname.startswith("gpt") and rules.key in GPT_STACK_MODEL:
        settings, why = GPT_STACK_MODEL[rules.key]
        table.update(settings)
        notes.append(f"model: {why}")
    if rules.key == "mpt":
        # the benchmark runs' MPTConfig, not the released checkpoints' (the mpt-7b preset has ALiBi
        # and no biases): llm-foundry configuration_mpt.py@b2a43a147 defaults, the pretrain yamls
        # setting only attn_impl -- learned_pos_emb True (alibi False; the README's NumParams grows
        # by (seq_len - 2048)·d_model) and no_bias False (biases on every nn.Linear: 7b's NumParams
        # 6,658,859,008 at 2k counts them); tied embeddings
        table.update(MPT_BENCHMARK_MODEL)
        notes.append("model: learned positions, linear biases, no dropout (llm-foundry MPTConfig defaults)")
    if rules.key == "narayanan21":
        # Megatron-LM 2021's GPT: biases on every linear layer (mpu/layers.py ColumnParallelLinear /
        # RowParallelLinear bias=True@de7dc40f88; validate_sources.toml narayanan21 bias_grad)
        table["linear_bias"] = True
        notes.append("model: linear biases (Megatron-LM 2021 GPT: every linear layer has one)")
    if rules.key == "megatron-bridge" and preset is not None and preset.startswith("llama"):
        # Megatron-Bridge builds its Llama models from the HF config (recipes/llama/llama3.py
        # AutoBridge.from_hf_pretrained): attention_dropout 0.0 from config.json and
        # models/llama/llama_bridge.py provider_bridge sets hidden_dropout = 0.0 -- no dropout
        # masks are stored (Megatron-LM's default 0.1 does not apply)
        table["dropout"] = 0.0
        notes.append("dropout: 0 (Megatron-Bridge Llama provider: hidden and attention dropout 0.0)")
    return table


# The GPT models of the Megatron-Core stacks, as their configurations build them (the CSV has no
# column for these). Megatron-Core's TransformerConfig defaults add_bias_linear = True and
# hidden_dropout = attention_dropout = 0.1 (megatron/core/transformer/transformer_config.py:43-63
# @f2e5db40); GPTModel ties the output layer to the embedding and uses learned absolute positions
# unless told otherwise. Per source:
# - "megatron-lm" (README 'Weak Scaling Results', f2e5db40 = core_r0.8.0): the README names only
#   the overlap flags, so pretrain_gpt.py's defaults hold -- megatron/training/arguments.py@f2e5db40
#   --disable-bias-linear (store_false, dest add_bias_linear: biases on), --position-embedding-type
#   'learned_absolute', --untie-embeddings-and-output-weights (off: tied), --normalization
#   'LayerNorm', --hidden-dropout / --attention-dropout 0.1, --no-bias-gelu-fusion (off: fc1's bias
#   fused into bias_gelu) and --no-bias-dropout-fusion (off: fused bias-dropout-add).
# - "nemo" (the 24.07 pre-training table, NeMo 1 + Megatron-Core): NeMo-Framework-Launcher
#   launcher_scripts/conf/training/gpt3/{5b,20b,175b}.yaml@8325688d (tag 24.07; the table's mbs, tp
#   and pp are these files', its batch and vp overrides) set hidden_dropout 0.1, attention_dropout 0.1, bias_activation_fusion and
#   bias_dropout_add_fusion True and no `bias`, `normalization`, `position_embedding_type` or
#   `share_embeddings_and_output_weights` keys, whose defaults are add_bias_linear = cfg.get('bias',
#   True), LayerNorm (megatron_base_model.py:486-551), learned_absolute and tied (megatron_gpt_model.py
#   :458-459) in NVIDIA/NeMo@9c5c5e97 (the commit the row cites). NeMo 2's GPTConfig5B/20B
#   (nemo/collections/llm/gpt/model/base.py:284-515@8cfedd72) agree: no add_bias_linear override,
#   share_embeddings_and_output_weights True, learned_absolute (only GPTConfig175B sets dropout 0.0;
#   the 175B rows are NeMo 1's, dropout 0.1).
# The simulator's LayerNorm and RMSNorm cost the same (one fused norm kernel), so normalization has
# no key here. Megatron-LM 2021 ("narayanan21") biases are set below with its own rule.
GPT_STACK_MODEL: dict[str, tuple[dict[str, Any], str]] = {
    "megatron-lm": (
        {"linear_bias": True, "tied_embeddings": True, "position_embeddings": True, "dropout": 0.1},
        "linear biases, tied embeddings, learned positions, dropout 0.1 (Megatron-LM core_r0.8.0 "
        "pretrain_gpt.py defaults: the README sets no --disable-bias-linear)",
    ),
    "nemo": (
        {"linear_bias": True, "tied_embeddings": True, "position_embeddings": True, "dropout": 0.1},
        "linear biases, tied embeddings, learned positions, dropout 0.1 (NeMo 24.07 GPT3 launcher "
        "configs: no `bias` key -> NeMo's default True)",
    ),
}


# dropout 0: MPTConfig's resid_pdrop and emb_pdrop and attn_config's attn_pdrop default to 0.0
# (llmfoundry/models/mpt/configuration_mpt.py, layers/blocks.py MPTBlock resid_pdrop = 0.0), which
# the benchmark yamls do not set: no dropout kernels or masks (mfusim's default is Megatron's 0.1)
MPT_BENCHMARK_MODEL = {
    "tied_embeddings": True,
    "position_embeddings": True,
    "linear_bias": True,
    "dropout": 0.0,
}


def _smallest_vp(layers: int, pp: int, num_microbatches: int) -> int:
    """Chunks per rank when a source used the interleaved schedule without saying how many."""
    if pp <= 1 or layers % pp or num_microbatches % pp:
        return 1
    per_stage = layers // pp
    for vp in range(2, 9):
        if per_stage % vp == 0:
            return vp
    return 1


class _Refused(Exception):
    """A row that cannot be simulated: the reason, raised from the step that finds it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def build_case(run: PublishedRun) -> Case | Unusable:
    """Turn one published row into a scenario dict + comparison, or say why it cannot be.

    The steps run in a fixed order (their assumptions are listed in that order): what was
    measured, the hardware, the precision, the model, the parallel split, the cluster.
    """
    rules = source_rules(run.source, run.run_id)
    notes: list[str] = []
    run, settings = supplemented(run, notes)
    if settings:
        rules = replace(rules, **settings)
    try:
        metric, measured = _measurement(run)
        mapping = _hardware(run)
        dtype = _dtype(run, rules, notes)
        model = _model(run, rules, notes)
        parallel, num_gpus = _parallel(run, rules, model, notes)
    except _Refused as refused:
        return Unusable(run.run_id, run.source, rules.key, run.gpu, refused.reason)
    is_moe = (
        parallel["ep"] > 1 or "moe" in model or known_architecture(run.get("model_name") or "") is not None
    )
    recipe_kernels: dict[str, Any] = {}
    recipe_memory: dict[str, Any] = {}
    published_parallel = dict(parallel)
    recipe_settings = ""
    precision: dict[str, Any] = {"dtype": dtype}
    if rules.key == "megatron-bridge":
        refused_by = unexpressible_for(
            run.run_id, run.get("model_name") or "", run.gpu, _recipe_layout(run, parallel)
        )
        if refused_by:
            return Unusable(run.run_id, run.source, rules.key, run.gpu, refused_by)
        recipe_settings, recipe_kernels, recipe_memory = _apply_recipe(run, dtype, model, parallel, notes)
        layout, layout_note = pipeline_layout_for(
            run.run_id,
            run.get("model_name") or "",
            run.gpu,
            parallel["pp"],
            parallel["vp"],
            int(model.get("layers") or 0) or _preset_layers(model),
        )
        if layout:
            parallel["pipeline_layout"] = list(layout)
            parallel.pop("account_for_embedding_in_pipeline_split", None)
            parallel.pop("account_for_loss_in_pipeline_split", None)
            notes.append(layout_note)
        fp8_params_note = fp8_param_gather_for(run.run_id, run.get("model_name") or "", dtype)
        if fp8_params_note:
            notes.append(fp8_params_note)
            precision["fp8_param_gather"] = True
        moments_note = bf16_moments_for(
            run.run_id, run.get("model_name") or "", _recipe_layout(run, parallel)["fsdp"] == 1
        )
        if moments_note:
            notes.append(moments_note)
            recipe_memory = {**recipe_memory, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
        fp8_recipe_note = fp8_recipe_for(run.run_id, dtype)
        if fp8_recipe_note:
            notes.append(fp8_recipe_note)
            precision["fp8_recipe"] = "current"
    if rules.fp8_recipe and dtype == "fp8" and "fp8_recipe" not in precision:
        precision["fp8_recipe"] = rules.fp8_recipe
        notes.append(f"precision: fp8_recipe = {rules.fp8_recipe} ({rules.key} stack)")
    cluster = _cluster(run, mapping, num_gpus, notes)
    if is_moe and mapping.topology == "gb200-nvl72" and num_gpus >= 128 and num_gpus % 64 == 0:
        cluster["gpus_used_per_node"] = 64
        notes.append(
            "cluster: 64 GPUs per NVL72 rack (jobs scheduled in 16-tray segments so that power-of-two "
            "EP/PP groups stay in one NVLink domain)"
        )
    scenario: dict[str, Any] = {
        "name": run.run_id,
        "model": model,
        "cluster": cluster,
        "parallel": parallel,
        "precision": precision,
    }
    kernels = {**_kernels(rules, parallel, notes, run), **recipe_kernels}
    if kernels:
        scenario["kernels"] = kernels
    if rules.sharded_grad_dtype and parallel["zero"] >= 2:
        recipe_memory = {**recipe_memory, "sharded_grad_dtype": rules.sharded_grad_dtype}
        notes.append(
            f"memory: sharded_grad_dtype = {rules.sharded_grad_dtype} ({rules.key} stack: PyTorch FSDP keeps "
            "only the fp32 gradient shard)"
        )
    if rules.sharded_param_dtype and parallel["zero"] >= 3:
        recipe_memory = {**recipe_memory, "sharded_param_dtype": rules.sharded_param_dtype}
        notes.append(
            f"memory: sharded_param_dtype = {rules.sharded_param_dtype} ({rules.key} stack: PyTorch FSDP keeps "
            "only the fp32 parameter shard)"
        )
    if recipe_memory:
        scenario["memory"] = recipe_memory
    return Case(
        run_id=run.run_id,
        source=run.source,
        source_key=rules.key,
        gpu=run.gpu,
        scenario=scenario,
        metric=metric,
        measured=measured,
        flop_convention=rules.flop_convention,
        dtype=dtype,
        is_moe=is_moe,
        assumptions=tuple(notes),
        recipe_settings=recipe_settings,
        published_parallel=published_parallel if recipe_settings else None,
    )


def _recipe_layout(run: PublishedRun, parallel: Mapping[str, Any]) -> dict[str, int]:
    """The row's launch layout as a recipe matches it: the simulated split, vp as published."""
    layout = {k: parallel[k] for k in ("tp", "pp", "ep", "micro_batch", "global_batch")}
    layout["cp"] = parallel.get("cp", 1)
    layout["vp"] = run.int_cell("vp") or 1  # as published (the simulated vp may be derived)
    layout["fsdp"] = int((run.get("zero_or_dist_opt") or "").strip().lower() == "fsdp")  # as published
    return layout


def _apply_recipe(
    run: PublishedRun, dtype: str, model: Mapping[str, Any], parallel: dict[str, Any], notes: list[str]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The Megatron-Bridge launch recipe of this row's container and exact layout
    (validate/recipes.py), which the published table omits: an MoE recipe's EP all-to-all overlap
    and selective recompute modules into `parallel`; a dense recipe's activation CPU offloading as
    [memory] offload_activations. Returns all its settings (one line), its [kernels] keys (fused
    grouped MLP, token dispatcher, CUDA graphs) and its [memory] keys. What the recipe sets that
    mfusim does not simulate yet is listed in the assumptions."""
    recipe = recipe_for(
        run.run_id, run.get("model_name") or "", run.gpu, dtype, _recipe_layout(run, parallel)
    )
    if isinstance(recipe, str):
        notes.append(recipe)
        return "", {}, {}
    memory: dict[str, Any] = {}
    if not recipe.dense:
        parallel["ep_comm_overlap"] = recipe.ep_comm_overlap
        if recipe.ep_comm_overlap:  # Megatron-Core allows it only with the overlap
            parallel["delay_wgrad_compute"] = recipe.delay_wgrad_compute
        if recipe.moe_shared_expert_overlap:  # [parallel] shared_expert_overlap (off by default)
            parallel["shared_expert_overlap"] = True
    if recipe.recompute_modules:
        parallel["recompute"] = "selective"
        parallel["recompute_modules"] = list(recipe.recompute_modules)
    kernels = scenario_kernels(recipe)
    settings = [] if recipe.dense else [f"ep_comm_overlap = {str(recipe.ep_comm_overlap).lower()}"]
    if "delay_wgrad_compute" in parallel:
        settings.append(f"delay_wgrad_compute = {str(parallel['delay_wgrad_compute']).lower()}")
    if not recipe.dense:
        settings.append(f"shared_expert_overlap = {str(recipe.moe_shared_expert_overlap).lower()}")
    settings.append(f"recompute_modules = {list(recipe.recompute_modules)}")
    if recipe.dense:
        settings.append(f"megatron_fsdp = {str(recipe.megatron_fsdp).lower()}")
    if recipe.cpu_offloading_num_layers:
        # Megatron-Core (transformer_block.py get_cpu_offload_context, TE cpu_offload.py) moves the
        # saved activations of the first cpu_offloading_num_layers layers of the rank to host
        # memory; pp = 1 (transformer_config.py), so the rank holds every layer. mfusim's
        # offload_activations is the same share of the stored activations (memory.py,
        # program.py _offload_activations)
        layers = int(model.get("layers") or run.int_cell("layers") or 0) // int(parallel["pp"])
        memory["offload_activations"] = recipe.cpu_offloading_num_layers / layers
        settings.append(
            f"cpu_offloading_num_layers = {recipe.cpu_offloading_num_layers} -> offload_activations = "
            f"{recipe.cpu_offloading_num_layers}/{layers}"
        )
    settings += [f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in kernels.items()]
    simulated = ", ".join(settings)
    notes.append(
        f"recipe: Megatron-Bridge {recipe.name} ({recipe.release} {recipe.commit[:9]}, container "
        f"{recipe.container}, same layout): {simulated} (simulator/catalog/mbridge_recipes.toml)"
    )
    recorded = ", ".join(recorded_not_simulated(recipe))
    if recorded:
        notes.append(f"recipe: recorded, not simulated: {recorded}")
        return f"{simulated}; {recorded}", kernels, memory
    return simulated, kernels, memory


def _kernels(
    rules: SourceRules, parallel: Mapping[str, Any], notes: list[str], run: PublishedRun
) -> dict[str, Any]:
    """The source's software stack (docs/validate-assumptions.md): attention kernel, the dtype of
    the data-parallel gradient reduction, and whether TP communication overlaps the GEMMs."""
    kernels: dict[str, Any] = {}
    where = (run.source, run.get("notes") or "", run.get("model_name") or "")
    for key in STACK_RULE_KEYS:
        if key == "zero3_backward_prefetch":
            continue  # ZeRO-3 rows only, below
        value, why = rules.stack_for(key, *where)
        if value:
            kernels[key] = value
            notes.append(f"kernels: {key} = {value} ({why or rules.key + ' stack'})")
    if rules.moe_dispatcher and parallel.get("ep", 1) > 1:
        kernels["moe_dispatcher"] = rules.moe_dispatcher
        notes.append(f"kernels: moe_dispatcher = {rules.moe_dispatcher} ({rules.key} stack)")
    if not rules.tp_comm_async and parallel["tp"] > 1:
        kernels["tp_comm_async"] = False
        notes.append(f"kernels: tp_comm_async = false ({rules.key} stack: TP collectives not overlapped)")
    for key in ("bias_grad", "norm", "qkv_grad"):  # the source's op-table keys, every row
        value = getattr(rules, key)
        if value:
            kernels[key] = value
            notes.append(f"kernels: {key} = {value} ({rules.key} stack)")
    prefetch, why = rules.stack_for("zero3_backward_prefetch", *where)
    if prefetch and parallel["zero"] == 3:
        kernels["zero3_backward_prefetch"] = prefetch
        notes.append(f"kernels: zero3_backward_prefetch = {prefetch} ({why or rules.key + ' stack'})")
    if rules.fsdp_flat_grad and parallel["zero"] >= 2:
        kernels["fsdp_flat_grad"] = rules.fsdp_flat_grad
        notes.append(f"kernels: fsdp_flat_grad = {rules.fsdp_flat_grad} ({rules.key} stack)")
    if rules.zero3_collectives and parallel["zero"] == 3:
        kernels["zero3_collectives"] = rules.zero3_collectives
        notes.append(
            f"kernels: zero3_collectives = {rules.zero3_collectives} ({rules.key}: DeepSpeed 2021 ZeRO-3, "
            "each GPU's parameter traffic on its own NIC share)"
        )
    return kernels


def _measurement(run: PublishedRun) -> tuple[str, float]:
    """What was measured, in the source's convention; fine-tuning runs are refused."""
    problem = measurement_problem(run)
    if problem is not None:
        raise _Refused(f"impossible measurement: {problem}")
    metric_value = _measured(run)
    if metric_value is None:
        raise _Refused("no measurement (iteration_time_s, tokens_per_s, measured_tflops_per_gpu, MFU or HFU)")
    metric, measured = metric_value
    if measured <= 0:
        raise _Refused(f"measured {metric} is {measured:g}, not positive")
    lname = (run.get("model_name") + " " + run.run_id).lower()
    if "lora" in lname or "_sft_" in lname or "fine-tun" in run.get("notes").lower()[:80]:
        raise _Refused("fine-tuning run (SFT on packed sequences / LoRA): not pre-training, not modeled")
    return metric, measured


def _hardware(run: PublishedRun) -> GPUMapping:
    mapping = gpu_mapping(run.gpu)
    if isinstance(mapping, str):
        raise _Refused(mapping)
    return mapping


def _dtype(run: PublishedRun, rules: SourceRules, notes: list[str]) -> str:
    precision = run.get("precision").lower()
    parsed_dtype = parse_dtype(precision)
    if parsed_dtype is None:
        raise _Refused(f"precision {precision!r} is not modeled (dtypes: bf16, fp16, fp8, mxfp8, nvfp4)")
    if not parsed_dtype:
        notes.append(f"precision: not stated -> {rules.dtype} ({rules.key} default)")
        return rules.dtype
    if parsed_dtype == "fp8" and precision != "fp8":
        notes.append(f"precision: {precision} simulated as fp8 (per-tensor scaling recipe)")
    return parsed_dtype


def _model(run: PublishedRun, rules: SourceRules, notes: list[str]) -> dict[str, Any]:
    model = _model_table(run, rules, notes)
    if isinstance(model, str):
        raise _Refused(model)
    if not model.get("seq_len") and "preset" not in model:
        raise _Refused("seq_len not given")
    return model


def _parallel(
    run: PublishedRun, rules: SourceRules, model: Mapping[str, Any], notes: list[str]
) -> tuple[dict[str, Any], int]:
    """The [parallel] table and the number of GPUs simulated."""
    num_gpus, tp, pp, cp, dp = _split(run, rules, notes)
    micro_batch, global_batch, num_microbatches = _batch(run, dp, notes)
    vp, slots = _vp(run, model, pp, num_microbatches, notes)
    recompute = _recompute(run, rules, notes)
    sequence_parallel = _sequence_parallel(run, rules, tp, notes)
    zero = _zero(run, rules, notes)
    tp_comm_overlap = rules.tp_comm_overlap_if_tp and tp > 1
    if tp_comm_overlap and not sequence_parallel:
        tp_comm_overlap = False
    if tp > 1:
        notes.append(f"tp_comm_overlap: -> {str(tp_comm_overlap).lower()} ({rules.key} default)")
    if not rules.overlap_grad_reduce:
        notes.append(
            "overlap_grad_reduce: false (Megatron-LM 2021 reduced gradients after the backward pass)"
        )
    ep = run.int_cell("ep") or 1
    if ep == 1 and rules.moe_dispatcher and "moe" in model and dp > 1 and not run.get("ep"):
        # a flex dispatcher (DeepEP) runs expert parallelism: the benchmark recipes spread the
        # experts over every data-parallel rank (NeMo AutoModel's GPT-OSS recipes: ep_size = dp)
        ep = dp
        notes.append(f"ep: not stated with {rules.moe_dispatcher} -> {ep} (every data-parallel rank)")
    parallel: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "cp": cp,
        "ep": ep,
        "vp": vp,
        "micro_batch": micro_batch,
        "global_batch": global_batch,
        "schedule": "interleaved" if vp > 1 else "1f1b",
        "sequence_parallel": sequence_parallel,
        "recompute": recompute,
        "zero": zero,
        "overlap_grad_reduce": rules.overlap_grad_reduce,
        "overlap_param_gather": True,
        "tp_comm_overlap": tp_comm_overlap,
    }
    if zero == 3 and pp > 1 and not rules.reshard_after_forward_if_pp:
        parallel["reshard_after_forward"] = False
        notes.append(
            f"reshard_after_forward: false ({rules.key} stack: FSDP2 under pipeline parallelism keeps the "
            "stage's parameters gathered for the step and reduce-scatters its gradients once)"
        )
    if zero == 3 and pp > 1 and rules.pipeline_stage_if_pp:
        parallel["local_batch"] = global_batch // dp
        notes.append(
            f"local_batch: {global_batch // dp} ({rules.key} stack: one torch.distributed.pipelining schedule "
            "per step; its PipelineStage reduce-scatters a chunk's gradients after the chunk's last "
            "backward and waits)"
        )
    if slots:
        parallel["account_for_embedding_in_pipeline_split"] = True
        parallel["account_for_loss_in_pipeline_split"] = True
    return parallel, num_gpus


def _split(run: PublishedRun, rules: SourceRules, notes: list[str]) -> tuple[int, int, int, int, int]:
    """(num_gpus, tp, pp, cp, dp) as published, with what the row leaves out filled in."""
    num_gpus = run.int_cell("num_gpus")
    tp, pp = run.int_cell("tp"), run.int_cell("pp")
    if not num_gpus:
        parts = [run.int_cell(c) for c in ("tp", "pp", "dp")]
        if not all(parts):
            raise _Refused("num_gpus not given (nor tp, pp and dp to derive it)")
        num_gpus = math.prod(p or 1 for p in parts) * (run.int_cell("cp") or 1)
        notes.append(f"num_gpus: not given -> tp*pp*dp*cp = {num_gpus}")
    if tp is None or pp is None:
        if rules.key != "mpt":
            raise _Refused("parallel split (tp/pp) not published")
        tp, pp = tp or 1, pp or 1
    cp = run.int_cell("cp") or 1
    if not run.get("cp"):
        notes.append("cp: not stated -> 1")
    if tp < 1 or pp < 1:
        raise _Refused(f"tp = {tp}, pp = {pp}: must be >= 1")
    mp = tp * pp * cp
    published_dp = run.int_cell("dp")
    if published_dp and published_dp * mp != num_gpus:
        # NeMo's B200 long-sequence table: tp*pp*dp*cp = num_gpus/4 in every row. Keep the
        # published split (it fixes the per-GPU work) and simulate the GPUs it covers; the
        # compared quantities are per GPU.
        notes.append(
            f"num_gpus: published {num_gpus} but tp*pp*dp*cp = {published_dp * mp}; "
            f"simulated the published split on {published_dp * mp} GPUs (per-GPU metric)"
        )
        num_gpus = published_dp * mp
    if num_gpus % mp:
        raise _Refused(f"tp*pp*cp = {mp} does not divide num_gpus = {num_gpus}")
    return num_gpus, tp, pp, cp, num_gpus // mp


def _batch(run: PublishedRun, dp: int, notes: list[str]) -> tuple[int, int, int]:
    """(micro_batch, global_batch, micro-batches per step)."""
    micro_batch = run.int_cell("micro_batch")
    if not micro_batch:
        micro_batch = 1
        notes.append("micro_batch: not stated -> 1 (Megatron/NeMo default)")
    global_batch = run.int_cell("global_batch")
    if not global_batch:
        raise _Refused("global_batch not given")
    if global_batch % (micro_batch * dp):
        raise _Refused(
            f"global_batch {global_batch} is not a multiple of micro_batch*dp = {micro_batch}*{dp}"
        )
    return micro_batch, global_batch, global_batch // (micro_batch * dp)


def _vp(
    run: PublishedRun, model: Mapping[str, Any], pp: int, num_microbatches: int, notes: list[str]
) -> tuple[int, bool]:
    """Model chunks per stage: as published, else the smallest that splits the layers evenly;
    and whether the embedding and loss take a layer slot each (Megatron's account-for-embedding/
    loss split, when only layers + 2 divide into pp·vp)."""
    if pp == 1:
        return 1, False
    layers = int(model.get("layers") or 0) or _preset_layers(model)
    vp = run.int_cell("vp")
    if vp is None:
        vp = _smallest_vp(layers, pp, num_microbatches)
        notes.append(
            f"vp: not stated with pp = {pp} -> {vp} (smallest chunk count in 2..8 dividing the "
            f"{layers // pp if layers % pp == 0 else layers / pp:g} layers per stage; 1 = plain 1F1B)"
        )
    uneven = vp > 1 and layers % (pp * vp) and not num_microbatches % pp
    if uneven and not (layers + 2) % (pp * vp):
        notes.append(
            f"vp: {layers} layers + embedding + loss = {layers + 2} slots over pp*vp = {pp * vp} "
            "(Megatron --account-for-embedding/loss-in-pipeline-split)"
        )
        return vp, True
    if uneven and model.get("preset") and known_architecture(run.get("model_name") or "") is not None:
        notes.append(
            f"vp: {layers} layers over pp*vp = {pp * vp}: uneven split (the first virtual stages one "
            "layer more; the recipe's custom pipeline layout is not published)"
        )
        return vp, False
    if vp > 1 and (layers % (pp * vp) or num_microbatches % pp):
        notes.append(
            f"vp: published {vp}, but {layers} layers / {num_microbatches} micro-batches do not split "
            f"evenly over pp*vp = {pp * vp} (Megatron's uneven first/last stages are not modeled): "
            "simulated as plain 1F1B"
        )
        vp = 1
    return vp, False


def _recompute(run: PublishedRun, rules: SourceRules, notes: list[str]) -> str:
    parsed = parse_recompute(run.get("recompute"))
    if parsed is None:
        raise _Refused(f"recompute {run.get('recompute')!r} is not one of none, selective, full")
    default, why = rules.stack_for(
        "recompute", run.source, run.get("notes") or "", run.get("model_name") or ""
    )
    recompute = parsed or default
    if recompute in rules.recompute_not_modelled:
        stated = "" if parsed else " (not stated: the source's default)"
        raise _Refused(f"recompute {recompute!r}{stated}: {rules.recompute_not_modelled_why}")
    if not parsed:
        notes.append(f"recompute: not stated -> {default} ({why or rules.key + ' default'})")
    return recompute


def _sequence_parallel(run: PublishedRun, rules: SourceRules, tp: int, notes: list[str]) -> bool:
    cell = run.get("sequence_parallel").lower()
    if cell in ("yes", "true", "1", "on", "y"):
        return tp > 1
    if cell in ("no", "false", "0", "off", "n"):
        return False
    sequence_parallel = rules.sequence_parallel_if_tp and tp > 1
    if tp > 1:
        notes.append(
            f"sequence_parallel: not stated -> {str(sequence_parallel).lower()} ({rules.key} default)"
        )
    return sequence_parallel


def _zero(run: PublishedRun, rules: SourceRules, notes: list[str]) -> int:
    cell = run.get("zero_or_dist_opt").lower()
    zero = parse_zero(cell)
    if zero is None:
        raise _Refused(f"zero_or_dist_opt {cell!r} is not understood")
    notes_text = run.get("notes").lower()
    if zero == 3 and (
        "zero-2-like" in notes_text or "not reshard" in notes_text or "no reshard" in notes_text
    ):
        zero = 2
        notes.append("zero: FSDP that keeps parameters after forward (the notes say so) -> zero = 2")
    if zero < 0:
        zero = rules.zero
        notes.append(f"zero: distributed optimizer not stated -> zero = {zero} ({rules.key} default)")
    if rules.key == "mpt" and cell == "fsdp":
        notes.append("zero: FSDP FULL_SHARD -> zero = 3")
    return zero


def _cluster(run: PublishedRun, mapping: GPUMapping, num_gpus: int, notes: list[str]) -> dict[str, Any]:
    """The [cluster] table: the label's topology with its overrides, and what the notes add."""
    cluster: dict[str, Any] = {"topology": mapping.topology, "num_gpus": num_gpus}
    if mapping.gpu:
        cluster["gpu"] = mapping.gpu
    if mapping.inter_node:
        cluster["inter_node"] = dict(mapping.inter_node)
    if mapping.intra_node:
        cluster["intra_node"] = dict(mapping.intra_node)
    if mapping.note:
        notes.append(f"cluster: {mapping.note}")
    run_notes = run.get("notes").lower()
    if "roce" in run_notes and "1600" in run_notes and run.gpu.upper().startswith("A100"):
        # MosaicML's A100 tables: "1600 Gbps node-node interconnect (RoCE)": 8 x 200 Gb/s per node
        # on a plain (not rail-optimized) Ethernet fabric.
        cluster["inter_node"] = {
            **cluster.get("inter_node", {}),
            "fabric": "fat-tree",
            "nics_per_node": 8,
            "nic_Gbps": 200,
        }
        notes.append("cluster: 1600 Gbps RoCE per node (8 x 200 Gb/s, fat tree) as the notes say")
    return cluster


def _preset_layers(model: Mapping[str, Any]) -> int:
    from ..loading import load_model_presets

    preset = model.get("preset")
    if isinstance(preset, str):
        value = load_model_presets().get(preset, {}).get("layers", 0)
        return int(value) if isinstance(value, int) else 0
    return 0


PERCENT_COLUMNS = ("measured_mfu_pct", "measured_hfu_pct")


def measurement_problem(run: PublishedRun) -> str | None:
    """Why a row's measurements cannot be real (any of them, not only the one compared), or
    None: a non-finite, zero or negative value, or a utilization above 100% of peak."""
    for column in MEASURED_COLUMNS:
        value = run.float_cell(column)
        if value is None:
            continue
        if not math.isfinite(value):
            return f"{column} = {run.get(column)} is not a finite number"
        if value <= 0:
            return f"{column} = {value:g} is not positive"
        if column in PERCENT_COLUMNS and value > 100:
            return f"{column} = {value:g} is above 100% of peak"
    return None


# CSV column -> the metric it measures, most preferred first.
_MEASURED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("iteration_time_s", METRIC_ITERATION_TIME),
    ("tokens_per_s", METRIC_TOKENS),
    ("measured_tflops_per_gpu", METRIC_TFLOPS),
    ("measured_mfu_pct", METRIC_MFU),
    ("measured_hfu_pct", METRIC_HFU),
)


def _measured(run: PublishedRun) -> tuple[str, float] | None:
    """The quantity to compare, in order of preference (SOURCES.md: as published)."""
    for column, metric in _MEASURED_COLUMNS:
        value = run.float_cell(column)
        if value is not None:
            return metric, value
    return None
