"""The held-out runs as the hidden checker can write them: SPEC §1/§2/§7 names only.

benchmarks/heldout_spec_only.py reduces every held-out scenario to the contract's names. A
SPEC-valid scenario must run: this checks that each reduction loads and simulates (no exception,
no refusal), and that the reduction keeps exactly the contract's names.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

import mfusim
from simulator import loading
from simulator.loading import scenario_from_dict
from simulator.specs import KernelOptions, MemoryOptions
from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
HELDOUT_DIRS = tuple(sorted(p for p in (ROOT / "scenarios").glob("heldout*") if p.is_dir()))


def _spec_module():
    return load_benchmark("heldout_spec_only", "mfusim_heldout_spec_only")


def _leaves(table: dict, prefix: str = "") -> list[str]:
    out = []
    for key, sub in table.items():
        if isinstance(sub, dict):
            out += _leaves(sub, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def test_every_spec_name_is_a_scenario_key_the_loader_accepts() -> None:
    """A name of SPEC §1/§2/§7 the loader does not know would make a SPEC-valid file an error."""
    accepted = {
        "model": set(loading.MODEL_KEYS) | {"preset", "hf_config", "name", "allow_unmodeled"},
        "model.moe": set(loading.MOE_KEYS),
        "model.mla": set(loading.MLA_KEYS),
        "cluster": set(loading.CLUSTER_KEYS),
        "cluster.intra_node": set(loading.INTRA_KEYS),
        "cluster.inter_node": set(loading.INTER_KEYS),
        "parallel": set(loading.PARALLEL_KEYS),
        "precision": {"dtype", "fp8_param_gather", "fp8_recipe"},
        "dataloader": {"microbatch_latency_ms", "workers", "prefetch", "jitter", "seed"},
        "kernels": {f.name for f in fields(KernelOptions)},
        "memory": {f.name for f in fields(MemoryOptions)},
    }
    spec = _spec_module().SPEC_KEYS
    assert set(spec) <= set(loading.SCENARIO_KEYS)
    leaves = _leaves(spec)
    assert len(leaves) > 50
    for dotted in leaves:
        section, _, key = dotted.rpartition(".")
        if section:
            assert key in accepted[section], dotted


def test_spec_only_keeps_the_contracts_names_and_drops_the_rest() -> None:
    mod = _spec_module()
    data = {
        "name": "x",
        "model": {"preset": "llama3-8b", "activation": "squared_relu", "moe": {"layer_interval": 2}},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8, "inter_node": {"nic_Gbps": 400, "tiers": 3}},
        "parallel": {"tp": 8, "local_batch": 4, "etp": 1},
        "precision": {"dtype": "fp8", "fp8_recipe": "current"},
        "kernels": {"cross_entropy": "te", "attention": "cudnn"},
        "memory": {"sharded_grad_dtype": "fp32"},
    }
    kept, dropped = mod.spec_only(data)
    assert kept == {
        "name": "x",
        "model": {"preset": "llama3-8b"},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8, "inter_node": {"nic_Gbps": 400}},
        "parallel": {"tp": 8, "etp": 1},
        "precision": {"dtype": "fp8"},
        "kernels": {"attention": "cudnn"},
    }
    assert sorted(dropped) == sorted(
        [
            "model.activation",
            "model.moe.layer_interval",
            "cluster.inter_node.tiers",
            "parallel.local_batch",
            "precision.fp8_recipe",
            "kernels.cross_entropy",
            "memory.sharded_grad_dtype",
        ]
    )
    # one key at a time: the rest stays, an emptied table goes
    assert mod.without(data, "memory.sharded_grad_dtype") == {k: v for k, v in data.items() if k != "memory"}
    assert mod.without(data, "parallel.local_batch")["parallel"] == {"tp": 8, "etp": 1}
    assert data["parallel"] == {"tp": 8, "local_batch": 4, "etp": 1}  # not mutated


@pytest.mark.parametrize("directory", HELDOUT_DIRS, ids=lambda p: p.name)
def test_every_heldout_scenario_runs_with_spec_names_only(directory: Path) -> None:
    """Each held-out scenario, reduced to the contract's names, loads and simulates: the checker
    writes only these names, and a SPEC-valid file must not be refused."""
    mod = _spec_module()
    spec_names = set(_leaves(mod.SPEC_KEYS))
    paths = sorted(p for p in directory.glob("*.toml") if p.stem != "measured")
    assert paths
    for path in paths:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        reduced, _ = mod.spec_only(raw)
        for dotted in _leaves(reduced):
            assert dotted in spec_names or dotted.split(".")[0] in ("run", "sweep"), (path.name, dotted)
        report = mfusim.simulate(scenario_from_dict(reduced, base_dir=directory, source=str(path)))
        assert report.step_time_s > 0 and math.isfinite(report.step_time_s), path.name
        assert 0 < report.mfu < 1, path.name
        assert math.isclose(sum(report.breakdown_s.values()), report.step_time_s, rel_tol=1e-6), path.name
