"""`mfusim whatif`: the seed's levers, built, simulated, ranked, and the bottleneck named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main, scenario_path
from simulator.loading import load_scenario, scenario_from_dict
from simulator.specs import Scenario
from simulator.whatif import _Variant, analyze, candidate_variants, lever_phrase, padded_shapes, whatif

SMALL_MODEL = {"preset": "gpt3-175b", "layers": 24, "hidden": 2048, "heads": 16, "seq_len": 2048}

DATALOADER_BOUND = {
    "name": "dataloader-bound",
    "model": SMALL_MODEL,
    "cluster": {"topology": "dgx-a100", "num_gpus": 16},
    "parallel": {"tp": 1, "pp": 2, "micro_batch": 4, "global_batch": 256},
    "dataloader": {"microbatch_latency_ms": 1000.0, "workers": 2, "prefetch": 2},
}
DATALOADER_BOUND_NO_PP = {
    **DATALOADER_BOUND,
    "name": "dataloader-bound, no pipeline",
    "parallel": {"tp": 1, "pp": 1, "micro_batch": 4, "global_batch": 4096},
}
BUBBLE_HEAVY = {
    "name": "bubble-heavy",
    "model": SMALL_MODEL,
    "cluster": {"topology": "dgx-a100", "num_gpus": 32},
    "parallel": {"tp": 4, "pp": 8, "micro_batch": 1, "global_batch": 8, "sequence_parallel": True},
}


def scn(d: dict) -> Scenario:
    return scenario_from_dict(d)


# ----------------------------------------------------------------------------- levers (no engine)
def test_every_seed_lever_is_listed_with_a_reason_when_skipped() -> None:
    variants = candidate_variants(load_scenario(scenario_path(None)))
    keys = {v.key for v in variants}
    for key in (
        "microbatches_x2_global",
        "interleave_vp2",
        "interleave_vp3",
        "interleave_vp4",
        "enable_overlap_grad_reduce",
        "enable_tp_comm_overlap",
        "sequence_parallel",
        "recompute_selective",
        "network_x2",
        "dataloader_x4",
        "dataloader_free",
        "flash_attention",
        "pad_shapes",
    ):
        assert key in keys, key
    for v in variants:
        if v.build is None:
            assert v.skipped, v.key
        else:
            built = v.build()  # a valid, frozen Scenario
            assert isinstance(built, Scenario)
            assert v.change


def test_levers_change_what_they_say() -> None:
    base = load_scenario(scenario_path(None))
    by_key = {v.key: v for v in candidate_variants(base)}
    vp3 = by_key["interleave_vp3"].build()
    assert (vp3.parallel.vp, vp3.parallel.schedule) == (3, "interleaved")
    net = by_key["network_x2"].build()
    assert (
        net.topology.inter_node.nic_bandwidth_bytes_per_s
        == 2 * base.topology.inter_node.nic_bandwidth_bytes_per_s
    )
    gb = by_key["microbatches_x2_global"].build()
    assert gb.parallel.num_microbatches == 2 * base.parallel.num_microbatches
    assert by_key["dataloader_x4"].build is None  # the default has no dataloader latency
    dl = {v.key: v for v in candidate_variants(scn(DATALOADER_BOUND))}
    assert dl["dataloader_x4"].build().dataloader.microbatch_latency_s == pytest.approx(0.25)
    assert dl["dataloader_free"].build().dataloader.microbatch_latency_s == 0.0


def test_no_recomputation_lever_drops_the_recompute_modules() -> None:
    """Selective recomputation by module (issue 13): the "no recomputation" lever clears the
    module list too (recompute_modules needs recompute = "selective"), so it builds."""
    d = {
        **BUBBLE_HEAVY,
        "parallel": {
            **BUBBLE_HEAVY["parallel"],
            "recompute": "selective",
            "recompute_modules": ["layernorm"],
        },
    }
    built = {v.key: v for v in candidate_variants(scn(d))}["recompute_none"].build()
    assert (built.parallel.recompute, built.parallel.recompute_modules) == ("none", ())


def test_pipeline_levers_skip_without_a_pipeline() -> None:
    by_key = {v.key: v for v in candidate_variants(scn(DATALOADER_BOUND_NO_PP))}
    assert "pp = 1" in by_key["interleave_vp2"].skipped
    assert "pp = 1" in by_key["microbatches_x2_global"].skipped
    assert "tp = 1" in by_key["sequence_parallel"].skipped


def test_padded_shapes() -> None:
    d = {**DATALOADER_BOUND, "model": {**SMALL_MODEL, "hidden": 2000, "vocab": 50257}}
    pads = padded_shapes(scn(d))
    assert pads == {"hidden": 2048, "ffn_hidden": 8064, "vocab": 50304}
    assert padded_shapes(load_scenario(scenario_path(None))) == {}


def test_lever_phrases() -> None:
    assert lever_phrase("interleave_vp3", "x") == "interleaving with vp=3"
    assert "dataloader" in lever_phrase("dataloader_x4", "x")


# ----------------------------------------------------------------------------- with the engine
def test_dataloader_bound_names_the_dataloader_first() -> None:
    for d in (DATALOADER_BOUND, DATALOADER_BOUND_NO_PP):
        result = analyze(scn(d))
        assert result.bottleneck[0] == "dataloader", d["name"]
        assert result.headline.split(";")[0].endswith(")") or "dataloader" in result.headline.split(";")[0]
        assert "dataloader" in result.headline.split(";")[0]
        first = result.applied[0]
        assert first.key.startswith("dataloader"), (d["name"], first.key)
        assert first.gain is not None and first.gain > 0.05


def test_bubble_heavy_more_microbatches_and_interleaving_gain() -> None:
    result = analyze(scn(BUBBLE_HEAVY))
    assert result.bottleneck[0] == "bubble"
    gains = {lv.key: lv.gain for lv in result.applied}
    # (the per-micro-batch host overhead, issue 12, takes part of what halving the bubble gains)
    assert gains["microbatches_x2_global"] > 0.01
    assert max(g for k, g in gains.items() if k.startswith("interleave")) > 0.01
    head = result.headline
    assert head.split(";")[0].endswith("pipeline bubble")
    assert (
        "interleaving" in head or "micro-batches" in head or "schedule" in head
    )  # ZB/DualPipe levers (issue 14)
    # sorted by predicted MFU, skipped levers last with their reasons
    mfus = [lv.mfu for lv in result.applied]
    assert mfus == sorted(mfus, reverse=True)
    assert all(lv.skipped for lv in result.levers[len(result.applied) :])
    assert whatif(scn(BUBBLE_HEAVY))[0].key == result.applied[0].key


def _write(tmp_path: Path, d: dict) -> Path:
    from simulator.loading import scenario_from_dict as _  # noqa: F401  (same schema)

    lines = [f'name = "{d["name"]}"']
    for table in ("model", "cluster", "parallel", "dataloader"):
        if table not in d:
            continue
        lines.append(f"[{table}]")
        for k, v in d[table].items():
            lines.append(f"{k} = {json.dumps(v)}")
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_whatif_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, DATALOADER_BOUND)
    assert main(["whatif", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "dataloader" in lines[1]  # the headline, right under the baseline line
    assert "lever" in out and "MFU" in out and "gain" in out and "not applicable" in out
    assert main(["whatif", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bottleneck"]["category"] == "dataloader"
    assert data["levers"][0]["key"].startswith("dataloader")
    assert all("skipped" in s for s in data["skipped"])
    assert data["baseline"]["mfu"] < data["levers"][0]["mfu"]


# ---------------------------------------------------------------- memory-aware what-if (issue 17)
def _teaching(headroom_gib: float = 0.0):
    from simulator.loading import load_scenario
    from simulator.resources import data_dir

    return load_scenario(
        data_dir("scenarios") / "teaching-pp4.toml", overrides=[("memory.headroom_gib", headroom_gib)]
    )


def test_headroom_shrinks_the_usable_memory() -> None:
    from simulator.memory import memory_footprint

    full, tight = memory_footprint(_teaching()), memory_footprint(_teaching(70.0))
    assert full.peak_bytes == pytest.approx(tight.peak_bytes)  # the footprint itself is unchanged
    assert full.capacity_bytes - tight.capacity_bytes == pytest.approx(70 * 2**30)
    assert full.fits and not tight.fits  # 12.1 GiB needed: fits in 80, not in 80 - 70


def test_out_of_memory_baseline_gets_the_cheapest_fit_first_and_only_fitting_levers() -> None:
    from simulator.whatif import analyze, cheapest_fit

    result = analyze(_teaching(70.0))
    assert not result.baseline.memory.fits
    fit = cheapest_fit(result.applied)
    assert fit is not None and fit.fits and fit.key.startswith("fit_")
    # the cheapest: no other fitting way keeps more MFU
    assert all(
        (lv.mfu or 0) <= (fit.mfu or 0) for lv in result.applied if lv.key.startswith("fit_") and lv.fits
    )
    assert result.headline.startswith("It does not fit in GPU memory")
    assert result.to_dict()["cheapest_fit"] == fit.key
    assert fit.name in result.headline and f"{100 * (fit.gain or 0):+.1f} points" in result.headline
    # levers that do not fit are listed, marked, and never recommended
    assert any(lv.fits is False for lv in result.applied)
    for lv in result.applied:
        if lv.fits is False:
            assert f"{lv.phrase or lv.name} recovers" not in result.headline


def test_fitting_baseline_headline_never_names_a_lever_that_does_not_fit() -> None:
    from simulator.whatif import _usable, analyze

    result = analyze(_teaching())
    good = _usable(result.applied)
    assert all(lv.fits is not False for lv in good)
    assert not any(lv.key.startswith("fit_") for lv in result.applied)  # it fits: no fit levers


def test_vp_lever_of_an_interleaved_baseline_does_not_repeat_the_schedule() -> None:
    from dataclasses import replace

    from simulator.whatif import candidate_variants

    scn = _teaching()
    scn = replace(scn, parallel=replace(scn.parallel, vp=2, schedule="interleaved"))
    changes = [v.change for v in candidate_variants(scn) if v.key.startswith("interleave_vp") and v.build]
    assert changes and all("interleaved -> interleaved" not in c and "schedule" not in c for c in changes)


def test_light_selective_recompute_lever_sits_between_selective_and_full() -> None:
    """For an out-of-memory MLA + MoE model the fit levers include Megatron-Core's light modules
    (norms, attention core, MLA up-projections, MoE activation: what DeepSeek-V3 recomputes, report
    §3.2.3): less memory than the default selective set, less recompute time than full."""
    from simulator.memory import memory_footprint
    from simulator.simulate import simulate

    base = scn(
        {
            "name": "dsv3-slice",
            "model": {"preset": "deepseek-v3", "layers": 8, "seq_len": 4096},
            "cluster": {"topology": "dgx-h100", "num_gpus": 64},
            "parallel": {"tp": 1, "pp": 2, "ep": 32, "micro_batch": 1, "global_batch": 64},
            "memory": {"headroom_gib": 60.0},
        }
    )
    from simulator.whatif import fit_variants

    variants = {v.key: v for v in fit_variants(base)}
    assert not memory_footprint(base).fits
    light = _built(variants["fit_recompute_light"])
    assert light.parallel.recompute_modules == ("core_attn", "layernorm", "mla_up_proj", "moe_act")
    sel, full = _built(variants["fit_recompute_selective"]), _built(variants["fit_recompute_full"])
    mem = {k: memory_footprint(s).peak_bytes for k, s in (("light", light), ("sel", sel), ("full", full))}
    assert mem["full"] < mem["light"] < mem["sel"] < memory_footprint(base).peak_bytes
    step = {k: simulate(s).report.step_time_s for k, s in (("light", light), ("full", full))}
    assert step["light"] < step["full"]
    # dense models get the norms and the attention core only; full recomputation offers nothing
    dense = scn({**BUBBLE_HEAVY, "memory": {"headroom_gib": 79.2}})  # of 79.26 GiB: does not fit
    dv = {v.key: v for v in fit_variants(dense)}
    assert _built(dv["fit_recompute_light"]).parallel.recompute_modules == ("core_attn", "layernorm")
    full_dense = scn({**BUBBLE_HEAVY, "parallel": {**BUBBLE_HEAVY["parallel"], "recompute": "full"}})
    assert "fit_recompute_light" not in {v.key for v in fit_variants(full_dense)}


def _built(variant: _Variant) -> Scenario:
    if variant.build is None:
        pytest.fail(f"lever {variant.key} is skipped: {variant.skipped}")
    out = variant.build()
    assert isinstance(out, Scenario)
    return out
