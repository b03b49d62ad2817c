"""TOML scenario/topology loading (SPEC §1-2): presets, overrides, units, hf_config."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator import flops as F
from simulator.errors import ConfigError
from simulator.loading import load_scenario, load_topology, model_from_table, model_preset
from simulator.resources import data_dir, topology_names

SHIPPED_TOPOLOGIES = (
    "dgx-a100",
    "dgx-a100-40gb",
    "dgx-h100",
    "dgx-h200",
    "dgx-h800",
    "dgx-b200",
    "dgx-b300",
    "gb200-nvl72",
    "gb300-nvl72",
    "pcie-a100",
)


def test_shipped_default_scenario_loads_in_si() -> None:
    sc = load_scenario(data_dir("scenarios") / "gpt3-175b-1024-a100.toml")
    assert sc.num_gpus == 1024
    assert (sc.parallel.tp, sc.parallel.pp, sc.parallel.dp) == (8, 16, 8)
    assert sc.parallel.num_microbatches == 1536 // 8
    assert sc.model.layers == 96 and sc.model.hidden == 12288
    assert sc.gpu.name == "a100-80gb"
    assert sc.peak_flop_per_s == 312e12
    topo = sc.topology
    assert topo.intra_node.link_bandwidth_bytes_per_s == 300e9  # 300 GB/s
    assert topo.inter_node.nic_bandwidth_bytes_per_s == 25e9  # 200 Gb/s
    assert topo.inter_node.latency_s == pytest.approx(5e-6)  # 5 µs
    assert topo.intra_node.latency_s == pytest.approx(3e-6)
    assert sc.gpu.hbm_bytes == pytest.approx(79.26 * 2**30)  # CUDA-reported (gpus.toml)
    assert sc.tokens_per_step == 1536 * 2048


@pytest.mark.parametrize("name", SHIPPED_TOPOLOGIES)
def test_shipped_topologies_load(name: str) -> None:
    assert name in topology_names()
    topo = load_topology(name)
    assert topo.gpus_per_node >= 1
    assert topo.inter_node.nic_bandwidth_bytes_per_s > 0
    assert topo.intra_node.link_bandwidth_bytes_per_s > 0


def test_topology_gpus() -> None:
    assert load_topology("dgx-a100-40gb").gpu.name == "a100-40gb"
    assert load_topology("dgx-h100").gpu.name == "h100-sxm"
    assert load_topology("dgx-h200").gpu.name == "h200"
    assert load_topology("dgx-h100").inter_node.nic_bandwidth_bytes_per_s == 50e9  # 400 Gb/s NDR
    assert load_topology("pcie-a100").intra_node.fabric == "pcie"


def test_blackwell_ultra_topologies_are_what_validate_simulates() -> None:
    """dgx-b300 and gb300-nvl72 are the networks `validate` builds for B300/GB300 rows (the B200 /
    GB200 topology with the Blackwell Ultra GPU and 800 Gb/s ConnectX-8 NICs), so a user's scenario
    on the shipped name simulates what the published rows were checked against."""
    from dataclasses import replace

    from simulator.loading import gpu_by_name
    from simulator.units import gbps_to_bytes_per_s
    from simulator.validate import gpu_mapping

    for label, name in (("B300", "dgx-b300"), ("GB300", "gb300-nvl72")):
        mapping = gpu_mapping(label)
        assert not isinstance(mapping, str) and mapping.gpu
        base = load_topology(mapping.topology)
        inter = dict(mapping.inter_node)
        expected = replace(
            base,
            gpu=gpu_by_name(mapping.gpu),
            inter_node=replace(
                base.inter_node, nic_bandwidth_bytes_per_s=gbps_to_bytes_per_s(inter["nic_Gbps"])
            ),
        )
        topo = load_topology(name)
        assert (topo.gpu, topo.gpus_per_node, topo.intra_node, topo.inter_node) == (
            expected.gpu,
            expected.gpus_per_node,
            expected.intra_node,
            expected.inter_node,
        ), name
        assert topo.inter_node.nic_bandwidth_bytes_per_s == 100e9  # 800 Gb/s


def test_shipped_topologies_stay_within_their_gpus_nvlink() -> None:
    """No shipped NVSwitch topology offers a GPU more NVLink than its own ports carry."""
    for name in topology_names():
        topo = load_topology(name)
        if topo.intra_node.fabric != "pcie":
            assert 0 < topo.intra_node.link_bandwidth_bytes_per_s <= topo.gpu.nvlink_bytes_per_s, name


def test_h800_on_a_dgx_h100_gets_the_h800_nvlink(
    write_file: Callable[..., Path], small_scenario_text: str
) -> None:
    """H800 = H100 compute with 8 of 18 NVLinks (200 GB/s per direction): `gpu = "h800"` on the
    DGX H100 topology is capped to its ports with a warning naming the key, and equals the shipped
    dgx-h800 topology's link; a link the scenario sets itself is a what-if, kept with a warning."""
    h100 = small_scenario_text.replace('topology = "dgx-a100"', 'topology = "dgx-h100"')
    base = load_scenario(write_file(h100))
    assert base.topology.intra_node.link_bandwidth_bytes_per_s == 450e9 and not base.warnings()
    sc = load_scenario(write_file(h100.replace("[parallel]", 'gpu = "h800"\n\n[parallel]')))
    assert sc.gpu.name == "h800"
    assert sc.topology.intra_node.link_bandwidth_bytes_per_s == 200e9
    assert sc.topology.intra_node.link_bandwidth_bytes_per_s == (
        load_topology("dgx-h800").intra_node.link_bandwidth_bytes_per_s
    )
    assert any(w.startswith("cluster.gpu:") and "200 GB/s" in w for w in sc.warnings())
    # a slower link given on purpose is kept, silently
    slower = h100.replace(
        "[parallel]", 'gpu = "h800"\n\n[cluster.intra_node]\nlink_GBps_per_direction = 160\n\n[parallel]'
    )
    assert load_scenario(write_file(slower)).topology.intra_node.link_bandwidth_bytes_per_s == 160e9
    assert not [w for w in load_scenario(write_file(slower)).warnings() if "NVLink" in w]
    what_if = load_scenario(write_file(slower.replace("= 160", "= 450")))
    assert what_if.topology.intra_node.link_bandwidth_bytes_per_s == 450e9
    assert any(w.startswith("intra_node.link_GBps_per_direction:") for w in what_if.warnings())


def test_small_scenario(write_file: Callable[..., Path], small_scenario_text: str) -> None:
    sc = load_scenario(write_file(small_scenario_text))
    assert sc.name == "small test scenario"
    assert sc.parallel.num_gpus == sc.num_gpus == 16
    assert sc.parallel.num_microbatches == 4
    assert sc.variability.is_deterministic
    assert sc.source.endswith("scenario.toml")


def test_dp_and_schedule_defaults(write_file: Callable[..., Path], small_scenario_text: str) -> None:
    text = small_scenario_text.replace("dp = 4\n", "").replace('schedule = "1f1b"\n', "")
    text = text.replace("pp = 2\n", "pp = 2\nvp = 2\n")
    sc = load_scenario(write_file(text))
    assert sc.parallel.dp == 4
    assert sc.parallel.schedule == "interleaved"


def test_optional_tables_default(write_file: Callable[..., Path]) -> None:
    text = """
[model]
preset = "gpt3-1.3b"
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
tp = 8
global_batch = 8
"""
    sc = load_scenario(write_file(text))
    assert sc.name == "scenario"  # file stem
    assert sc.dtype == "bf16"
    assert sc.parallel.dp == 1 and sc.parallel.recompute == "none" and sc.parallel.zero == 0
    assert sc.dataloader.microbatch_latency_s == 0.0
    assert sc.variability.is_deterministic


def test_preset_with_overrides(write_file: Callable[..., Path], small_scenario_text: str) -> None:
    text = small_scenario_text.replace(
        """layers = 4
hidden = 512
heads = 8
kv_heads = 8
ffn_hidden = 2048
vocab = 32000
seq_len = 1024
gated_mlp = false
""",
        'preset = "llama3-8b"\nseq_len = 4096\n',
    ).replace("num_gpus = 16", "num_gpus = 16")
    sc = load_scenario(write_file(text))
    base = model_preset("llama3-8b")
    assert sc.model.seq_len == 4096
    assert sc.model.hidden == base.hidden and sc.model.num_kv_heads == 8 and sc.model.gated_mlp
    assert sc.model.name == "llama3-8b"


def test_inline_topology_overrides(write_file: Callable[..., Path], small_scenario_text: str) -> None:
    text = small_scenario_text.replace(
        "[parallel]",
        """gpu = "a100-40gb"

[cluster.intra_node]
link_GBps_per_direction = 150

[cluster.inter_node]
nic_Gbps = 400
nics_per_node = 4
oversubscription = 2.0

[parallel]""",
    )
    sc = load_scenario(write_file(text))
    topo = sc.topology
    assert sc.gpu.name == "a100-40gb"
    assert topo.intra_node.link_bandwidth_bytes_per_s == 150e9
    assert topo.inter_node.nic_bandwidth_bytes_per_s == 50e9
    assert topo.inter_node.nics_per_node == 4
    assert topo.inter_node.oversubscription == 2.0
    # keys not overridden come from the topology file
    base = load_topology("dgx-a100")
    assert topo.intra_node.latency_s == base.intra_node.latency_s
    assert topo.inter_node.nodes_per_leaf == base.inter_node.nodes_per_leaf
    assert topo.nic_bandwidth_per_node_bytes_per_s == 4 * 50e9


def test_dataloader_units(write_file: Callable[..., Path], small_scenario_text: str) -> None:
    text = small_scenario_text.replace("microbatch_latency_ms = 0.0", "microbatch_latency_ms = 12.5")
    sc = load_scenario(write_file(text))
    assert sc.dataloader.microbatch_latency_s == pytest.approx(0.0125)


def test_topology_file_relative_to_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_scenario_text: str
) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "mytopo.toml").write_text(
        """name = "tiny"
gpu = "h100-sxm"
gpus_per_node = 4
[intra_node]
fabric = "nvswitch"
link_GBps_per_direction = 450
latency_us = 2.0
[inter_node]
fabric = "fat-tree"
nics_per_node = 4
nic_Gbps = 400
latency_us = 4.0
nodes_per_leaf = 16
oversubscription = 1.0
"""
    )
    scenario = folder / "s.toml"
    scenario.write_text(small_scenario_text.replace('topology = "dgx-a100"', 'topology = "mytopo.toml"'))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sc = load_scenario(scenario)
    assert sc.topology.name == "tiny"
    assert sc.gpu.name == "h100-sxm"
    assert sc.topology.gpus_per_node == 4
    assert sc.topology.inter_node.fabric == "fat-tree"


# ----------------------------------------------------------------------------- hf_config
LLAMA_CONFIG = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

MIXTRAL_CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}


def _hf_scenario(folder: Path, config: dict[str, object], extra_model: str = "", num_gpus: int = 8) -> Path:
    (folder / "models").mkdir(parents=True, exist_ok=True)
    (folder / "models" / "config.json").write_text(json.dumps(config))
    path = folder / "hf.toml"
    path.write_text(
        f"""name = "hf model"
[model]
hf_config = "models/config.json"
{extra_model}
[cluster]
topology = "dgx-h100"
num_gpus = {num_gpus}
[parallel]
tp = 8
global_batch = 8
"""
    )
    return path


def test_hf_config_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _hf_scenario(tmp_path / "proj", LLAMA_CONFIG)
    monkeypatch.chdir(tmp_path)  # the path is resolved against the scenario file, not the cwd
    sc = load_scenario(path)
    m = sc.model
    assert (m.layers, m.hidden, m.heads, m.num_kv_heads) == (32, 4096, 32, 8)
    assert (m.ffn, m.vocab, m.seq_len) == (14336, 128256, 8192)
    assert m.gated_mlp and not m.tied_embeddings and not m.is_moe
    assert m.name == "meta-llama/Meta-Llama-3-8B"
    # the same model as the preset: same parameters and FLOPs
    preset = model_preset("llama3-8b")
    assert F.total_params(m) == F.total_params(preset) == 8_030_261_248
    assert F.flops_per_token_exact(m) == F.flops_per_token_exact(preset)


def test_hf_config_mixtral(tmp_path: Path) -> None:
    path = _hf_scenario(tmp_path, MIXTRAL_CONFIG, extra_model="seq_len = 4096")
    m = load_scenario(path).model
    assert m.is_moe and m.num_experts == 8 and m.top_k == 2
    assert m.seq_len == 4096  # explicit key overrides max_position_embeddings
    assert m.expert_ffn == 14336
    assert F.total_params(m) == pytest.approx(46.7e9, rel=0.01)
    assert F.total_params(m) == F.total_params(model_preset("mixtral-8x7b"))


def test_hf_config_nested_text_config_and_tied(tmp_path: Path) -> None:
    cfg = {"model_type": "llava", "text_config": {**LLAMA_CONFIG, "tie_word_embeddings": True}}
    m = load_scenario(_hf_scenario(tmp_path, cfg)).model
    assert m.tied_embeddings and m.hidden == 4096


def test_hf_config_absolute_path(tmp_path: Path, small_scenario_text: str) -> None:
    cfg = tmp_path / "abs" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({**LLAMA_CONFIG, "num_hidden_layers": 4}))
    text = (
        small_scenario_text.split("[model]")[0]
        + f'[model]\nhf_config = "{cfg}"\n\n[cluster]'
        + (small_scenario_text.split("[cluster]")[1])
    )
    (tmp_path / "other").mkdir()
    path = tmp_path / "other" / "s.toml"
    path.write_text(text)
    assert load_scenario(path).model.layers == 4


GLM45_CONFIG = {  # zai-org/GLM-4.5 config.json (the fields that shape the model)
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "_name_or_path": "zai-org/GLM-4.5",
    "hidden_size": 5120,
    "num_hidden_layers": 92,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1,
    "vocab_size": 151552,
    "max_position_embeddings": 131072,
    "partial_rotary_factor": 0.5,
    "attention_bias": True,
    "use_qk_norm": True,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-05,
    "routed_scaling_factor": 2.5,
    "tie_word_embeddings": False,
}


def test_hf_config_of_another_model_type_says_what_it_did_not_read(tmp_path: Path) -> None:
    """A model type outside the exactly-imported ones is read by their common keys and says so,
    naming the architecture keys it did not read (GLM-4.5: partial RoPE, attention bias); what it
    did read lands on the published size (355B total with its MTP layer)."""
    sc = load_scenario(_hf_scenario(tmp_path, GLM45_CONFIG, extra_model="seq_len = 4096", num_gpus=64))
    m = sc.model
    assert m.qk_norm and m.mtp_layers == 1 and m.first_dense_layers == 3 and m.gated_mlp
    assert F.total_params(m) + F.mtp_params(m) == pytest.approx(355e9, rel=0.01)
    said = [w for w in sc.warnings() if "glm4_moe" in w]
    assert len(said) == 1 and "keys it did not read: attention_bias, partial_rotary_factor" in said[0]
    assert "rope_theta" not in said[0] and "routed_scaling_factor" not in said[0]  # no effect on a step
    llama = load_scenario(_hf_scenario(tmp_path / "llama", LLAMA_CONFIG))
    assert not [w for w in llama.warnings() if "as such" in w]


OLMOE_CONFIG = {  # allenai/OLMoE-1B-7B-0924 config.json, hidden_act dropped
    "model_type": "olmoe",
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "vocab_size": 50304,
    "tie_word_embeddings": False,
}


def test_generic_import_without_an_activation_key_says_how_it_read_the_mlp(tmp_path: Path) -> None:
    """With no hidden_act the import cannot tell a gated MLP from a plain one: it reads the plain
    one and says so (OLMoE's experts are SwiGLU: 4.77B read, 6.92B published with gated_mlp), and
    the note goes once the scenario decides with [model] gated_mlp."""
    plain = load_scenario(_hf_scenario(tmp_path / "a", OLMOE_CONFIG, extra_model="seq_len = 4096"))
    assert not plain.model.gated_mlp
    assert [w for w in plain.warnings() if "no hidden_act" in w and "gated_mlp = true" in w]
    gated = load_scenario(
        _hf_scenario(tmp_path / "b", OLMOE_CONFIG, extra_model="seq_len = 4096\ngated_mlp = true")
    )
    assert gated.model.gated_mlp and not [w for w in gated.warnings() if "no hidden_act" in w]
    assert F.total_params(gated.model) == pytest.approx(6.92e9, rel=0.005)
    with_act = load_scenario(
        _hf_scenario(tmp_path / "c", {**OLMOE_CONFIG, "hidden_act": "silu"}, extra_model="seq_len = 4096")
    )
    assert with_act.model.gated_mlp and not [w for w in with_act.warnings() if "no hidden_act" in w]


# ----------------------------------------------------------------------------- exact or refused: biases
def _llama_config(tmp_path: Path, **extra: object) -> str:
    cfg = {
        "model_type": "llama",
        "hidden_act": "silu",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        **extra,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path / "config.json")


def test_hf_import_llama_biases_all_or_refused(tmp_path: Path) -> None:
    """LlamaConfig's attention_bias and mlp_bias: both = every linear layer biased (linear_bias);
    one alone was silently all (mlp_bias) or nothing (attention_bias): refused naming it."""
    both = model_from_table(
        {"hf_config": _llama_config(tmp_path, attention_bias=True, mlp_bias=True), "seq_len": 64}, tmp_path
    )
    assert both.linear_bias
    for key in ("attention_bias", "mlp_bias"):
        path = _llama_config(tmp_path, **{key: True})
        with pytest.raises(ConfigError) as info:
            model_from_table({"hf_config": path, "seq_len": 64}, tmp_path)
        assert info.value.key == key
        m = model_from_table({"hf_config": path, "seq_len": 64, "allow_unmodeled": [key]}, tmp_path)
        assert not m.linear_bias and any(key in n for n in m.notes)
