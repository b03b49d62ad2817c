"""Every mistake a user can make ends in one line on stderr naming the file and key (or the
flag), exit status 2, and never a traceback (SPEC §3; issues 2 and 8).

Scenario files are checked twice: through the loader (`load_scenario` raises `ConfigError`
naming file and key) and, once `mfusim run` exists, through the command line.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_SCENARIO, CliResult, dump_toml

from simulator.cli import check_writable, one_line
from simulator.errors import ConfigError
from simulator.loading import load_scenario, load_topology

DELETE = object()


IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def assert_user_error(res: CliResult, *needles: str) -> None:
    """Exit 2, exactly one line on stderr mentioning every needle, no traceback."""
    assert res.code == 2, (res.code, res.err)
    assert "Traceback" not in res.err and "Traceback" not in res.out
    lines = res.err.splitlines()
    assert len(lines) == 1, res.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def scenario_dict() -> dict[str, Any]:
    return tomllib.loads(SMALL_SCENARIO)


def mutated(path: tuple[str, ...], value: object) -> str:
    """SMALL_SCENARIO with data[path] set to value (DELETE removes it)."""
    data = copy.deepcopy(scenario_dict())
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return dump_toml(data)


def check_bad_scenario(path: Path, key: str | None, run_cli: Callable[[list[str]], CliResult]) -> str:
    """The loader and (when present) `mfusim run` both reject `path` naming file and key."""
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    assert path.name in message, message
    if key is not None:
        assert info.value.key is not None and key in info.value.key, (key, message)
        assert key in message
    assert "\n" not in one_line(message)
    res = run_cli(["run", str(path), "--json"])
    needles = [path.name] + ([key] if key else [])
    assert_user_error(res, *needles)
    assert res.out == ""
    return message


# ----------------------------------------------------------------------------- scenario values
NAN, INF = float("nan"), float("inf")

# (id, path of the key, bad value, key the message must name)
VALUE_CASES: list[tuple[str, tuple[str, ...], object, str]] = [
    # wrong types
    ("layers-string", ("model", "layers"), "32", "model.layers"),
    ("hidden-float", ("model", "hidden"), 512.5, "model.hidden"),
    ("layers-1e30", ("model", "layers"), 1e30, "model.layers"),
    ("gated-mlp-string", ("model", "gated_mlp"), "yes", "model.gated_mlp"),
    ("tp-bool", ("parallel", "tp"), True, "parallel.tp"),
    ("sp-int", ("parallel", "sequence_parallel"), 1, "parallel.sequence_parallel"),
    ("num-gpus-string", ("cluster", "num_gpus"), "16", "cluster.num_gpus"),
    ("num-gpus-list", ("cluster", "num_gpus"), [16], "cluster.num_gpus"),
    ("topology-int", ("cluster", "topology"), 7, "cluster.topology"),
    ("dtype-int", ("precision", "dtype"), 16, "precision.dtype"),
    ("name-int", ("name",), 5, "name"),
    ("model-not-table", ("model",), 5, "model"),
    ("parallel-not-table", ("parallel",), "tp=2", "parallel"),
    ("inter-node-not-table", ("cluster", "inter_node"), 400, "cluster.inter_node"),
    ("rank-order-string", ("cluster", "rank_order"), "tp,dp", "cluster.rank_order"),
    ("workers-float", ("dataloader", "workers"), 2.5, "dataloader.workers"),
    # missing keys
    ("missing-model", ("model",), DELETE, "model"),
    ("missing-cluster", ("cluster",), DELETE, "cluster"),
    ("missing-hidden", ("model", "hidden"), DELETE, "model.hidden"),
    ("missing-num-gpus", ("cluster", "num_gpus"), DELETE, "cluster.num_gpus"),
    ("missing-topology", ("cluster", "topology"), DELETE, "cluster.topology"),
    ("missing-global-batch", ("parallel", "global_batch"), DELETE, "parallel.global_batch"),
    # unknown keys (typos)
    ("unknown-top", ("modle",), {"layers": 2}, "modle"),
    ("unknown-model", ("model", "layer"), 4, "model.layer"),
    ("unknown-parallel", ("parallel", "pipeline"), 2, "parallel.pipeline"),
    ("unknown-inter-node", ("cluster", "inter_node", "nic_gbps"), 400, "cluster.inter_node.nic_gbps"),
    ("unknown-intra-node", ("cluster", "intra_node", "bandwidth"), 300, "cluster.intra_node.bandwidth"),
    ("unknown-cluster", ("cluster", "gpus"), 16, "cluster.gpus"),
    ("unknown-variability", ("variability", "jitter"), 0.1, "variability.jitter"),
    ("unknown-dataloader", ("dataloader", "latency_ms"), 1.0, "dataloader.latency_ms"),
    ("unknown-precision", ("precision", "type"), "bf16", "precision.type"),
    ("unknown-sweep", ("sweep", "tensor_parallel"), [1, 2], "sweep.tensor_parallel"),
    ("unknown-moe", ("model", "moe", "experts"), 8, "model.moe.experts"),
    # zero / negative / NaN / inf
    ("num-gpus-zero", ("cluster", "num_gpus"), 0, "cluster.num_gpus"),
    ("num-gpus-negative", ("cluster", "num_gpus"), -16, "cluster.num_gpus"),
    ("num-gpus-nan", ("cluster", "num_gpus"), NAN, "cluster.num_gpus"),
    ("micro-batch-zero", ("parallel", "micro_batch"), 0, "parallel.micro_batch"),
    ("seq-len-negative", ("model", "seq_len"), -1, "model.seq_len"),
    ("heads-zero", ("model", "heads"), 0, "model.heads"),
    ("vocab-inf", ("model", "vocab"), INF, "model.vocab"),
    ("latency-nan", ("dataloader", "microbatch_latency_ms"), NAN, "dataloader.microbatch_latency_ms"),
    ("latency-inf", ("dataloader", "microbatch_latency_ms"), INF, "dataloader.microbatch_latency_ms"),
    ("latency-negative", ("dataloader", "microbatch_latency_ms"), -1.0, "dataloader.microbatch_latency_ms"),
    ("dl-jitter-nan", ("dataloader", "jitter"), NAN, "dataloader.jitter"),
    ("dl-seed-negative", ("dataloader", "seed"), -1, "dataloader.seed"),
    ("nic-nan", ("cluster", "inter_node", "nic_Gbps"), NAN, "cluster.inter_node.nic_Gbps"),
    ("nic-zero", ("cluster", "inter_node", "nic_Gbps"), 0, "cluster.inter_node.nic_Gbps"),
    ("nic-negative", ("cluster", "inter_node", "nic_Gbps"), -200, "cluster.inter_node.nic_Gbps"),
    (
        "nvlink-neg-inf",
        ("cluster", "intra_node", "link_GBps_per_direction"),
        -INF,
        "cluster.intra_node.link_GBps_per_direction",
    ),
    (
        "nvlink-zero",
        ("cluster", "intra_node", "link_GBps_per_direction"),
        0,
        "cluster.intra_node.link_GBps_per_direction",
    ),
    ("inter-latency-inf", ("cluster", "inter_node", "latency_us"), INF, "cluster.inter_node.latency_us"),
    ("nics-zero", ("cluster", "inter_node", "nics_per_node"), 0, "cluster.inter_node.nics_per_node"),
    (
        "oversubscription-half",
        ("cluster", "inter_node", "oversubscription"),
        0.5,
        "cluster.inter_node.oversubscription",
    ),
    ("gpus-per-node-zero", ("cluster", "gpus_per_node"), 0, "cluster.gpus_per_node"),
    ("compute-jitter-nan", ("variability", "compute_jitter"), NAN, "variability.compute_jitter"),
    ("network-jitter-negative", ("variability", "network_jitter"), -0.1, "variability.network_jitter"),
    (
        "straggler-probability-1.5",
        ("variability", "straggler_probability"),
        1.5,
        "variability.straggler_probability",
    ),
    ("straggler-slowdown-half", ("variability", "straggler_slowdown"), 0.5, "variability.straggler_slowdown"),
    ("straggler-slowdown-inf", ("variability", "straggler_slowdown"), INF, "variability.straggler_slowdown"),
    ("variability-seed-huge", ("variability", "seed"), 2**64, "variability.seed"),
    # absurd sizes
    ("num-gpus-1e12-int", ("cluster", "num_gpus"), 10**12, "cluster.num_gpus"),
    ("num-gpus-1e12-float", ("cluster", "num_gpus"), 1e12, "cluster.num_gpus"),
    ("hidden-1e12", ("model", "hidden"), 10**12, "model.hidden"),
    ("global-batch-1e15", ("parallel", "global_batch"), 10**15, "parallel.global_batch"),
    ("layers-1e6", ("model", "layers"), 10**6, "model.layers"),
    ("global-batch-too-many-microbatches", ("parallel", "global_batch"), 4 * 10**7, "parallel.global_batch"),
    # choices
    ("dtype-fp4", ("precision", "dtype"), "fp4", "precision.dtype"),
    ("dtype-fp8-on-a100", ("precision", "dtype"), "fp8", "precision.dtype"),
    ("schedule-unknown", ("parallel", "schedule"), "zigzag", "parallel.schedule"),
    ("recompute-unknown", ("parallel", "recompute"), "partial", "parallel.recompute"),
    ("zero-4", ("parallel", "zero"), 4, "parallel.zero"),
    ("fabric-unknown", ("cluster", "inter_node", "fabric"), "dragonfly", "cluster.inter_node.fabric"),
    ("rank-order-bad", ("cluster", "rank_order"), ["tp", "tp", "dp", "pp"], "cluster.rank_order"),
    # unknown names
    ("unknown-preset", ("model", "preset"), "gpt5", "model.preset"),
    ("unknown-topology", ("cluster", "topology"), "dgx-z9000", "cluster.topology"),
    ("unknown-gpu", ("cluster", "gpu"), "a100-96gb", "cluster.gpu"),
    ("topology-empty-string", ("cluster", "topology"), "", "cluster.topology"),
    # non-dividing splits
    ("product-not-num-gpus", ("parallel", "dp"), 3, "parallel"),
    ("kv-heads-not-dividing", ("model", "kv_heads"), 3, "model.kv_heads"),
    ("pp-breaks-product", ("parallel", "pp"), 8, "parallel.dp"),
    ("interleaved-without-vp", ("parallel", "schedule"), "interleaved", "parallel.vp"),
    ("ep-on-dense-model", ("parallel", "ep"), 2, "parallel.ep"),
    # refused while loading, naming the file (was raised mid-simulation without it: fuzz-audit)
    ("fa3-on-ampere", ("kernels", "attention"), "fa3", "kernels.attention"),
]


@pytest.mark.parametrize(
    ("path", "value", "key"), [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES]
)
def test_bad_scenario_value(
    path: tuple[str, ...], value: object, key: str, write_file: Callable[..., Path], run_cli
) -> None:
    check_bad_scenario(write_file(mutated(path, value)), key, run_cli)


# ----------------------------------------------------------------------------- splits needing two edits
def _split(
    tp: int, pp: int, dp: int, num_gpus: int, global_batch: int = 16, micro_batch: int = 1, **model: Any
) -> str:
    data = scenario_dict()
    data["parallel"].update(tp=tp, pp=pp, dp=dp, global_batch=global_batch, micro_batch=micro_batch)
    data["cluster"]["num_gpus"] = num_gpus
    data["model"].update(model)
    return dump_toml(data)


SPLIT_CASES = [
    ("tp-not-dividing-heads", _split(3, 1, 4, 12, global_batch=16), "parallel.tp"),
    ("tp-kv-heads-neither-divides", _split(4, 1, 4, 16, heads=24, hidden=768, kv_heads=6), "parallel.tp"),
    ("pp-more-than-layers", _split(1, 8, 2, 16), "parallel.pp"),
    ("tp-pp-dp-not-num-gpus", _split(2, 2, 2, 16), "parallel.dp"),
    ("global-batch-not-multiple", _split(2, 2, 4, 16, global_batch=18), "parallel.global_batch"),
    (
        "global-batch-not-multiple-micro",
        _split(2, 2, 4, 16, global_batch=16, micro_batch=3),
        "parallel.global_batch",
    ),
    ("global-batch-smaller-than-dp", _split(1, 1, 16, 16, global_batch=8), "parallel.global_batch"),
    (
        "no-integer-dp",
        _split(2, 2, 4, 16).replace("dp = 4\n", "").replace("num_gpus = 16", "num_gpus = 18"),
        "parallel.dp",
    ),
    ("hidden-not-multiple-of-heads", _split(2, 2, 4, 16, hidden=500), "model.heads"),
    ("num-gpus-1e12-dp-derived", _split(2, 2, 4, 10**12).replace("dp = 4\n", ""), "cluster.num_gpus"),
    ("absurd-parameter-count", _split(2, 2, 4, 16, hidden=2_000_000, ffn_hidden=10_000_000), "model"),
]


@pytest.mark.parametrize(("text", "key"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES])
def test_bad_split(text: str, key: str | None, write_file: Callable[..., Path], run_cli) -> None:
    check_bad_scenario(write_file(text), key, run_cli)


def test_tp_kv_heads_sensible() -> None:
    """kv_heads = 2 with tp = 4: KV heads are replicated (2 divides 4) -- valid, not an error."""
    data = tomllib.loads(_split(4, 1, 4, 16, kv_heads=2))
    from simulator.loading import scenario_from_dict

    assert scenario_from_dict(data).parallel.tp == 4
    data = tomllib.loads(_split(4, 1, 4, 16, kv_heads=8, heads=24, hidden=768))
    assert scenario_from_dict(data).model.num_kv_heads == 8  # 4 divides 8


# ----------------------------------------------------------------------------- broken files
FILE_CASES: list[tuple[str, bytes, str]] = [
    ("malformed-toml", b"[model]\nlayers 4\n", "malformed TOML"),
    ("unclosed-table", b"[model\nlayers = 4\n", "malformed TOML"),
    (
        "duplicate-key",
        SMALL_SCENARIO.replace("layers = 4\n", "layers = 4\nlayers = 5\n").encode(),
        "malformed TOML",
    ),
    ("empty-file", b"", "empty"),
    ("whitespace-only", b"  \n\n\t\n", "empty"),
    ("binary-file", bytes(range(256)) * 4, "binary"),
    ("png-header", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    ("latin-1", 'name = "caf\xe9"\n'.encode("latin-1"), "UTF-8"),
    ("deeply-nested", b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "malformed TOML"),
    ("json-instead-of-toml", json.dumps(scenario_dict()).encode(), "malformed TOML"),
]


@pytest.mark.parametrize(("content", "needle"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_broken_file(content: bytes, needle: str, write_file: Callable[..., Path], run_cli) -> None:
    path = write_file(content, "broken.toml")
    message = check_bad_scenario(path, None, run_cli)
    assert needle in message


def test_missing_file(tmp_path: Path, run_cli) -> None:
    check_bad_scenario(tmp_path / "nope.toml", None, run_cli)


def test_directory_as_file(tmp_path: Path, run_cli) -> None:
    folder = tmp_path / "adir.toml"
    folder.mkdir()
    assert "directory" in check_bad_scenario(folder, None, run_cli)


def test_very_long_file_name(tmp_path: Path, run_cli) -> None:
    path = tmp_path / ("x" * 5000 + ".toml")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert path.name in str(info.value)
    res = run_cli(["run", str(path), "--json"])
    # one line, with the 5,000-character name cut in the middle (issue 18)
    assert_user_error(res, "xxxxxxxx", "chars]", ".toml")
    assert len(res.err) < 500


@pytest.mark.skipif(IS_ROOT or os.name != "posix", reason="root reads any file; chmod 000 does not apply")
def test_unreadable_file(write_file: Callable[..., Path], run_cli) -> None:
    path = write_file(SMALL_SCENARIO, "secret.toml")
    path.chmod(0)
    try:
        assert "cannot read" in check_bad_scenario(path, None, run_cli)
    finally:
        path.chmod(0o644)


def test_unreadable_file_simulated(
    write_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, run_cli
) -> None:
    """The same as chmod 000, for root (who reads anything): the open itself is refused."""
    path = write_file(SMALL_SCENARIO, "secret.toml")
    real_open = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == "secret.toml":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    assert "Permission denied" in check_bad_scenario(path, None, run_cli)


# ----------------------------------------------------------------------------- referenced files
def test_topology_is_directory(write_file: Callable[..., Path], tmp_path: Path, run_cli) -> None:
    (tmp_path / "topo.toml").mkdir()
    check_bad_scenario(write_file(mutated(("cluster", "topology"), "topo.toml")), "cluster.topology", run_cli)


def test_topology_file_malformed(write_file: Callable[..., Path], run_cli) -> None:
    write_file("name = \n", "topo.toml")
    path = write_file(mutated(("cluster", "topology"), "topo.toml"))
    assert "topo.toml" in check_bad_scenario(path, "cluster.topology", run_cli)


TOPOLOGY = """name = "t"
gpu = "h100-sxm"
gpus_per_node = 8
[intra_node]
fabric = "nvswitch"
link_GBps_per_direction = 450
latency_us = 3.0
[inter_node]
fabric = "rail-optimized"
nics_per_node = 8
nic_Gbps = 400
latency_us = 5.0
nodes_per_leaf = 32
oversubscription = 1.0
"""

TOPOLOGY_CASES = [
    (
        "unknown-key",
        TOPOLOGY.replace("latency_us = 5.0", "latency_us = 5.0\nbandwidth = 3"),
        "inter_node.bandwidth",
    ),
    ("unknown-top-key", TOPOLOGY + "\nnodes = 4\n", "nodes"),
    ("missing-gpu", TOPOLOGY.replace('gpu = "h100-sxm"\n', ""), "gpu"),
    ("unknown-gpu", TOPOLOGY.replace("h100-sxm", "tpu-v5"), "gpu"),
    ("nic-nan", TOPOLOGY.replace("nic_Gbps = 400", "nic_Gbps = nan"), "inter_node.nic_Gbps"),
    ("gpus-per-node-string", TOPOLOGY.replace("gpus_per_node = 8", 'gpus_per_node = "8"'), "gpus_per_node"),
    ("fabric-unknown", TOPOLOGY.replace('fabric = "nvswitch"', 'fabric = "ethernet"'), "intra_node.fabric"),
]


@pytest.mark.parametrize(("text", "key"), [c[1:] for c in TOPOLOGY_CASES], ids=[c[0] for c in TOPOLOGY_CASES])
def test_bad_topology_file(text: str, key: str, write_file: Callable[..., Path], run_cli) -> None:
    topo = write_file(text, "mytopo.toml")
    with pytest.raises(ConfigError) as info:
        load_topology(str(topo))
    assert "mytopo.toml" in str(info.value) and info.value.key is not None and key in info.value.key
    # referenced from a scenario: the message names the topology file and its key
    scenario = write_file(mutated(("cluster", "topology"), "mytopo.toml"))
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario)
    assert "mytopo.toml" in str(info.value) and key in str(info.value)
    assert_user_error(run_cli(["run", str(scenario), "--json"]), "mytopo.toml", key)


def _hf(write_file: Callable[..., Path], content: str | bytes) -> Path:
    write_file(content, "config.json")
    data = scenario_dict()
    data["model"] = {"hf_config": "config.json"}
    return write_file(dump_toml(data))


HF_CASES: list[tuple[str, str | bytes | None, str]] = [
    ("missing-file", None, "model.hf_config"),
    ("not-json", "{num_hidden_layers: 4", "model.hf_config"),
    ("json-list", "[1, 2, 3]", "model.hf_config"),
    (
        "lacks-hidden",
        json.dumps({"num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 100}),
        "model.hf_config",
    ),
    (
        "layers-string",
        json.dumps(
            {
                "num_hidden_layers": "four",
                "hidden_size": 512,
                "num_attention_heads": 8,
                "vocab_size": 100,
                "max_position_embeddings": 1024,
            }
        ),
        "num_hidden_layers",
    ),
    (
        "experts-string",
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": 512,
                "num_attention_heads": 8,
                "vocab_size": 100,
                "max_position_embeddings": 1024,
                "num_local_experts": "abc",
            }
        ),
        "num_local_experts",
    ),
    (
        "top-k-list",
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": 512,
                "num_attention_heads": 8,
                "vocab_size": 100,
                "max_position_embeddings": 1024,
                "num_local_experts": 4,
                "num_experts_per_tok": [2],
            }
        ),
        "num_experts_per_tok",
    ),
    ("binary", b"\x00\xff\xfe" * 10, "model.hf_config"),
    ("deep-json", "[" * 100_000 + "]" * 100_000, "model.hf_config"),
]


@pytest.mark.parametrize(("content", "key"), [c[1:] for c in HF_CASES], ids=[c[0] for c in HF_CASES])
def test_bad_hf_config(
    content: str | bytes | None, key: str, write_file: Callable[..., Path], run_cli
) -> None:
    if content is None:
        data = scenario_dict()
        data["model"] = {"hf_config": "missing/config.json"}
        path = write_file(dump_toml(data))
    else:
        path = _hf(write_file, content)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.key is not None and key in info.value.key, str(info.value)
    if not key.startswith("model."):  # a value inside config.json: that file and its JSON key
        assert info.value.file is not None and info.value.file.endswith("config.json"), str(info.value)
    assert_user_error(run_cli(["run", str(path), "--json"]), key)


def test_preset_and_hf_config_both(write_file: Callable[..., Path], run_cli) -> None:
    data = scenario_dict()
    data["model"] = {"preset": "llama3-8b", "hf_config": "config.json"}
    check_bad_scenario(write_file(dump_toml(data)), "model.preset", run_cli)


# ----------------------------------------------------------------------------- flags
MFU = ["mfu", "--params", "7e9", "--tokens-per-s", "1e5", "--gpus", "64", "--gpu", "a100-80gb"]


def _without(args: list[str], flag: str) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 2 :]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    if flag in args:
        i = args.index(flag)
        return [*args[: i + 1], value, *args[i + 2 :]]
    return [*args, flag, value]


FLAG_CASES: list[tuple[str, list[str], str]] = [
    ("gpus-zero", _with(MFU, "--gpus", "0"), "--gpus"),
    ("gpus-word", _with(MFU, "--gpus", "many"), "--gpus"),
    ("gpus-1e12", _with(MFU, "--gpus", "1000000000000"), "--gpus"),
    ("gpus-float", _with(MFU, "--gpus", "8.5"), "--gpus"),
    ("params-negative", _with(MFU, "--params", "-7e9"), "--params"),
    ("params-nan", _with(MFU, "--params", "nan"), "--params"),
    ("tokens-inf", _with(MFU, "--tokens-per-s", "inf"), "--tokens-per-s"),
    ("tokens-zero", _with(MFU, "--tokens-per-s", "0"), "--tokens-per-s"),
    ("unknown-gpu", _with(MFU, "--gpu", "a100-96gb"), "--gpu"),
    ("missing-gpu", _without(MFU, "--gpu"), "--gpu"),
    ("missing-gpus", _without(MFU, "--gpus"), "--gpus"),
    ("unknown-model", _with(_without(MFU, "--params"), "--model", "gpt5"), "--model"),
    ("params-and-model", _with(MFU, "--model", "llama3-8b"), "--params"),
    ("neither-params-nor-model", _without(MFU, "--params"), "--params"),
    ("no-throughput", _without(MFU, "--tokens-per-s"), "--tokens-per-s"),
    ("tokens-and-step-time", [*MFU, "--step-time-s", "1", "--global-batch", "8"], "--tokens-per-s"),
    (
        "step-time-without-seq-len",
        [*_without(MFU, "--tokens-per-s"), "--step-time-s", "1", "--global-batch", "8"],
        "--seq-len",
    ),
    (
        "step-time-negative",
        [*_without(MFU, "--tokens-per-s"), "--step-time-s", "-1", "--global-batch", "8"],
        "--step-time-s",
    ),
    ("fp8-on-a100", [*MFU, "--dtype", "fp8"], "--dtype"),
    ("dtype-unknown", [*MFU, "--dtype", "fp4"], "--dtype"),
    ("recompute-unknown", [*MFU, "--recompute", "some"], "--recompute"),
    (
        "seq-len-zero",
        _with(_with(_without(MFU, "--params"), "--model", "llama3-8b"), "--seq-len", "0"),
        "--seq-len",
    ),
    ("unknown-flag", [*MFU, "--frobnicate"], "--frobnicate"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
    ("presets-bad-flag", ["presets", "--yaml"], "--yaml"),
    ("run-samples-zero", ["run", "--samples", "0"], "--samples"),
    ("run-samples-word", ["run", "--samples", "ten"], "--samples"),
    ("run-samples-absurd", ["run", "--samples", "10000000"], "--samples"),
    ("run-seed-word", ["run", "--seed", "abc"], "--seed"),
    ("run-seed-negative", ["run", "--seed", "-1"], "--seed"),
    ("run-comm-model", ["run", "--comm-model", "magic"], "--comm-model"),
    ("run-plot-not-a-picture", ["run", "--plot", "out.txt"], "--plot"),
    ("run-plot-no-suffix", ["run", "--plot", "3.5"], "--plot"),
    ("sweep-plot-not-a-picture", ["sweep", "x.toml", "--plot", "out.csv"], "--plot"),
    ("sweep-missing-scenario", ["sweep"], "scenario"),
    ("sweep-jobs-zero", ["sweep", "x.toml", "--jobs", "0"], "--jobs"),
    ("sweep-top-negative", ["sweep", "x.toml", "--top", "-3"], "--top"),
    ("topo-gpus-zero", ["topo", "dgx-a100", "--gpus", "0"], "--gpus"),
]


@pytest.mark.parametrize("argv", [c[1] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_bad_flag(argv: list[str], run_cli) -> None:
    needle = dict((tuple(c[1]), c[2]) for c in FLAG_CASES)[tuple(argv)]
    res = run_cli(argv)
    assert_user_error(res, needle)
    assert res.out == ""


def test_no_command_is_usage_error(run_cli) -> None:
    res = run_cli([])
    assert res.code == 2 and "Traceback" not in res.err


def test_help_exits_zero(run_cli) -> None:
    assert run_cli(["--help"]).code == 0
    assert run_cli(["mfu", "--help"]).code == 0


# ----------------------------------------------------------------------------- topologies via `mfusim topo`
def test_topo_unknown_name(run_cli) -> None:
    assert_user_error(run_cli(["topo", "dgx-z9000"]), "dgx-z9000")


def test_topo_bad_file(write_file: Callable[..., Path], run_cli) -> None:
    path = write_file(TOPOLOGY.replace("nic_Gbps = 400", "nic_Gbps = -1"), "t.toml")
    assert_user_error(run_cli(["topo", str(path)]), "t.toml", "nic_Gbps")


def test_topo_directory(tmp_path: Path, run_cli) -> None:
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert_user_error(run_cli(["topo", str(folder)]), "dir.toml")


# ----------------------------------------------------------------------------- output paths
def test_check_writable_rejects_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        check_writable("/nonexistent/dir/x.json", "--trace")
    assert "--trace" in str(info.value) and "/nonexistent/dir" in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_writable(str(tmp_path), "--out")
    assert "directory" in str(info.value) and "--out" in str(info.value)
    ok = check_writable(str(tmp_path / "fine.csv"), "--out")
    assert ok.parent == tmp_path


@pytest.mark.skipif(IS_ROOT or os.name != "posix", reason="root writes anywhere")
def test_check_writable_read_only_dir(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError) as info:
            check_writable(str(ro / "x.json"), "--trace")
        assert "--trace" in str(info.value)
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("flag", ["--trace", "--plot"])
def test_run_output_to_missing_dir(flag: str, write_file: Callable[..., Path], run_cli) -> None:
    path = write_file(SMALL_SCENARIO)
    target = "/nonexistent/dir/x.json" if flag == "--trace" else "/nonexistent/dir/x.png"
    assert_user_error(run_cli(["run", str(path), flag, target]), flag, "/nonexistent/dir")


def test_run_trace_to_directory(write_file: Callable[..., Path], tmp_path: Path, run_cli) -> None:
    path = write_file(SMALL_SCENARIO)
    assert_user_error(run_cli(["run", str(path), "--trace", str(tmp_path)]), "--trace")


def test_sweep_out_to_directory(write_file: Callable[..., Path], tmp_path: Path, run_cli) -> None:
    data = scenario_dict()
    data["sweep"] = {"tp": [1, 2]}
    path = write_file(dump_toml(data))
    assert_user_error(run_cli(["sweep", str(path), "--out", str(tmp_path)]), "--out")


def test_validate_out_to_directory(tmp_path: Path, run_cli) -> None:
    assert_user_error(run_cli(["validate", "--out", str(tmp_path)]), "--out")


def test_validate_bad_csv(write_file: Callable[..., Path], run_cli) -> None:
    path = write_file(b"\x00\x01\x02binary", "runs.csv")
    assert_user_error(run_cli(["validate", str(path)]), "runs.csv")


# ----------------------------------------------------------------------------- internal errors
def test_internal_error_is_one_line_exit_1(monkeypatch: pytest.MonkeyPatch, run_cli) -> None:
    """A bug (not a user error) prints one 'internal error' line and exits 1, not 2."""
    from simulator import cli

    def boom(args: object) -> int:
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setitem(cli.COMMANDS, "presets", boom)
    res = run_cli(["presets"])
    assert res.code == 1
    assert "Traceback" not in res.err
    assert len(res.err.splitlines()) == 1
    assert "internal error" in res.err and "ZeroDivisionError" in res.err and "report" in res.err


def test_internal_error_traceback_on_request(monkeypatch: pytest.MonkeyPatch, run_cli) -> None:
    from simulator import cli

    def boom(args: object) -> int:
        raise KeyError("x")

    monkeypatch.setitem(cli.COMMANDS, "presets", boom)
    monkeypatch.setenv("MFUSIM_DEBUG", "1")
    res = run_cli(["presets"])
    assert res.code == 1 and "Traceback" in res.err


def test_messages_are_one_printable_line() -> None:
    assert one_line("a\nb\x00c\x1b[31m") == "a b\\x00c\\x1b[31m"


# ----------------------------------------------------------------------------- odd paths
@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        ("/dev/null", "regular file"),
        ("/dev/zero", "regular file"),
        ("", "empty scenario path"),
        ("-", "no such file"),
    ],
    ids=["dev-null", "dev-zero", "empty-path", "dash"],
)
def test_special_paths(arg: str, needle: str, run_cli) -> None:
    if arg.startswith("/dev/") and not Path(arg).exists():
        pytest.skip(f"{arg} not on this system")
    res = run_cli(["run", arg, "--json"])
    assert_user_error(res, needle)


def test_newline_in_file_name_stays_one_line(tmp_path: Path, run_cli) -> None:
    res = run_cli(["run", str(tmp_path / "a\nb.toml"), "--json"])
    assert_user_error(res, "no such file")


def test_fused_attention_refuses_head_dim_above_256() -> None:
    """FlashAttention-2/-3 and cuDNN take head dimensions up to 256 (specs.MAX_FUSED_ATTENTION_HEAD_DIM):
    a wider head is refused naming kernels.attention, named or the GPU's default; unfused runs it."""
    from simulator.loading import scenario_from_dict

    base = {
        "name": "wide heads",
        "model": {"layers": 2, "hidden": 1024, "heads": 2, "vocab": 32000, "seq_len": 2048},
        "cluster": {"topology": "dgx-a100", "num_gpus": 8},
        "parallel": {"global_batch": 8},
    }
    for kernels in ({}, {"attention": "fa2"}, {"attention": "cudnn"}):
        with pytest.raises(ConfigError) as err:
            scenario_from_dict({**base, "kernels": kernels})
        assert err.value.key == "kernels.attention" and "512" in err.value.message
    assert scenario_from_dict({**base, "kernels": {"attention": "unfused"}}).model.dim_per_head == 512
    ok = {**base, "model": {**base["model"], "heads": 4}}  # head dim 256: the widest fused one
    assert scenario_from_dict(ok).model.dim_per_head == 256
