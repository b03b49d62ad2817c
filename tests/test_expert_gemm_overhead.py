"""The eager per-expert GEMM residual (GPUEfficiency.expert_gemm_overhead_s, issue 13; program.py
EXPERT_GEMM_OVERHEAD_NOTE, docs/calibration.md "Level 2"): where it is charged and where not, that
a step never gets faster when it grows, that the step's breakdown still adds up, and that the
fitted values in efficiency.toml lie in the documented physical range."""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from typing import Any

import pytest

from simulator.comm import default_comm_model
from simulator.loading import scenario_from_dict
from simulator.metrics import software_stack
from simulator.program import EXPERT_GEMM_OVERHEAD_NAME, _Coster, eager_expert_gemms
from simulator.resources import catalog_file
from simulator.simulate import simulate
from simulator.specs import EXPERT_GEMM_OVERHEAD_RANGE_S, GPUEfficiency, Scenario

SEQ, EP, MB = 4096, 8, 2
LOW, HIGH = EXPERT_GEMM_OVERHEAD_RANGE_S


def _scn(
    fused: bool = False, dtype: str = "mxfp8", preset: str = "qwen3-30b-a3b", **kernels: Any
) -> Scenario:
    moe = preset != "llama3-8b"
    data: dict[str, Any] = {
        "model": {"preset": preset, "seq_len": SEQ, "layers": 4},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"ep": EP if moe else 1, "micro_batch": MB, "global_batch": 8 * MB},
        "precision": {"dtype": dtype},
        "kernels": {"fused_grouped_mlp": fused, **({"moe_dispatcher": "hybridep"} if moe else {}), **kernels},
    }
    if moe:
        data["model"]["moe"] = {"load_imbalance": 1.0}
    return scenario_from_dict(data)


def _with(scn: Scenario, overhead_s: float) -> Scenario:
    eff = replace(scn.gpu.efficiency, expert_gemm_overhead_s=overhead_s)
    return replace(scn, topology=replace(scn.topology, gpu=replace(scn.gpu, efficiency=eff)))


def _layer_parts(scn: Scenario, moe: bool = True) -> list[Any]:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, b_w, _, _ = coster.layer(moe)
    return [*fwd.parts, *b_in.parts, *b_w.parts]


def _overhead_s(parts: list[Any]) -> float:
    return sum(p.duration_s for p in parts if p.name.startswith(EXPERT_GEMM_OVERHEAD_NAME))


def test_charged_per_eager_expert_gemm() -> None:
    """Eager GroupedLinear: fc1 and fc2, each of forward/dgrad/wgrad, per local expert -- 6 x E/ep
    GEMMs per MoE layer and micro-batch, each charged X, in segments of its own on the compute stream."""
    x = 20e-6
    scn = _with(_scn(), x)
    local = scn.model.num_experts // EP
    assert eager_expert_gemms(scn) == 6 * local
    parts = _layer_parts(scn)
    overhead = [p for p in parts if p.name.startswith(EXPERT_GEMM_OVERHEAD_NAME)]
    assert len(overhead) == 6 and all(p.category == "compute" and p.flops == 0 for p in overhead)
    assert _overhead_s(parts) == pytest.approx(6 * local * x, rel=1e-12)
    # the GEMMs themselves are costed as before: the residual only adds GPU time (the exposed host
    # issue, `host_bound`, can only shrink behind a longer GPU segment)
    base = _layer_parts(_with(scn, 0.0))

    def gpu_s(ps: list[Any]) -> float:
        return sum(p.duration_s for p in ps if p.category != "host_bound")

    def host_s(ps: list[Any]) -> float:
        return sum(p.duration_s for p in ps if p.category == "host_bound")

    assert gpu_s(parts) - gpu_s(base) == pytest.approx(6 * local * x, rel=1e-9)
    assert host_s(parts) <= host_s(base)


@pytest.mark.parametrize(
    "scn",
    [
        pytest.param(_scn(fused=True), id="fused grouped MLP"),
        pytest.param(
            _scn(fused=True, cuda_graph_impl="full_iteration"),
            id="full-iteration graph (needs the fused MLP)",
        ),
        pytest.param(_scn(preset="llama3-8b", dtype="bf16"), id="dense model"),
    ],
)
def test_not_charged_off_the_eager_path(scn: Scenario) -> None:
    """No per-expert host loop on TE's fused grouped MLP (grouped-tensor kernels, also what a
    full-iteration MoE graph runs) and none in a dense model: the step does not depend on X."""
    assert eager_expert_gemms(scn) == 0
    low, high = simulate(_with(scn, LOW)).report, simulate(_with(scn, HIGH)).report
    assert high.step_time_s == low.step_time_s
    assert _overhead_s(_layer_parts(_with(scn, HIGH), scn.model.is_moe)) == 0.0


def test_dense_layers_of_a_moe_model_pay_nothing() -> None:
    """DeepSeek-V3's first dense layers run a TE MLP (one GEMM per pass): no residual there."""
    scn = _with(_scn(), HIGH)
    assert _overhead_s(_layer_parts(scn, moe=False)) == 0.0
    assert _overhead_s(_layer_parts(scn, moe=True)) > 0.0


def test_step_monotone_in_the_overhead_and_breakdown_adds_up() -> None:
    scn = _scn()
    steps = []
    for x in (0.0, 5e-6, 17.5e-6, 30e-6, HIGH):
        report = simulate(_with(scn, x)).report
        steps.append(report.step_time_s)
        assert sum(report.breakdown_s.values()) == pytest.approx(report.step_time_s, rel=1e-9)
    assert all(b >= a for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1] > steps[0]  # it acts on the eager path


def test_json_names_it() -> None:
    """`run --json`: kernels.system carries the GPU's value, kernels.expert_gemm_overhead what this
    MoE step pays (absent for a dense model)."""
    scn = _with(_scn(), 25e-6)
    out = software_stack(scn)
    detail = out["expert_gemm_overhead"]
    assert out["system"]["expert_gemm_overhead_s"] == 25e-6
    assert detail["eager_path"] and detail["per_gemm_s"] == 25e-6
    assert detail["per_moe_layer_microbatch_s"] == pytest.approx(
        detail["gemms_per_moe_layer_microbatch"] * 25e-6
    )
    fused = software_stack(_with(_scn(fused=True), 25e-6))["expert_gemm_overhead"]
    assert not fused["eager_path"] and fused["per_moe_layer_microbatch_s"] == 0.0
    assert "expert_gemm_overhead" not in software_stack(_scn(preset="llama3-8b", dtype="bf16"))


def test_catalog_values_in_their_physical_range() -> None:
    """Every expert_gemm_overhead_s of efficiency.toml (fitted stack tables, per-GPU tables, the
    prior) lies in the documented range; the prior is its middle, as the dataclass default."""
    with open(catalog_file("efficiency.toml"), "rb") as fh:
        data = tomllib.load(fh)
    values = {}
    for name, table in data.items():
        if name == "stacks":
            for stack, archs in table.items():
                for arch, t in archs.items():
                    if "expert_gemm_overhead_s" in t:
                        values[f"stacks.{stack}.{arch}"] = t["expert_gemm_overhead_s"]
        elif "expert_gemm_overhead_s" in table:
            values[name] = table["expert_gemm_overhead_s"]
    assert {"default", "stacks.megatron-core.hopper", "stacks.megatron-core.blackwell", "b200"} <= set(values)
    for name, value in values.items():
        assert LOW <= value <= HIGH, name
    assert values["default"] == pytest.approx((LOW + HIGH) / 2)
    assert GPUEfficiency().expert_gemm_overhead_s == pytest.approx(values["default"])
    # the per-GPU default-stack tables carry their architecture's fit
    hopper, blackwell = values["stacks.megatron-core.hopper"], values["stacks.megatron-core.blackwell"]
    assert values["h100-sxm"] == hopper and values["h200"] == hopper
    assert values["b200"] == blackwell and values["gb300"] == blackwell


def test_refused_when_negative() -> None:
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError, match="expert_gemm_overhead_s"):
        GPUEfficiency(expert_gemm_overhead_s=-1e-6)
    with pytest.raises(ConfigError, match="expert_gemm_overhead_s"):
        GPUEfficiency(expert_gemm_overhead_s=math.nan)


# ----------------------------------------------------------------------------- calibrate.py's MoE stage
def _calibrate() -> Any:
    from tests.conftest import load_benchmark

    return load_benchmark("calibrate", "mfusim_calibrate")


def test_moe_stage_param_is_the_documented_range() -> None:
    C = _calibrate()
    assert (C.MOE_PARAM.low, C.MOE_PARAM.high) == EXPERT_GEMM_OVERHEAD_RANGE_S
    assert C.MOE_PARAM.name not in {p.name for p in C.PARAMS}  # the dense stage never moves it
    # the dense stage's trial points keep the MoE residual of their start
    eff = GPUEfficiency(sustained_clock_fraction=0.9, expert_gemm_overhead_s=12e-6)
    assert C.decode(C.encode(eff), eff).expert_gemm_overhead_s == 12e-6


def test_moe_only_rewrites_its_lines_and_tables(tmp_path) -> None:
    """`--moe-only` writes the MoE stage's lines into the group's [stacks.*] table (its dense
    residuals and header untouched), the per-GPU tables taking a value from it, and nothing else;
    twice gives the same file."""
    C = _calibrate()
    toml = tmp_path / "efficiency.toml"
    original = catalog_file("efficiency.toml").read_text(encoding="utf-8")
    toml.write_text(original, encoding="utf-8")
    moe = C.MoeFit(
        "megatron-core/hopper", 17.5e-6, 21e-6, 20.0, 21.0, 10.0, 11.0, 12, 10, 22, 30, 1.0, ("h100-sxm",)
    )
    C.write_moe([moe], toml)
    once = toml.read_text(encoding="utf-8")
    C.write_moe([moe], toml)
    assert toml.read_text(encoding="utf-8") == once
    before, after = tomllib.loads(original), tomllib.loads(once)
    hopper = after["stacks"]["megatron-core"]["hopper"]
    assert hopper["expert_gemm_overhead_s"] == pytest.approx(21e-6)
    for key, value in before["stacks"]["megatron-core"]["hopper"].items():
        if key != "expert_gemm_overhead_s":
            assert hopper[key] == value
    for gpu in ("h100-sxm", "h200", "a100-80gb"):  # Ampere takes the stack's framework residuals
        assert after[gpu]["expert_gemm_overhead_s"] == pytest.approx(21e-6)

    def table(text: str, header: str) -> str:
        start = text.index(f"\n[{header}]\n")
        end = text.find("\n[", start + 1)
        return text[start : end if end > 0 else len(text)]

    for header in (
        "default",
        "stacks.megatron-core.blackwell",
        "stacks.composer-fsdp.ampere",
        "b200",
        "gb300",
    ):
        assert table(once, header) == table(original, header)


def test_full_fit_writes_both_stages_and_moe_only_replaces_them(tmp_path) -> None:
    """A full refit's table holds the dense residuals and the MoE stage's lines; a later
    `--moe-only` replaces the MoE lines in place (one value, one block)."""
    C = _calibrate()
    toml = tmp_path / "efficiency.toml"
    toml.write_text(catalog_file("efficiency.toml").read_text(encoding="utf-8"), encoding="utf-8")
    eff = GPUEfficiency(sustained_clock_fraction=0.9, expert_gemm_overhead_s=30e-6)
    moe = C.MoeFit(
        "megatron-core/hopper", 17.5e-6, 30e-6, 20.0, 21.0, 10.0, 11.0, 12, 10, 22, 30, 1.0, ("h100-sxm",)
    )
    res = C.FitResult(
        "megatron-core/hopper", GPUEfficiency(), eff, 9.0, 6.0, 8.0, 5.0, 23, 20, 100, 1.0, moe=moe
    )
    C.write_efficiency([res], toml, only=True)
    C.write_moe([replace(moe, value=12e-6)], toml)
    text = toml.read_text(encoding="utf-8")
    hopper = tomllib.loads(text)["stacks"]["megatron-core"]["hopper"]
    assert hopper["sustained_clock_fraction"] == pytest.approx(0.9)
    assert hopper["expert_gemm_overhead_s"] == pytest.approx(12e-6)
    start = text.index("[stacks.megatron-core.hopper]")
    section = text[start : text.index("\n[", start)]
    assert section.count(C.MOE_BLOCK_START) == 1 and section.count("expert_gemm_overhead_s =") == 1
    assert tomllib.loads(text)["h100-sxm"]["expert_gemm_overhead_s"] == pytest.approx(12e-6)


def test_recomputed_experts_pay_their_forward_residual_again() -> None:
    """`recompute_modules = ["moe"]` re-runs the experts' eager forward: its two GroupedLinear
    calls, and so their per-GEMM residual, once more (as recompute)."""
    data: dict[str, Any] = {
        "model": {"preset": "qwen3-30b-a3b", "seq_len": SEQ, "layers": 4, "moe": {"load_imbalance": 1.0}},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": MB, "global_batch": 8 * MB, "recompute": "selective"},
        "precision": {"dtype": "mxfp8"},
        "kernels": {"moe_dispatcher": "hybridep"},
    }
    data["parallel"]["recompute_modules"] = ["moe"]
    x = 20e-6
    scn = _with(scenario_from_dict(data), x)
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    rec = coster.layer(True)[3]
    again = [p for p in rec.parts if p.name.startswith(EXPERT_GEMM_OVERHEAD_NAME)]
    assert {p.category for p in again} == {"recompute"}
    assert sum(p.duration_s for p in again) == pytest.approx(2 * (scn.model.num_experts // EP) * x)
