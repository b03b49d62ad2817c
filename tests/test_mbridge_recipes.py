"""Megatron-Bridge MoE launch recipes per container release in `mfusim validate`
(simulator/catalog/mbridge_recipes.toml, issue 13): an entry applies only to a row of the same
container whose whole layout equals it; a row of another container gets that container's entry
or a stated reason, never a neighbour's recipe; every entry is a scenario the simulator accepts."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from simulator import validate as V
from simulator.resources import published_runs_csv
from simulator.validate.recipes import LAYOUT_KEYS, container_of, parse_catalog, recipe_for, recipes
from tests.conftest import fake_simulate


@pytest.fixture(scope="module")
def shipped() -> dict[str, V.PublishedRun]:
    return {r.run_id: r for r in V.read_runs_csv(published_runs_csv())}


def _case(shipped: dict[str, V.PublishedRun], run_id: str) -> V.Case:
    case = V.build_case(shipped[run_id])
    assert isinstance(case, V.Case), case
    return case


def _recipe_lines(case: V.Case) -> list[str]:
    return [a for a in case.assumptions if a.startswith("recipe:")]


def test_recipe_of_the_same_layout_is_applied(shipped):
    """DeepSeek-V3 on 256 B200, container 26.04.01 (Megatron-Bridge v0.4.2): pp 8, vp 2, ep 32 is
    B200_FP8_MX_V2 (moe_a2a_overlap, recompute mla_up_proj + mlp, DeepEP, TE-graphed attention
    and router)."""
    case = _case(shipped, "mbridge_26.04.01_DeepSeekV3_DGX-B200_256gpu_mxfp8")
    par = case.scenario["parallel"]
    assert par["ep_comm_overlap"] is True
    assert par["recompute"] == "selective"
    assert par["recompute_modules"] == ["mla_up_proj", "mlp"]
    lines = _recipe_lines(case)
    assert "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (v0.4.2 c81012934, container 26.04.01" in lines[0]
    assert "moe_dispatcher = deepep" in lines[0] and "cuda_graph_impl = transformer_engine" in lines[0]
    assert "shared_expert_overlap = false" in lines[0]  # simulated ([parallel] shared_expert_overlap)
    assert not any("moe_shared_expert_overlap" in line for line in lines)
    # the published split is kept for the data-spread grouping
    assert case.published_parallel is not None and case.published_parallel["recompute"] == "none"
    scn = V.scenario_for(case)
    assert scn.parallel.recomputed_modules == ("mla_up_proj", "mlp")
    assert scn.kernels.moe_dispatcher == "deepep" and scn.kernels.cuda_graph_impl == "transformer_engine"
    assert scn.kernels.cuda_graph_modules == ("attn", "moe_router", "moe_preprocess")


def test_overlap_recipes_set_the_delayed_wgrad_and_the_comm_streams_priority(shipped):
    """Megatron-Bridge sets delay_wgrad_compute with the EP overlap, and
    high_priority_a2a_comm_stream from v0.5.0 with the cutedsl fused grouped MLP and the overlap
    (scripts/performance/utils/overrides.py): 26.06 (v0.5.0) Qwen3-30B on 8 GB300 runs both, 26.04.01
    (v0.4.2) DeepSeek-V3 on 256 B200 the overlap at the default priority; a row without the overlap
    gets neither (Megatron-Core refuses delay_wgrad_compute without it)."""
    new = _case(shipped, "mbridge_26.06_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8")
    old = _case(shipped, "mbridge_26.04.01_DeepSeekV3_DGX-B200_256gpu_mxfp8")
    off = _case(shipped, "mbridge_26.04.01_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8")
    for case, high in ((new, True), (old, False)):
        scn = V.scenario_for(case)
        assert scn.parallel.ep_comm_overlap and scn.parallel.delay_wgrad_compute
        assert scn.kernels.ep_comm_high_priority is high
        assert "delay_wgrad_compute = true" in _recipe_lines(case)[0]
    assert "delay_wgrad_compute" not in off.scenario["parallel"]
    assert not V.scenario_for(off).parallel.delay_wgrad_compute


def test_same_layout_in_two_containers_gets_each_containers_recipe(shipped):
    """Qwen3-30B-A3B on 8 GB300, MXFP8, ep 8, micro-batch 8, global batch 512 in both 26.04.01
    (v0.4.2: HybridEP, TE graphs of router/preprocess, no EP overlap, op fuser forced off) and
    26.06 (v0.5.0: full-iteration graph, EP overlap, cuteDSL fused grouped MLP, capacity 1.5):
    the 1.45x faster 26.06 measurement ran a different launch recipe."""
    old = _case(shipped, "mbridge_26.04.01_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8")
    new = _case(shipped, "mbridge_26.06_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8")
    assert old.published_parallel == new.published_parallel  # one published configuration
    assert old.scenario["parallel"]["ep_comm_overlap"] is False
    assert new.scenario["parallel"]["ep_comm_overlap"] is True
    assert old.scenario["kernels"]["fused_grouped_mlp"] is False
    assert new.scenario["kernels"]["fused_grouped_mlp"] is True
    assert old.scenario["kernels"]["cuda_graph_impl"] == "transformer_engine"
    assert old.scenario["kernels"]["cuda_graph_modules"] == ["moe_router", "moe_preprocess"]
    assert new.scenario["kernels"]["cuda_graph_impl"] == "full_iteration"
    assert (
        old.scenario["kernels"]["moe_dispatcher"] == new.scenario["kernels"]["moe_dispatcher"] == "hybridep"
    )
    assert "moe_expert_rank_capacity_factor = 1.5 (HybridEP token budget)" in _recipe_lines(new)[1]
    assert V.scenario_for(new).kernels.cuda_graph_impl == "full_iteration"


def test_unknown_recipes_are_stated_and_keep_the_source_defaults(shipped):
    # the release has no config of the published layout (26.02.01 = v0.3.1 lists GPT-OSS B300
    # BF16 only at ep 64)
    case = _case(shipped, "mbridge_26.02.01_GPTOSS120B_DGX-B300_64gpu_bf16")
    par = case.scenario["parallel"]
    assert par["recompute"] == "none" and "ep_comm_overlap" not in par
    assert "moe_dispatcher" not in case.scenario.get("kernels", {})
    assert _recipe_lines(case) == [
        "recipe: Megatron-Bridge v0.3.1 (9c9dd8489, container 26.02.01) has no gpt-oss B300 bf16 config "
        "of this exact layout (tp, pp, vp, ep, micro-batch, global batch) -> source defaults"
    ]
    # 25.09 rows publish no precision: not determined, and said so
    old = _case(shipped, "mbridge_25.09_DeepSeekV3_DGX-GB200_256gpu_na")
    assert old.scenario["parallel"]["recompute"] == "none"
    assert _recipe_lines(old)[0].startswith("recipe: not determined for container 25.09")
    # a dense row whose published layout no config of its release has (v0.3.1 runs Llama 3 70B
    # NVFP4 on GB300 at pp 4, vp 5, micro-batch 1; the table publishes pp 1, micro-batch 2)
    dense = _case(shipped, "mbridge_26.02.01_LLAMA3_70B_DGX-GB300_64gpu_nvfp4")
    assert "memory" not in dense.scenario
    assert _recipe_lines(dense) == [
        "recipe: Megatron-Bridge v0.3.1 (9c9dd8489, container 26.02.01) has no llama3-70b GB300 nvfp4 config "
        "of this exact layout (tp, pp, vp, ep, micro-batch, global batch, cp, FSDP) -> source defaults"
    ]


TOY = """
[container."26.04"]
release = "v0.4.0"
commit = "0fbfe7d3e970fbd75c1281d71cee586ce1f3df5e"
[container."26.04.01"]
release = "v0.4.2"
commit = "c810129341a84e58f4cbed3093f70668a088c028"
[family]
qwen3-235b = "qwen3[-_ ]?235b"
[[recipe]]
name = "TOY"
model = "qwen3-235b"
container = "26.04"
gpu = "H100-SXM-80GB"
dtype = "fp8"
layout = { tp = 2, pp = 8, vp = 4, ep = 32, micro_batch = 1, global_batch = 8192 }
moe_dispatcher = "alltoall"
cuda_graph_impl = "none"
cuda_graph_modules = []
ep_comm_overlap = true
recompute_modules = []
fused_grouped_mlp = false
fp8_dot_product_attention = false
moe_expert_rank_capacity_factor = 0.0
moe_pad_experts_for_cuda_graph_inference = false
moe_hybridep_num_sms = 0
moe_shared_expert_overlap = false
delay_wgrad_compute = true
"""


def test_matching_needs_the_exact_container_and_every_layout_key():
    cat = parse_catalog(TOY)
    (r,) = cat.recipes
    layout = dict(r.layout)
    rid = "mbridge_26.04_Qwen3_235B_a22B_DGX-H100_256gpu_fp8"
    assert recipe_for(rid, "Qwen3_235B_a22B", r.gpu, r.dtype, layout, cat) is r
    for key in LAYOUT_KEYS:
        miss = recipe_for(rid, "Qwen3_235B_a22B", r.gpu, r.dtype, {**layout, key: layout[key] * 2}, cat)
        assert isinstance(miss, str) and "no qwen3-235b" in miss
    assert isinstance(recipe_for(rid, "Qwen3_235B_a22B", r.gpu, "bf16", layout, cat), str)
    # a container whose name starts like the recipe's is another release: never matched
    later = recipe_for(rid.replace("26.04_", "26.04.01_"), "Qwen3_235B_a22B", r.gpu, r.dtype, layout, cat)
    assert isinstance(later, str) and "v0.4.2" in later
    unknown = recipe_for(rid.replace("26.04_", "26.10_"), "Qwen3_235B_a22B", r.gpu, r.dtype, layout, cat)
    assert unknown == "recipe: container 26.10 is not in mbridge_recipes.toml -> source defaults"
    other = recipe_for(rid, "Qwen3_30B_a3B", r.gpu, r.dtype, layout, cat)
    assert isinstance(other, str) and "not recorded" in other
    assert container_of("mbridge_26.06.01_DeepSeekV3_DGX-GB300_256gpu_mxfp8") == "26.06.01"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('moe_dispatcher = "alltoall"', 'moe_dispatcher = "flex"', "moe_dispatcher = 'flex'"),
        ("cuda_graph_modules = []", 'cuda_graph_modules = ["attn"]', "only scope"),
        ('container = "26.04"', 'container = "26.05"', "no recorded release"),
        ("recompute_modules = []", 'recompute_modules = ["everything"]', "unknown recompute"),
        ("moe_expert_rank_capacity_factor = 0.0", "moe_expert_rank_capacity_factor = 0.5", "capacity"),
    ],
)
def test_bad_entries_are_refused_naming_the_file_and_key(old, new, message):
    with pytest.raises(ValueError, match="mbridge_recipes.toml recipe 'TOY'") as err:
        parse_catalog(TOY.replace(old, new))
    assert message in str(err.value)


def test_every_recipe_matches_a_shipped_row_and_simulates(shipped):
    """No dead entries: each recipe is the layout of at least one shipped row of its container,
    whose scenario (with the recipe's keys) the simulator accepts."""
    used = set()
    for run in shipped.values():
        case = V.build_case(run)
        if not isinstance(case, V.Case):
            continue
        for a in _recipe_lines(case):
            if a.startswith("recipe: Megatron-Bridge ") and "same layout" in a:
                m = re.search(r"container (\S+), same layout", a)
                assert m is not None and m.group(1) == container_of(run.run_id)
                used.add((a.split()[2], m.group(1)))
                V.scenario_for(case)  # raises on an invalid recipe (e.g. a module the model lacks)
    assert used == {(r.name, r.container) for r in recipes()}


def test_recipes_obey_the_rules_of_the_code_they_were_read_from():
    """What scripts/performance/utils/overrides.py (and perf_recipes/ in v0.6.0) set together:
    EP overlap sets delay_wgrad_compute and turns off the shared-expert overlap; a flex
    dispatcher turns the shared-expert overlap off; HybridEP gets 32 SMs; full-iteration graphs
    of dropless MoE come with a 1.5x HybridEP rank budget and need HybridEP with the fused grouped
    MLP; the TE op fuser is forced off before v0.5.0."""
    for r in recipes():
        if r.dense:
            continue
        assert r.delay_wgrad_compute == r.ep_comm_overlap, r.name
        if r.ep_comm_overlap or r.moe_dispatcher in ("deepep", "hybridep"):
            assert not r.moe_shared_expert_overlap, r.name
        assert r.moe_hybridep_num_sms == (32 if r.moe_dispatcher == "hybridep" else 0), r.name
        full = r.cuda_graph_impl == "full_iteration"
        assert r.moe_pad_experts_for_cuda_graph_inference == full, r.name
        assert r.moe_expert_rank_capacity_factor == (1.5 if full else 0.0), r.name
        if full:
            assert r.moe_dispatcher == "hybridep" and r.fused_grouped_mlp, r.name
        if r.release in ("v0.2.0", "v0.3.0", "v0.3.1", "v0.4.0", "v0.4.2"):
            assert not r.fused_grouped_mlp and not r.fp8_dot_product_attention, r.name


def test_fused_grouped_mlp_recipe_goes_to_kernels(shipped):
    """GPT-OSS MXFP8 on 64 GB300 (26.06): GB300_FP8_MX_V2 sets cutedsl_fused_grouped_mlp ->
    [kernels] fused_grouped_mlp; the BF16 recipe of 26.04.01 does not."""
    fused = _case(shipped, "mbridge_26.06_GPTOSS120B_DGX-GB300_64gpu_mxfp8")
    assert fused.scenario["kernels"]["fused_grouped_mlp"] is True
    assert V.scenario_for(fused).kernels.fused_grouped_mlp
    eager = _case(shipped, "mbridge_26.04.01_GPTOSS120B_DGX-GB300_64gpu_bf16")
    assert eager.scenario["kernels"]["fused_grouped_mlp"] is False


def test_data_spread_groups_the_published_configuration_across_recipes(shipped):
    """Rows of one published configuration stay one spread group when their releases' recipes
    differ; the group reports how many different recipes it holds."""
    from simulator.validate.spread import spread_groups

    ids = [
        "mbridge_26.04.01_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8",
        "mbridge_26.06_Qwen3_30B_a3B_DGX-GB300_8gpu_mxfp8",
    ]
    report = V.validate_runs([shipped[i] for i in ids], fake_simulate, progress=False)
    (group,) = spread_groups(report.results)
    assert set(group["rows"]) == set(ids) and len(group["recipes"]) == 2
    assert "2 different launch recipes" in V.format_report(report)


def test_unexpressible_launch_recipes_are_refused_with_their_source(shipped):
    """Qwen3-30B in container 25.09 (Megatron-Bridge r0.1.0): its perf matrix sets cuda_graphs for
    every precision on B200 and GB200 and run_script.py applies token drop -- whole-layer CUDA
    graphs over drop-and-pad MoE layers, which mfusim cannot express: refused, naming the file,
    not simulated with the source defaults. The H100 row (no CUDA graphs) is still simulated."""
    for run_id in (
        "mbridge_25.09_Qwen3_30B_a3B_DGX-B200_8gpu_na",
        "mbridge_25.09_Qwen3_30B_a3B_DGX-GB200_8gpu_na_v2",
    ):
        out = V.build_case(shipped[run_id])
        assert isinstance(out, V.Unusable), run_id
        assert "qwen3_30b_a3b_llm_pretrain.yaml" in out.reason and "token-drop" in out.reason
        assert "r0.1.0" in out.reason
    assert isinstance(V.build_case(shipped["mbridge_25.09_Qwen3_30B_a3B_DGX-H100_16gpu_na"]), V.Case)


def test_unexpressible_entries_need_a_reason_and_a_known_container():
    from simulator.resources import catalog_file

    text = catalog_file("mbridge_recipes.toml").read_text(encoding="utf-8")
    assert parse_catalog(text).unexpressible
    with pytest.raises(ValueError, match="needs a reason"):
        parse_catalog(re.sub(r'(?m)^reason = ".*"$', 'reason = ""', text, count=1))
    with pytest.raises(ValueError, match="no \\[container\\] table"):
        parse_catalog(
            text.replace('container = "25.09"\ngpu = "B200"', 'container = "24.01"\ngpu = "B200"', 1)
        )


def test_dense_recipe_offloads_that_share_of_the_layers(shipped):
    """Llama 3 70B FP8 on 64 GB300 / GB200 (26.04 = v0.4.0): LLAMA3_70B_PRETRAIN_CONFIG_*_FP8_CS_V2
    run Megatron FSDP with cpu_offloading_num_layers 20 (GB300) / 40 (GB200) of the 80 layers
    (pp 1): [memory] offload_activations = 20/80 and 40/80, and the stage's activations drop by
    exactly that many layers' stored activations."""
    from simulator.memory import memory_footprint, scenario_layer_activations

    for gpu, layers in (("GB300", 20), ("GB200", 40)):
        case = _case(shipped, f"mbridge_26.04_LLAMA3_70B_DGX-{gpu}_64gpu_fp8")
        assert case.scenario["memory"] == {"offload_activations": layers / 80}
        (line,) = _recipe_lines(case)
        assert f"LLAMA3_70B_PRETRAIN_CONFIG_{gpu}_FP8_CS_V2 (v0.4.0 0fbfe7d3e, container 26.04" in line
        assert f"cpu_offloading_num_layers = {layers} -> offload_activations = {layers}/80" in line
        assert "megatron_fsdp = true" in line and "ep_comm_overlap" not in line
        scn = V.scenario_for(case)
        assert scn.parallel.zero == 3  # the recipe's Megatron FSDP is what validate simulates
        kept = memory_footprint(scn).parts_bytes["activations"]
        no_offload = replace(scn, memory=replace(scn.memory, offload_activations=0.0))
        whole = memory_footprint(no_offload).parts_bytes["activations"]
        stored = scenario_layer_activations(scn, moe=False).stored
        assert whole - kept == pytest.approx(layers * stored, rel=1e-9)


def test_dense_recipe_without_memory_settings_is_stated(shipped):
    """Llama 3.1 405B FP8 on 256 GB200 (26.04.01 = v0.4.2): GB200_FP8_CS_V2 (tp 4, pp 16, vp 4)
    sets no offloading, recomputation or CUDA graph: the row keeps its defaults and says which
    config it ran."""
    case = _case(shipped, "mbridge_26.04.01_LLAMA3.1_405B_DGX-GB200_256gpu_fp8")
    assert "memory" not in case.scenario and case.scenario["parallel"]["recompute"] == "none"
    (line,) = _recipe_lines(case)
    assert "LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 (v0.4.2" in line
    assert "cuda_graph_impl = none" in line and "cpu_offloading" not in line


def test_megatron_bridge_llama_rows_have_no_dropout(shipped):
    """Megatron-Bridge builds Llama from the HF config (attention_dropout 0.0) and its LlamaBridge
    sets hidden_dropout 0.0: no dropout masks are stored."""
    case = _case(shipped, "mbridge_26.04_LLAMA3_70B_DGX-H100_64gpu_fp8")
    assert case.scenario["model"]["dropout"] == 0.0
    assert V.scenario_for(case).model.dropout == 0.0


def test_dense_recipe_needs_the_published_fsdp(shipped):
    """Llama 3 8B on 8 H100 (25.11 = v0.2.0): LLAMA3_8B_H100_FP8_CS_BASE_CONFIG has the published
    tp, pp, cp, micro-batch and global batch but no Megatron FSDP (and recomputes 5 layers), while
    the row publishes FSDP: not the run's recipe, so the row keeps its defaults and says so."""
    case = _case(shipped, "mbridge_25.11_LLAMA3_8B_DGX-H100_8gpu_fp8-cs")
    assert case.scenario["parallel"]["zero"] == 3 and case.scenario["parallel"]["recompute"] == "none"
    assert _recipe_lines(case) == [
        "recipe: Megatron-Bridge v0.2.0 (7af9601c9, container 25.11) has no llama3-8b H100-SXM-80GB fp8 "
        "config of this exact layout (tp, pp, vp, ep, micro-batch, global batch, cp, FSDP) -> source defaults"
    ]


DENSE_TOY = """
dense_families = ["llama3-70b"]
[container."26.04"]
release = "v0.4.0"
commit = "0fbfe7d3e970fbd75c1281d71cee586ce1f3df5e"
[family]
llama3-70b = "llama[-_ ]?3[-_ ]?70b"
[[recipe]]
name = "DENSE"
model = "llama3-70b"
container = "26.04"
gpu = "GB300"
dtype = "fp8"
layout = { tp = 1, pp = 1, cp = 1, vp = 1, ep = 1, micro_batch = 2, global_batch = 256 }
megatron_fsdp = true
cuda_graph_impl = "none"
cuda_graph_modules = []
recompute_modules = []
cpu_offloading_num_layers = 20
"""


def test_dense_entries_match_cp_and_refuse_what_megatron_refuses():
    cat = parse_catalog(DENSE_TOY)
    (r,) = cat.recipes
    assert r.dense and r.cpu_offloading_num_layers == 20 and not r.ep_comm_overlap
    layout = dict(r.layout)
    rid = "mbridge_26.04_LLAMA3_70B_DGX-GB300_64gpu_fp8"
    assert recipe_for(rid, "LLAMA3_70B", "GB300", "fp8", layout, cat) is r
    assert isinstance(recipe_for(rid, "LLAMA3_70B", "GB300", "fp8", {**layout, "cp": 2}, cat), str)
    assert recipe_for(rid, "LLAMA3_70B", "GB300", "fp8", {**layout, "fsdp": 1}, cat) is r
    assert isinstance(recipe_for(rid, "LLAMA3_70B", "GB300", "fp8", {**layout, "fsdp": 0}, cat), str)
    bad = [
        ("pp = 1,", "pp = 2,", "needs pp = 1"),  # Megatron-Core: no activation offloading with PP
        ("recompute_modules = []", 'recompute_modules = ["mlp"]', "no recompute_modules"),
        ('cuda_graph_impl = "none"', 'cuda_graph_impl = "full_iteration"', "cuda_graph_impl = none"),
        ("megatron_fsdp = true", "megatron_fsdp = true\nep_comm_overlap = false", "dense family"),
        ("cp = 1, ", "cp = 1, dp = 64, ", "layout needs exactly"),
    ]
    for old, new, message in bad:
        with pytest.raises(ValueError, match="recipe 'DENSE'") as err:
            parse_catalog(DENSE_TOY.replace(old, new))
        assert message in str(err.value), (old, str(err.value))
    # an MoE family's entry cannot carry the dense keys
    with pytest.raises(ValueError, match="do not apply to a MoE family"):
        parse_catalog(TOY.replace("delay_wgrad", "megatron_fsdp = true\ndelay_wgrad"))


def test_deepseek_rows_run_the_model_recipes_pipeline_layout(shipped):
    """Megatron-Bridge's DeepSeek-V3 recipe (deepseek_v3.py layout_map, every release) splits the
    61 layers as [embedding + 4] + [4]*14 + [1 + MTP + loss] over 16 virtual stages (pp 16 on B300,
    pp 4 x vp 4 on GB200), [embedding + 8] + [8]*6 + [5 + MTP + loss] over 8 (pp 8 on B300), and
    the H100 launch passes "Et|(tt|)*30mL" for pp 8 x vp 4. 25.11's GB200 pp 8 x vp 4 has no layout
    in its release (v0.2.0's map lacks (8, 4) and its GB200 launch passes none): default split."""
    sixteen = [4] * 15 + [1]
    for run_id, layout in (
        ("mbridge_26.02_DeepSeekV3_DGX-B300_256gpu_mxfp8", sixteen),
        ("mbridge_26.02_DeepSeekV3_DGX-GB200_256gpu_mxfp8", sixteen),
        ("mbridge_26.06_DeepSeekV3_DGX-GB300_256gpu_mxfp8", sixteen),
        ("mbridge_26.04.01_DeepSeekV3_DGX-B300_256gpu_mxfp8", [8] * 7 + [5]),
        ("mbridge_25.09_DeepSeekV3_DGX-H100_1024gpu_na", [1] + [2] * 30 + [0]),
    ):
        case = _case(shipped, run_id)
        assert case.scenario["parallel"]["pipeline_layout"] == layout, run_id
        assert any(a.startswith("pipeline_layout: ") for a in case.assumptions)
        scn = V.scenario_for(case)
        assert sum(scn.parallel.pipeline_layout) == scn.model.layers == 61
    for run_id in (
        "mbridge_25.11_DeepSeekV3_DGX-GB200_256gpu_fp8-mx",  # (8, 4) off H100 in v0.2.0: none
        "mbridge_25.11_DeepSeekV3_DGX-GB300_256gpu_bf16",  # (2, 4): not in the map
        "mbridge_26.02_Qwen3_235B_a22B_DGX-B300_256gpu_mxfp8",  # another family
    ):
        case = _case(shipped, run_id)
        assert "pipeline_layout" not in case.scenario["parallel"], run_id


def test_pipeline_layout_entries_are_checked():
    base = TOY.replace("[family]\n", '[family]\ndeepseek = "deepseek[-_ ]?v3"\n')
    good = (
        base + '[[pipeline_layout]]\nmodel = "deepseek"\npp_vp = [[2, 1]]\nlayers = [31, 30]\nsource = "x"\n'
    )
    cat = parse_catalog(good)
    assert cat.pipeline_layouts[0].layers == (31, 30)
    with pytest.raises(ValueError, match="one layer count >= 0 per virtual stage"):
        parse_catalog(good.replace("[[2, 1]]", "[[4, 1]]"))
    with pytest.raises(ValueError, match="needs a source"):
        parse_catalog(good.replace('source = "x"', 'source = ""'))
