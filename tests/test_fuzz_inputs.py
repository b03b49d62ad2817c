"""Property-based hostile inputs (issue 8): mutated scenario files and flags never crash the CLI.

Each example mutates a valid scenario (delete a key, change a value's type, set a number to
0/-1/nan/inf/1e30, inject unknown keys, truncate the file, flip bytes) and runs
`mfusim run FILE --json` in-process. The contract: exit status 0 (a valid scenario, JSON on
stdout) or 2 (one line on stderr), never a traceback. Any other exception escaping `main`
fails the test, and so does exit status 1 (`mfusim: internal error`: a bug).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_SCENARIO, dump_toml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import scenario_dicts
from test_moe_invariants import moe_scenarios

from simulator.cli import main

# A second base: preset model, interleaved pipeline, variability and dataloader on, inline
# topology overrides -- so the mutations reach those code paths too.
RICH_SCENARIO = """\
name = "rich"

[model]
preset = "gpt3-1.3b"
layers = 8
seq_len = 512

[cluster]
topology = "dgx-h100"
num_gpus = 16
gpu = "h100-sxm"

[cluster.inter_node]
nic_Gbps = 200
oversubscription = 2.0

[cluster.intra_node]
link_GBps_per_direction = 300

[parallel]
tp = 2
pp = 2
vp = 2
schedule = "interleaved"
micro_batch = 2
global_batch = 32
sequence_parallel = true
recompute = "selective"
zero = 1

[precision]
dtype = "fp8"

[dataloader]
microbatch_latency_ms = 1.0
workers = 2
prefetch = 1
jitter = 0.2
seed = 3

[variability]
compute_jitter = 0.05
straggler_probability = 0.01
straggler_slowdown = 1.5
network_jitter = 0.1
seed = 7
"""

# A third base with this round's keys (issues 12/13): attention sinks, biases with their
# gradients in a separate kernel, forced routing with an explicit load_imbalance, HybridEP, FP8
# current scaling, bert_padding unpad around attention, BACKWARD_POST, and an H800 swapped onto a
# DGX H100 network with a stated NVLink above its ports (a warned what-if) -- so the mutations
# (deleted keys drop the cap's what-if, retyped ones reach each new check) exercise them.
NEW_KEYS_SCENARIO = """\
name = "new keys"

[model]
preset = "gpt-oss-120b"
layers = 4
seq_len = 1024
attention_sinks = true
linear_bias = true

[model.moe]
routing = "balanced"
load_imbalance = 1.02

[cluster]
topology = "dgx-h100"
num_gpus = 16
gpu = "h800"

[cluster.intra_node]
link_GBps_per_direction = 300

[parallel]
tp = 2
ep = 4
global_batch = 16

[precision]
dtype = "fp8"
fp8_recipe = "current"

[kernels]
# "unpad" needs fa2/fa3, which have no attention sinks (test_refused_combinations.py)
attention_padding = "none"
bias_grad = "separate"
moe_dispatcher = "hybridep"
zero3_backward_prefetch = "post"
"""

# Two bases with round 2's keys (the first: torch.distributed.pipelining runs under HSDP with
# FSDP's fp32 shards, blockwise FP8, E5M6, low-precision moments, per-layer CUDA graphs on the 96 GB
# H100; the second: round-robin routing behind HybridEP with TE's fused grouped MLP in one
# full-iteration graph, MXFP8 weights gathered in FP8, the EP overlap with delayed expert wgrads) --
# so deleting, retyping or tweaking each of them reaches its check.
ROUND2_DENSE_SCENARIO = """\
name = "round 2 dense"

[model]
preset = "llama3-8b"
layers = 8
seq_len = 1024

[cluster]
topology = "dgx-h100"
num_gpus = 16
gpu = "h100-sxm-96gb"

[parallel]
tp = 2
pp = 2
dp = 4
micro_batch = 1
global_batch = 32
local_batch = 4
zero = 3
dp_shard = 2
reshard_after_forward = false
overlap_grad_reduce = true
overlap_param_gather = true
account_for_loss_in_pipeline_split = true
recompute = "selective"
recompute_modules = ["core_attn", "mlp"]

[precision]
dtype = "fp8"
fp8_recipe = "blockwise"

[kernels]
attention = "fa3"
cross_entropy = "te"
norm = "torch"
zero3_backward_prefetch = "post"
fsdp_flat_grad = "cat"
cuda_graph_impl = "local"
cuda_graph_modules = ["attn", "mlp"]

[memory]
exp_avg_dtype = "bf16"
exp_avg_sq_dtype = "fp16"
sharded_grad_dtype = "fp32"
sharded_param_dtype = "fp32"
e5m6_attention_output = true
"""

ROUND2_MOE_SCENARIO = """\
name = "round 2 moe"

[model]
preset = "qwen3-30b-a3b"
layers = 4
seq_len = 1024

[model.moe]
routing = "round_robin"

[cluster]
topology = "dgx-b200"
num_gpus = 16

[parallel]
tp = 1
ep = 8
micro_batch = 1
global_batch = 32
ep_comm_overlap = true
delay_wgrad_compute = true
recompute = "selective"
recompute_modules = ["moe_act"]
zero = 1

[precision]
dtype = "mxfp8"
fp8_param_gather = true

[kernels]
moe_dispatcher = "hybridep"
fused_grouped_mlp = true
cuda_graph_impl = "full_iteration"
expert_grad_reduce_dtype = "bf16"
ep_comm_sms = 24
ep_comm_high_priority = true
cross_entropy = "fused"

[memory]
fp8_moe_act_input = true
exp_avg_sq_dtype = "bf16"
"""

BASES = (SMALL_SCENARIO, RICH_SCENARIO, NEW_KEYS_SCENARIO, ROUND2_DENSE_SCENARIO, ROUND2_MOE_SCENARIO)

HOSTILE_NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    3,
    7,
    0.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    1e30,
    -1e30,
    10**12,
    2**63,
    2**64,
    1e-300,
    65536,
)
OTHER_TYPES: tuple[Any, ...] = (
    "",
    "abc",
    "8",
    "nan",
    "../../etc/passwd",
    "\u0000",
    "dgx-a100",
    True,
    False,
    [],
    [1, 2],
    {},
    {"a": 1},
    1.5,
    2,
)
UNKNOWN_KEYS = ("bogus", "Layers", "tp ", "nic_gbps", "éé", "seed2", "model", "preset")


def _paths(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a nested dict (tables and leaves)."""
    out: list[tuple[str, ...]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            out.append((*prefix, key))
            out.extend(_paths(value, (*prefix, key)))
    return out


def _get_parent(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = data
    for part in path[:-1]:
        node = node[part]
    return node


# Plausible values: a mutation to one of these often keeps the scenario valid, so many
# examples get through the loader and exercise the engine.
PLAUSIBLE_STRINGS = (
    "gpipe",
    "1f1b",
    "interleaved",
    "zb-h1",
    "none",
    "selective",
    "full",
    "bf16",
    "fp16",
    "fp8",
    "dgx-a100",
    "dgx-h100",
    "pcie-a100",
    "dgx-a100-40gb",
    "llama3-8b",
    "gpt3-1.3b",
    "h200",
    "a100-40gb",
    "fat-tree",
    "rail-optimized",
    "nvswitch",
    "pcie",
    "dgx-h800",
    "dgx-b300",
    "gb300-nvl72",
    "h800",
    "b300",
    "gb300",
    "unpad",
    "UNPAD",
    "separate",
    "fused",
    "balanced",
    "dropless",
    "hybridep",
    "deepep",
    "current",
    "mxfp8",
    "nvfp4",
    # round 2's choice values
    "round_robin",
    "blockwise",
    "delayed",
    "allgather",
    "alltoall",
    "local",
    "transformer_engine",
    "full_iteration",
    "compiled",
    "eager",
    "fa3",
    "cudnn",
    "te",
    "torch",
    "post",
    "flat",
    "cat",
    "h100-sxm-96gb",
    "zb-v",
    "dualpipe",
    "dualpipev",
)


def _tweak(draw: st.DrawFn, value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.sampled_from((value * 2, max(value // 2, 1), value + 1, 1, 2, 4, 8)))
    if isinstance(value, float):
        return draw(st.sampled_from((value * 2, value / 2, 0.0, 1.0)))
    if isinstance(value, str):
        return draw(st.sampled_from(PLAUSIBLE_STRINGS))
    if isinstance(value, list):  # module lists (cuda_graph_modules, recompute_modules): one less, one more
        return draw(
            st.sampled_from(
                (value[:-1], value[1:], [*value, "moe"], [*value, "moe_router"], [*value, *value])
            )
        )
    return value


def _mutate(draw: st.DrawFn, parent: dict, key: str, kind: str) -> None:
    """One hostile edit of `parent[key]`: tweak, delete, retype, hostile number, or an unknown
    key beside it (inside it when it is a table)."""
    if kind == "tweak":
        parent[key] = _tweak(draw, parent[key])
    elif kind == "delete":
        del parent[key]
    elif kind == "retype":
        parent[key] = copy.deepcopy(draw(st.sampled_from(OTHER_TYPES)))
    elif kind == "number":
        parent[key] = draw(st.sampled_from(HOSTILE_NUMBERS))
    else:
        target = parent[key] if isinstance(parent[key], dict) else parent
        # a copy: a later edit inside a drawn {} must not change OTHER_TYPES (the next example's
        # draws) nor nest that dict in itself (a RecursionError while generating)
        target[draw(st.sampled_from(UNKNOWN_KEYS))] = copy.deepcopy(
            draw(st.sampled_from(HOSTILE_NUMBERS + OTHER_TYPES))
        )


@st.composite
def mutated_scenario(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(BASES))
    data = tomllib.loads(base)
    for _ in range(draw(st.sampled_from((1, 1, 1, 2, 3)))):
        paths = _paths(data)
        kind = draw(
            st.sampled_from(("tweak", "tweak", "tweak", "delete", "retype", "number", "unknown", "table"))
        )
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _get_parent(data, path)
        if path[-1] not in parent:
            continue
        if kind == "table":  # an unknown or misplaced table
            data[draw(st.sampled_from(UNKNOWN_KEYS + ("cluster", "sweep")))] = {"tp": [1, 2]}
        else:
            _mutate(draw, parent, path[-1], kind)
    raw = dump_toml(data).encode("utf-8")
    tail = draw(st.sampled_from(("none",) * 6 + ("truncate", "flip", "junk")))
    if tail == "truncate" and raw:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif tail == "flip" and raw:
        raw = bytearray(raw)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] = draw(st.integers(0, 255))
        raw = bytes(raw)
    elif tail == "junk":
        raw = raw + draw(st.binary(min_size=1, max_size=16))
    return raw


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    """`mfusim ARGV` in this process: (exit code, stdout, stderr). Other exceptions propagate."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def check_contract(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "Traceback" not in out, err
    assert code in (0, 2), f"exit {code}: {err}"
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert "error" in lines[0]


def check_report_json(report: dict[str, Any]) -> None:
    """The invariants a simulated step's JSON keeps (test_invariants.check_report on the report
    object): a finite positive step its breakdown adds up to, 0 < MFU <= HFU <= 1, memory parts >= 0."""
    step = report["step_time_s"]
    assert step > 0 and math.isfinite(step)
    assert math.isclose(sum(report["breakdown_s"].values()), step, rel_tol=1e-6), report["breakdown_s"]
    assert 0 < report["mfu"] <= report["hfu"] <= 1, (report["mfu"], report["hfu"])
    memory = report["memory"]
    assert memory["parts_gib"] and all(v >= 0 for v in memory["parts_gib"].values()), memory
    assert all(v > 0 for v in memory.get("peak_gib_by_stage", [])), memory


FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run: reproducible in CI
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@FUZZ_SETTINGS
@given(content=mutated_scenario())
def test_mutated_scenarios_exit_0_or_2(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzzed.toml"
        path.write_bytes(content)
        code, out, err = run_in_process(["run", str(path), "--json"])
    check_contract(code, out, err)
    if code == 0:
        report = json.loads(out)  # valid: exactly one JSON object on stdout
        check_report_json(report)
    else:
        assert out == ""
        assert "fuzzed.toml" in err  # the message names the file


# ----------------------------------------------------------------------------- flags
FLAG_VALUES = (
    "0",
    "-1",
    "1",
    "2",
    "7e9",
    "1e5",
    "nan",
    "inf",
    "-inf",
    "1e30",
    "abc",
    "",
    "a100-80gb",
    "llama3-8b",
    "gpt5",
    "fp8",
    "full",
    "--json",
    "/nonexistent/dir/x.json",
    "3.5",
    "64",
)
MFU_FLAGS = (
    "--params",
    "--model",
    "--seq-len",
    "--tokens-per-s",
    "--step-time-s",
    "--global-batch",
    "--gpus",
    "--gpu",
    "--dtype",
    "--recompute",
)
RUN_FLAGS = ("--samples", "--seed", "--comm-model", "--trace")


@st.composite
def mfu_argv(draw: st.DrawFn) -> list[str]:
    argv = ["mfu", "--params", "7e9", "--tokens-per-s", "1e5", "--gpus", "64", "--gpu", "a100-80gb"]
    for _ in range(draw(st.integers(1, 4))):
        flag = draw(st.sampled_from(MFU_FLAGS))
        value = draw(st.sampled_from(FLAG_VALUES))
        action = draw(st.sampled_from(("set", "drop", "append")))
        if flag in argv and action != "append":
            i = argv.index(flag)
            argv = argv[:i] + ([flag, value] if action == "set" else []) + argv[i + 2 :]
        else:
            argv += [flag, value]
    if draw(st.booleans()):
        argv.append("--json")
    return argv


@st.composite
def run_argv(draw: st.DrawFn) -> list[str]:
    argv = ["run", "SCENARIO"]
    for _ in range(draw(st.integers(1, 3))):
        flag = draw(st.sampled_from(RUN_FLAGS))
        value = draw(
            st.sampled_from(
                (
                    "0",
                    "-1",
                    "1",
                    "2",
                    "3",
                    "abc",
                    "",
                    "nan",
                    "1e3",
                    "flat",
                    "topology",
                    "/nonexistent/dir/x.json",
                    "99999999999999999999",
                )
            )
        )
        argv += [flag, value]
    argv.append("--json")
    return argv


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(argv=mfu_argv())
def test_mfu_flags_exit_0_or_2(argv: list[str]) -> None:
    code, out, err = run_in_process(argv)
    check_contract(code, out, err)
    if code == 0 and "--json" in argv:
        json.loads(out)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(argv=run_argv())
def test_run_flags_exit_0_or_2(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        scenario = Path(folder) / "s.toml"
        scenario.write_text(SMALL_SCENARIO)
        argv = [str(scenario) if a == "SCENARIO" else a for a in argv]
        with contextlib.chdir(folder):  # a --trace with a relative name lands here
            code, out, err = run_in_process(argv)
    check_contract(code, out, err)
    if code == 0:
        json.loads(out)


@pytest.mark.parametrize("base", BASES, ids=["small", "rich", "new-keys", "round2-dense", "round2-moe"])
def test_fuzz_bases_are_valid(base: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "base.toml"
        path.write_text(base)
        code, out, err = run_in_process(["run", str(path), "--json"])
    assert code == 0, err
    assert json.loads(out)["num_gpus"] == 16


# ----------------------------------------------------------------------------- topology files and [sweep]
TOPOLOGY = """\
name = "fuzz topology"
gpu = "h100-sxm"
gpus_per_node = 8
rank_order = ["tp", "cp", "dp", "pp"]

[intra_node]
fabric = "nvswitch"
link_GBps_per_direction = 450
latency_us = 3.0
nvls = true

[inter_node]
fabric = "rail-optimized"
nics_per_node = 8
nic_Gbps = 400
latency_us = 5.0
nodes_per_leaf = 32
oversubscription = 1.0
"""


@st.composite
def mutated_topology(draw: st.DrawFn) -> str:
    data = tomllib.loads(TOPOLOGY)
    for _ in range(draw(st.sampled_from((1, 1, 2)))):
        path = draw(st.sampled_from(_paths(data)))
        parent = _get_parent(data, path)
        if path[-1] not in parent:
            continue
        _mutate(
            draw, parent, path[-1], draw(st.sampled_from(("tweak", "delete", "retype", "number", "unknown")))
        )
    return dump_toml(data)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(topology=mutated_topology(), gpus=st.sampled_from(("8", "16", "1024", "16384", "7")))
def test_mutated_topologies_exit_0_or_2(topology: str, gpus: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        topo = Path(folder) / "topo.toml"
        topo.write_text(topology)
        scenario = Path(folder) / "s.toml"
        scenario.write_text(SMALL_SCENARIO.replace('topology = "dgx-a100"', 'topology = "topo.toml"'))
        for argv in (["topo", str(topo), "--gpus", gpus, "--json"], ["run", str(scenario), "--json"]):
            code, out, err = run_in_process(argv)
            check_contract(code, out, err)
            if code == 0:
                json.loads(out)


SWEEP_VALUES: tuple[Any, ...] = (
    0,
    -1,
    1,
    2,
    4,
    1.5,
    math.nan,
    math.inf,
    1e30,
    10**12,
    "a",
    "",
    True,
    [],
    {},
    "none",
    "full",
    "gpipe",
    "interleaved",
)
SWEEP_KEYS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vp",
    "micro_batch",
    "global_batch",
    "schedule",
    "recompute",
    "zero",
    "sequence_parallel",
    "num_gpus",
    "overlap_grad_reduce",
    "grad_bucket_params",
    "bogus",
)


@st.composite
def sweep_tables(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(SWEEP_KEYS), min_size=1, max_size=3, unique=True))
    table: dict[str, Any] = {}
    for key in keys:
        values = draw(st.lists(st.sampled_from(SWEEP_VALUES), min_size=1, max_size=3))
        table[key] = values if draw(st.booleans()) else values[0]
    return table


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(table=sweep_tables())
def test_hostile_sweep_tables_exit_0_or_2(table: dict[str, Any]) -> None:
    data = tomllib.loads(SMALL_SCENARIO)
    data["sweep"] = table
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sweep.toml"
        path.write_text(dump_toml(data))
        out_csv = Path(folder) / "out.csv"
        code, out, err = run_in_process(["sweep", str(path), "--json", "--out", str(out_csv)])
    assert "Traceback" not in err
    assert code in (0, 2), err
    if code == 2:
        # progress bars may precede the error on stderr; the error itself is one line, last
        assert "error" in err.strip().splitlines()[-1]
    else:
        json.loads(out)


# ----------------------------------------------------------------------------- config.json imports
# Hostile edits of the shipped Hugging Face config.json fixtures (issue 13: imports are exact or
# refused): a key deleted, or set to a hostile number, a wrong type or a value from another
# architecture, at the top level or inside text_config; with or without seq_len and
# allow_unmodeled. The CLI exits 0 (and reports the model it simulated) or 2 with one line.
HF_FIXTURES = Path(__file__).parent / "fixtures" / "hf"
HF_KEYS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "head_dim", "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace",
    "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers", "n_group", "topk_group", "kv_lora_rank",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_nextn_predict_layers",
    "rope_scaling", "rope_parameters", "max_position_embeddings", "sliding_window", "use_sliding_window",
    "attention_chunk_size", "layer_types", "interleave_moe_layer_step", "intermediate_size_mlp", "moe_layers",
    "tie_word_embeddings", "hidden_act", "model_type", "text_config", "vision_config",
    "hybrid_override_pattern", "attention_dropout", "_name_or_path", "architectures", "mlp_bias",
)  # fmt: skip
HF_VALUES: tuple[Any, ...] = (
    *HOSTILE_NUMBERS,
    *OTHER_TYPES,
    None,
    ["full_attention"],
    ["sliding_attention", "full_attention"],
    4096,
    {"type": "yarn", "factor": 40},
    {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
)


@st.composite
def hostile_hf_configs(draw: st.DrawFn) -> tuple[dict[str, Any], int | None, list[str]]:
    name = draw(st.sampled_from(sorted(p.name for p in HF_FIXTURES.glob("*.json"))))
    cfg = json.loads((HF_FIXTURES / name).read_text())
    nested = isinstance(cfg.get("text_config"), dict) and draw(st.booleans())
    target = cfg["text_config"] if nested else cfg
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(HF_KEYS))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = copy.deepcopy(draw(st.sampled_from(HF_VALUES)))
    seq_len = draw(st.sampled_from((None, 256, 4096, 16384)))
    allow = draw(st.sampled_from(([], ["vision_config"], ["layer_types", "sliding_window"])))
    return cfg, seq_len, allow


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=hostile_hf_configs())
def test_hostile_hf_configs_exit_0_or_2(case: tuple[dict[str, Any], int | None, list[str]]) -> None:
    cfg, seq_len, allow = case
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(cfg))
        model = {"hf_config": "config.json", "allow_unmodeled": allow} | (
            {"seq_len": seq_len} if seq_len else {}
        )
        data = {
            "model": model,
            "cluster": {"topology": "dgx-h100", "num_gpus": 8},
            "parallel": {"global_batch": 8},
        }
        path = Path(folder) / "s.toml"
        path.write_text(dump_toml(data))
        code, out, err = run_in_process(["run", str(path), "--json"])
    check_contract(code, out, err)
    if code == 0:
        report = json.loads(out)
        assert report["model"]["params"] > 0 and report["step_time_s"] > 0


def test_hf_config_non_numeric_dropout_is_refused_by_key(tmp_path: Path) -> None:
    cfg = json.loads((HF_FIXTURES / "mixtral.json").read_text()) | {"attention_dropout": []}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    path = tmp_path / "s.toml"
    path.write_text(
        dump_toml(
            {
                "model": {"hf_config": "config.json", "seq_len": 4096},
                "cluster": {"topology": "dgx-h100", "num_gpus": 8},
                "parallel": {"global_batch": 8},
            }
        )
    )
    code, _, err = run_in_process(["run", str(path), "--json"])
    assert code == 2 and "attention_dropout" in err and "config.json" in err


# ----------------------------------------------------------------------------- found by the fuzz audit
TOO_FEW_TIERS = {
    "model": {"layers": 2, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1000, "seq_len": 512},
    "cluster": {"topology": "gb200-nvl72", "num_gpus": 4, "inter_node": {"tiers": 1}},
    "parallel": {"global_batch": 8},
}


@pytest.mark.parametrize("command", ["run", "whatif", "compare"])
def test_unbuildable_switch_tiers_name_the_file_and_cluster_key(tmp_path: Path, command: str) -> None:
    """One tier of 64-port switches cannot connect an NVL72 rack's 72 NICs: the network refuses it
    only when built, after loading (it depends on num_gpus). The error named neither the file nor
    the scenario's key ('inter_node.tiers'); whatif printed a progress line before it."""
    path = tmp_path / "tiers.toml"
    path.write_text(dump_toml(TOO_FEW_TIERS))
    argv = [command, str(path), str(path)] if command == "compare" else [command, str(path)]
    code, out, err = run_in_process([*argv, "--json"])
    check_contract(code, out, err)
    assert code == 2 and out == ""
    assert str(path) in err and "key 'cluster.inter_node.tiers'" in err


# Choice keys are accepted in any case / '-' or '_' spelling (simulator/names.py canonical). Some
# checked the spelling but kept the user's: `attention_padding = "Unpad"` and `bias_grad =
# "SEPARATE"` were accepted and silently simulated as "none"/"fused", `cross_entropy = "TE"` ended
# in a KeyError (exit 1), `attention = "FA2"` in a key-less error mid-simulation and `stack =
# "Megatron-Core"` in a wrong "no fitted residuals" refusal. Each spelling must simulate exactly as
# the canonical one.
SPELLED_BASE = {
    "model": {"preset": "mixtral-8x7b", "layers": 4, "seq_len": 1024, "linear_bias": True},
    "cluster": {"topology": "dgx-h100", "num_gpus": 16},
    "parallel": {"tp": 2, "ep": 4, "micro_batch": 1, "global_batch": 64, "zero": 1},
    "kernels": {"attention": "fa2"},  # attention_padding = "unpad" needs a varlen flash kernel
}
SPELLED_CHOICES = (
    ("kernels", "attention_padding", "unpad"),
    ("kernels", "bias_grad", "separate"),
    ("kernels", "norm", "torch"),
    ("kernels", "qkv_grad", "cat"),
    ("kernels", "cross_entropy", "te"),
    ("kernels", "attention", "fa2"),
    ("kernels", "stack", "megatron-core"),
    ("kernels", "grad_reduce_dtype", "bf16"),
    ("kernels", "zero3_collectives", "flat"),
    ("kernels", "zero3_backward_prefetch", "post"),
    ("model.moe", "routing", "dropless"),
    ("model.moe", "dispatch_dtype", "fp8"),
)


@pytest.mark.parametrize(("section", "key", "value"), SPELLED_CHOICES, ids=[c[1] for c in SPELLED_CHOICES])
def test_choice_spellings_simulate_as_the_canonical_name(section: str, key: str, value: str) -> None:
    from simulator.loading import scenario_from_dict
    from simulator.simulate import simulate

    def step_s(spelled: str) -> tuple[float, object]:
        data = json.loads(json.dumps(SPELLED_BASE))
        node = data
        for part in section.split("."):
            node = node.setdefault(part, {})
        node[key] = spelled
        scn = scenario_from_dict(data)
        return simulate(scn).report.step_time_s, getattr(
            scn.model if section.startswith("model") else scn.kernels, key
        )

    canonical, stored = step_s(value)
    assert stored == value
    for spelled in (value.upper(), value.title()):
        assert step_s(spelled) == (canonical, value), spelled


@pytest.mark.parametrize(
    ("key", "value", "unit"),
    [
        ("cluster.inter_node.nic_Gbps", "1e-300", "Gb/s"),
        ("cluster.inter_node.nic_Gbps", "0.001", "Gb/s"),
        ("cluster.intra_node.link_GBps_per_direction", "1e-300", "GB/s"),
    ],
)
def test_a_subnormal_link_is_refused_by_key(tmp_path: Path, key: str, value: str, unit: str) -> None:
    """The mutation fuzz's `1e-300` on the rich base's nic_Gbps ran a ~1.9e299 s step whose
    MFU underflowed to 0.0 (the contract: 0 < MFU). A link below 1 MB/s is refused, in the key's
    unit; one at the floor still reports a positive MFU."""
    path = tmp_path / "rich.toml"
    path.write_text(RICH_SCENARIO)
    code, out, err = run_in_process(["run", str(path), "--set", f"{key}={value}", "--json"])
    check_contract(code, out, err)
    assert code == 2 and key in err and "at least" in err and unit in err
    floor = "0.008" if unit == "Gb/s" else "0.001"
    code, out, err = run_in_process(["run", str(path), "--set", f"{key}={floor}", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert 0 < report["mfu"] <= report["hfu"] and math.isfinite(report["step_time_s"])


# ----------------------------------------------------------------------------- drawn scenarios as files
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.one_of(scenario_dicts(), moe_scenarios()))
def test_drawn_scenario_files_exit_0_or_2(data: dict[str, Any]) -> None:
    """The invariant strategies' scenarios (every round 2 key, tests/test_invariants.py
    draw_new_keys) as TOML files through `mfusim run --json`: a simulated step keeps the report's
    invariants in its JSON, a refused one is one error line naming the key, never a traceback."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "drawn.toml"
        path.write_text(dump_toml(data))
        code, out, err = run_in_process(["run", str(path), "--json"])
    check_contract(code, out, err)
    if code == 0:
        check_report_json(json.loads(out))
    else:
        assert "key '" in err and "drawn.toml" in err, err
