"""config.json families that say their attention and MLP shape in other words (fuzz audit).

Found by importing common Hub configs: GPT-BigCode (StarCoder) and Falcon name their key/value
heads with `multi_query` / `num_kv_heads`, not `num_key_value_heads`, and were simulated with
full multi-head attention; StarCoder's and StarCoder2's `gelu_pytorch_tanh` plain MLP was
simulated as a gated (3-matrix) one because Gemma uses the same activation gated. Exact or
refused: these are now read as the transformers classes read them, and `multi_query` of any
other family is refused by its key unless allow_unmodeled lists it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_fuzz_inputs import check_contract, run_in_process

from simulator import flops as F
from simulator.errors import ConfigError
from simulator.loading import load_scenario

# tiiuae/falcon-7b, tiiuae/falcon-40b, bigcode/starcoder, bigcode/starcoder2-15b config.json
# (the keys that set the shape), google/gemma-2-9b
FALCON_7B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "multi_query": True,
    "new_decoder_architecture": False,
    "parallel_attn": True,
    "vocab_size": 65024,
}
FALCON_40B = {
    "architectures": ["FalconForCausalLM"],
    "model_type": "falcon",
    "hidden_size": 8192,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "new_decoder_architecture": True,
    "vocab_size": 65024,
}
STARCODER = {
    "architectures": ["GPTBigCodeForCausalLM"],
    "model_type": "gpt_bigcode",
    "activation_function": "gelu_pytorch_tanh",
    "multi_query": True,
    "n_embd": 6144,
    "n_head": 48,
    "n_inner": 24576,
    "n_layer": 40,
    "n_positions": 8192,
    "vocab_size": 49152,
}
STARCODER2 = {
    "architectures": ["Starcoder2ForCausalLM"],
    "model_type": "starcoder2",
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "num_attention_heads": 48,
    "num_hidden_layers": 40,
    "num_key_value_heads": 4,
    "sliding_window": 4096,
    "vocab_size": 49152,
}
GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_act": "gelu_pytorch_tanh",
    "head_dim": 256,
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "vocab_size": 256000,
}


def _scenario(folder: Path, config: dict[str, object], extra: str = "") -> Path:
    if config.get("model_type") == "falcon" and "allow_unmodeled" not in extra:
        # Falcon's parallel attention + MLP block (parallel_attn, default true) is not modeled
        extra += '\nallow_unmodeled = ["parallel_attn"]'
    (folder / "config.json").write_text(json.dumps(config))
    path = folder / "s.toml"
    path.write_text(
        f'[model]\nhf_config = "config.json"\nseq_len = 2048\n{extra}\n'
        '[cluster]\ntopology = "dgx-h100"\nnum_gpus = 8\n[parallel]\nglobal_batch = 8\n'
    )
    return path


@pytest.mark.parametrize(
    ("config", "kv_heads", "gated"),
    [
        (FALCON_7B, 1, False),
        (FALCON_40B, 8, False),
        (STARCODER, 1, False),
        (STARCODER2, 4, False),
        (GEMMA2, 8, True),
    ],
    ids=["falcon-7b", "falcon-40b", "starcoder", "starcoder2", "gemma2"],
)
def test_key_value_heads_and_mlp_as_the_family_reads_them(
    tmp_path: Path, config: dict[str, object], kv_heads: int, gated: bool
) -> None:
    model = load_scenario(_scenario(tmp_path, config)).model
    assert model.num_kv_heads == kv_heads
    assert model.gated_mlp is gated
    # the attention projections hold h·(h + 2·kv·d) weights per layer: with one K/V head the QKV
    # GEMM of Falcon-7B is 4544 x 4672 (FalconLinear query_key_value out_features=4672), not 3·4544
    d = model.head_dim or model.hidden // model.heads
    attn = model.hidden * (model.heads * d + 2 * kv_heads * d) + model.heads * d * model.hidden
    mlp = (3 if gated else 2) * model.hidden * model.ffn
    embed = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    norms = F.total_params(model) - model.layers * (attn + mlp) - embed
    assert 0 <= norms < 0.01 * F.total_params(model), norms


def test_falcon_and_gpt_bigcode_tie_their_embeddings_by_default(tmp_path: Path) -> None:
    """FalconConfig and GPTBigCodeConfig leave tie_word_embeddings at PretrainedConfig's default
    (true): one embedding table. StarCoder's model card: 15.5B parameters (untied: 15.8B); its
    learned positions (8192 x 6144) and biases, not modeled, are within the 1%."""
    starcoder = load_scenario(_scenario(tmp_path, STARCODER)).model
    assert starcoder.tied_embeddings
    assert F.total_params(starcoder) / 1e9 == pytest.approx(15.5, rel=0.01)
    assert load_scenario(_scenario(tmp_path, FALCON_7B)).model.tied_embeddings


def test_falcon_without_multi_query_has_num_kv_heads(tmp_path: Path) -> None:
    cfg = {k: v for k, v in FALCON_7B.items() if k != "multi_query"} | {
        "multi_query": False,
        "num_kv_heads": 71,
    }
    assert load_scenario(_scenario(tmp_path, cfg)).model.num_kv_heads == 71


def test_falcon_bad_num_kv_heads_names_the_json_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, FALCON_40B | {"num_kv_heads": 7}))
    assert err.value.key == "num_kv_heads" and "config.json" in str(err.value)


def test_multi_query_of_another_family_is_refused_unless_allowed(tmp_path: Path) -> None:
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257}
    path = _scenario(tmp_path, gpt2 | {"multi_query": True})
    code, out, err = run_in_process(["run", str(path), "--json"])
    check_contract(code, out, err)
    assert code == 2 and "key 'multi_query'" in err and "config.json" in err
    # the opt-in: one warning, and the scenario's kv_heads says what the file meant
    path = _scenario(
        tmp_path, gpt2 | {"multi_query": True}, 'kv_heads = 1\nallow_unmodeled = ["multi_query"]'
    )
    code, out, err = run_in_process(["run", str(path), "--json"])
    assert code == 0 and "multi_query" in err
    assert json.loads(out)["model"]["kv_heads"] == 1


# ERNIE-4.5 (baidu/ERNIE-4.5-21B-A3B-PT) and GraniteMoeShared (ibm-granite/granite-3.1-1b-a400m
# family with a shared expert) name their experts in words the import does not read: simulated
# before as a dense model and as a MoE without its shared expert
ERNIE_MOE = {
    "model_type": "ernie4_5_moe",
    "hidden_act": "silu",
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "moe_k": 6,
    "moe_num_experts": 64,
    "moe_num_shared_experts": 2,
    "num_attention_heads": 20,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 103424,
}
GRANITE_SHARED = {
    "model_type": "granitemoeshared",
    "hidden_act": "silu",
    "hidden_size": 1024,
    "intermediate_size": 512,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "num_experts_per_tok": 8,
    "shared_intermediate_size": 1024,
    "router_aux_loss_coef": 0.01,
    "vocab_size": 49155,
}


@pytest.mark.parametrize(
    ("config", "key"),
    [(ERNIE_MOE, "moe_num_experts"), (GRANITE_SHARED, "shared_intermediate_size")],
    ids=["ernie", "granite-shared"],
)
def test_expert_keys_not_read_are_refused_by_name(
    tmp_path: Path, config: dict[str, object], key: str
) -> None:
    path = _scenario(tmp_path, config)
    code, out, err = run_in_process(["run", str(path), "--json"])
    check_contract(code, out, err)
    assert code == 2 and f"key '{key}'" in err and "config.json" in err


def test_routing_keys_that_change_no_cost_are_ignored(tmp_path: Path) -> None:
    """Auxiliary-loss and routing-math keys (Mixtral's, DeepSeek's) stay accepted."""
    mixtral = {
        "model_type": "mixtral",
        "hidden_size": 1024,
        "intermediate_size": 2048,
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "router_aux_loss_coef": 0.02,
        "router_jitter_noise": 0.0,
        "output_router_logits": False,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "topk_method": "noaux_tc",
    }
    model = load_scenario(_scenario(tmp_path, mixtral)).model
    assert model.is_moe and model.num_experts == 8
