"""`[kernels] cuda_graph_impl`, `cuda_graph_modules` and `moe_dispatcher` (issue 13): parsed with
Megatron-Core's own rules (transformer_config.py "Cuda Graphs", moe/README.md "CUDA Graph"); a
combination Megatron refuses, or one mfusim cannot represent, is an error naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.specs import Scenario


def _scn(
    preset: str = "qwen3-30b-a3b", ep: int = 8, parallel: dict[str, Any] | None = None, **kernels: Any
) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset, "layers": 4, "seq_len": 2048},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": ep, "micro_batch": 1, "global_batch": 8, **(parallel or {})},
        "kernels": kernels,
    }
    return scenario_from_dict(data)


def test_defaults_are_eager_alltoall() -> None:
    k = _scn().kernels
    assert (k.cuda_graph_impl, k.cuda_graph_modules, k.moe_dispatcher) == ("none", (), "alltoall")


def test_modules_are_canonical_tuples_each_once() -> None:
    k = _scn(cuda_graph_impl="transformer_engine", cuda_graph_modules=["ATTN", "moe_router", "attn"]).kernels
    assert k.cuda_graph_modules == ("attn", "moe_router")


def test_local_graphs_router_and_preprocess_together_as_megatron_does() -> None:
    """Megatron-Core's local implementation adds the missing one of moe_router/moe_preprocess."""
    k = _scn(cuda_graph_impl="local", cuda_graph_modules=["moe_preprocess"]).kernels
    assert set(k.cuda_graph_modules) == {"moe_router", "moe_preprocess"}


@pytest.mark.parametrize(
    ("kernels", "key", "words"),
    [
        ({"cuda_graph_impl": "fulliter"}, "kernels.cuda_graph_impl", "full_iteration"),
        ({"moe_dispatcher": "flex"}, "kernels.moe_dispatcher", "deepep"),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["mamba"]},
            "kernels.cuda_graph_modules",
            "Mamba",
        ),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": "attn"},
            "kernels.cuda_graph_modules",
            "list",
        ),
        ({"cuda_graph_modules": ["attn"]}, "kernels.cuda_graph_modules", "cuda_graph_impl"),
        (
            {"cuda_graph_impl": "local", "cuda_graph_modules": ["moe"]},
            "kernels.cuda_graph_modules",
            "drop-and-pad",
        ),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn", "moe_preprocess"]},
            "kernels.cuda_graph_modules",
            "moe_router",
        ),
        ({"cuda_graph_impl": "transformer_engine"}, "kernels.cuda_graph_modules", "dropless"),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["mlp"]},
            "kernels.cuda_graph_modules",
            "MoE",
        ),
        (
            {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": ["attn"]},
            "kernels.cuda_graph_modules",
            "empty",
        ),
        ({"cuda_graph_impl": "full_iteration"}, "kernels.cuda_graph_impl", "hybridep"),
    ],
)
def test_impossible_choices_are_refused_naming_the_key(kernels: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _scn(**kernels)
    assert err.value.key == key
    assert words in err.value.message


def test_dense_models_refuse_moe_only_choices() -> None:
    with pytest.raises(ConfigError) as err:
        _scn("llama3-8b", ep=1, moe_dispatcher="deepep")
    assert err.value.key == "kernels.moe_dispatcher"
    with pytest.raises(ConfigError) as err:
        _scn("llama3-8b", ep=1, cuda_graph_impl="local", cuda_graph_modules=["attn", "moe_router"])
    assert err.value.key == "kernels.cuda_graph_modules"
    # a whole-layer graph of a dense layer is fine
    assert _scn("llama3-8b", ep=1, cuda_graph_impl="transformer_engine").kernels.cuda_graph_modules == ()


def test_per_layer_graphs_refuse_full_recompute_as_megatron_does() -> None:
    with pytest.raises(ConfigError) as err:
        _scn(
            cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"], parallel={"recompute": "full"}
        )
    assert err.value.key == "kernels.cuda_graph_impl"


def test_full_iteration_needs_the_sync_free_dispatch_on_moe() -> None:
    scn = _scn(cuda_graph_impl="full_iteration", moe_dispatcher="hybridep", fused_grouped_mlp=True)
    assert scn.kernels.cuda_graph_impl == "full_iteration"
    assert (
        _scn("llama3-8b", ep=1, cuda_graph_impl="full_iteration").kernels.cuda_graph_impl == "full_iteration"
    )


def test_cli_set_and_json_report_the_keys(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(
        '[model]\npreset = "qwen3-30b-a3b"\nlayers = 4\nseq_len = 2048\n'
        '[cluster]\ntopology = "dgx-h100"\nnum_gpus = 8\n[parallel]\nep = 8\nglobal_batch = 8\n',
        encoding="utf-8",
    )
    base = [sys.executable, "-m", "simulator", "run", str(f), "--json"]
    ok = subprocess.run(
        [
            *base,
            "--set",
            "kernels.cuda_graph_impl=transformer_engine",
            "--set",
            'kernels.cuda_graph_modules=["attn","moe_router"]',
            "--set",
            "kernels.moe_dispatcher=deepep",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    k = json.loads(ok.stdout)["kernels"]
    assert (k["cuda_graph_impl"], k["cuda_graph_modules"], k["moe_dispatcher"]) == (
        "transformer_engine",
        ["attn", "moe_router"],
        "deepep",
    )
    bad = subprocess.run(
        [*base, "--set", "kernels.moe_dispatcher=nccl"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "kernels.moe_dispatcher" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
