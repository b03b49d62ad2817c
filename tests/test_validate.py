"""`mfusim validate`: published rows -> scenarios, source conventions, MAPE, bad CSVs.

The engine is replaced by a tiny roofline stand-in (`fake_simulate`) so these tests are fast
and test this module only; `test_engine_smoke` runs the real engine on two rows when present.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from simulator import cli, flops
from simulator import validate as V
from simulator.errors import ConfigError
from simulator.resources import published_runs_csv
from tests.conftest import fake_simulate, load_benchmark


@pytest.fixture(scope="module")
def shipped() -> dict[str, V.PublishedRun]:
    return {r.run_id: r for r in V.read_runs_csv(published_runs_csv())}


def case_of(shipped: dict[str, V.PublishedRun], run_id: str) -> V.Case:
    case = V.build_case(shipped[run_id])
    assert isinstance(case, V.Case), case
    return case


def test_shipped_csv_is_in_the_package_and_complete(shipped):
    path = published_runs_csv()
    assert path.is_file() and (path.parent / "SOURCES.md").is_file()
    assert "shared" not in path.parts
    assert len(shipped) == 585
    with open(path, newline="") as fh:
        assert tuple(next(csv.reader(fh))) == V.CSV_COLUMNS


# ----------------------------------------------------------------------------- row -> scenario
def test_narayanan_table1_row(shipped):
    case = case_of(shipped, "narayanan21_t1_145.6B")
    par = case.scenario["parallel"]
    assert case.source_key == "narayanan21"
    assert case.metric == V.METRIC_TFLOPS and case.measured == 148
    assert case.flop_convention == V.FLOPS_NARAYANAN
    assert case.scenario["cluster"] == {"topology": "dgx-a100", "num_gpus": 1536}
    assert (par["tp"], par["pp"], par["dp"]) == (8, 8, 24)
    # the paper's run_table_1.sh: MBS=2, 5 layers per virtual stage (80 / 8 / 5 = vp 2)
    assert par["micro_batch"] == 2 and par["recompute"] == "full"
    assert par["vp"] == 2 and par["schedule"] == "interleaved"
    assert par["sequence_parallel"] is False and par["overlap_grad_reduce"] is False
    assert case.dtype == "fp16" and case.is_target
    text = " ".join(case.assumptions)
    assert "micro_batch" in text and "vp" in text and "precision" in text
    s = V.scenario_for(case)
    assert s.model.layers == 80 and s.model.hidden == 12288 and s.model.vocab == 51200


def test_narayanan_zero3_row_assumes_full_recompute(shipped):
    case = case_of(shipped, "narayanan21_t2_zero3_174.6B_384gpu")
    par = case.scenario["parallel"]
    assert par["zero"] == 3 and par["recompute"] == "full" and par["micro_batch"] == 4
    assert any("recompute" in a for a in case.assumptions)


def test_megatron_readme_row(shipped):
    case = case_of(shipped, "megatronlm_readme_h100_70B")
    par = case.scenario["parallel"]
    assert case.scenario["cluster"]["topology"] == "dgx-h100"
    assert case.dtype == "bf16" and case.flop_convention == V.FLOPS_EXACT
    assert par["sequence_parallel"] and par["tp_comm_overlap"] and par["zero"] == 1
    assert par["pp"] == 2 and par["vp"] == 2  # 84 layers / 2 stages = 42 -> vp 2
    s = V.scenario_for(case)
    assert s.model.ffn == 4 * 8192 and s.model.num_kv_heads == 64 and s.model.vocab == 131072


@pytest.mark.parametrize(
    "run_id",
    [
        # Megatron-LM README weak scaling (core_r0.8.0 pretrain_gpt.py defaults) and NeMo 24.07's
        # GPT3 rows (NeMo 1 launcher configs without a `bias` key): Megatron-Core's
        # add_bias_linear = True, tied embeddings, learned positions, dropout 0.1
        "megatronlm_readme_h100_1.7B",
        "megatronlm_readme_h100_462B",
        "nemo2407_pretrain_GPT3-5B_64gpu",
        "nemo2407_pretrain_GPT3-20B_64gpu",
        "nemo2407_pretrain_GPT3-175B_128gpu",  # through the gpt3-175b preset
        # Megatron-LM 2021
        "narayanan21_t1_1.7B",
        "narayanan21_t2_ptd_174.6B_384gpu",
    ],
)
def test_gpt_rows_are_built_as_their_stacks_built_them(shipped, run_id):
    case = case_of(shipped, run_id)
    m = V.scenario_for(case).model
    assert m.linear_bias and m.tied_embeddings and m.position_embeddings
    assert m.dropout == 0.1 and not m.gated_mlp
    assert any("linear biases" in a for a in case.assumptions)


def test_gpt_biases_cost_time_on_the_megatron_core_stack(shipped):
    # the biases' main_grad adds (DDP hook) and parameters are real work: the same row without
    # them is faster, not equal -- the source rule is not a no-op
    from dataclasses import replace

    from simulator.simulate import simulate

    case = case_of(shipped, "megatronlm_readme_h100_1.7B")
    with_bias = V.scenario_for(case)
    model = {**case.scenario["model"], "linear_bias": False}
    unbiased = V.scenario_for(replace(case, scenario={**case.scenario, "model": model}))
    assert with_bias.model.linear_bias and not unbiased.model.linear_bias
    assert simulate(with_bias).report.step_time_s > simulate(unbiased).report.step_time_s


def test_nemo_rows(shipped):
    case = case_of(shipped, "nemo2407_pretrain_LLAMA3-70B_64gpu")
    assert case.metric == V.METRIC_TOKENS and case.measured == 1524 and case.dtype == "fp8"
    par = case.scenario["parallel"]
    assert (par["tp"], par["pp"], par["cp"], par["vp"], par["dp"]) == (4, 4, 2, 5, 2)
    s = V.scenario_for(case)
    assert s.model.gated_mlp and s.model.num_kv_heads == 8
    nemotron = case_of(shipped, "nemo2407_pretrain_Nemotron-8B_64gpu")
    assert nemotron.scenario["model"]["vocab"] == 256000
    assert any("vocab" in a for a in nemotron.assumptions)
    # B200 long-sequence table: the published split covers num_gpus/4
    b200 = case_of(shipped, "nemo_longseq_llama3_8b_b200_8k_cp1")
    assert b200.scenario["cluster"]["num_gpus"] == 2
    assert any("num_gpus" in a for a in b200.assumptions)
    longseq = case_of(shipped, "nemo_longseq_llama2_7b_h100_32k_cp2")
    assert longseq.metric == V.METRIC_TFLOPS and longseq.flop_convention == V.FLOPS_EXACT


def test_megatron_bridge_rows(shipped):
    case = case_of(shipped, "mbridge_26.04.01_LLAMA3_70B_DGX-GB300_64gpu_mxfp8")
    assert case.dtype == "mxfp8"  # issue 13: the MXFP8 recipe, not per-tensor fp8
    assert case.scenario["cluster"]["topology"] == "gb200-nvl72"
    assert case.scenario["cluster"]["gpu"] == "gb300"
    fsdp = case_of(shipped, "mbridge_25.11_LLAMA3_8B_DGX-H100_8gpu_fp8-cs")
    assert fsdp.scenario["parallel"]["zero"] == 3 and fsdp.metric == V.METRIC_TOKENS


def test_mpt_rows(shipped):
    case = case_of(shipped, "mpt_A100-SXM-80GB_70b_s2048_64gpu_bf16")
    par = case.scenario["parallel"]
    assert case.metric == V.METRIC_TOKENS and case.measured == 410
    assert par["zero"] == 3 and par["recompute"] == "full" and par["micro_batch"] == 8
    assert par["global_batch"] == 2048  # grad accumulation 4: 8 x 64 x 4
    assert case.scenario["cluster"]["inter_node"] == {
        "fabric": "fat-tree",
        "nics_per_node": 8,
        "nic_Gbps": 200,
    }
    s = V.scenario_for(case)
    # the benchmark runs' MPTConfig: learned positions, no ALiBi (the README's NumParams grows by
    # (seq_len - 2048)·d_model), biases on the linear layers (no_bias False)
    assert s.model.tied_embeddings and s.model.position_embeddings and s.model.linear_bias
    assert s.topology.inter_node.fabric == "fat-tree"
    h100 = case_of(shipped, "mpt_H100-SXM-80GB_3b_s2048_8gpu_fp8")
    assert h100.dtype == "fp8" and "inter_node" not in h100.scenario["cluster"]
    zero2 = case_of(shipped, "mpt_H100-SXM-80GB_1b_s2048_128gpu_bf16")
    assert zero2.scenario["parallel"]["zero"] == 2


@pytest.mark.parametrize(
    ("run_id", "attention"),
    [
        # 2023 tables: llm-foundry's copy of flash-attn's Triton kernel (attn_impl: triton)
        ("mpt_A100-SXM-40GB_1b_s2048_8gpu_bf16", "flash-attn-triton"),
        ("mpt_A100-SXM-80GB_760m_s65536_8gpu_bf16", "flash-attn-triton"),
        ("mpt_H100-SXM-80GB_7b_s65536_8gpu_bf16", "flash-attn-triton"),
        ("mpt_H100-SXM-80GB_3b_s2048_8gpu_fp8", "flash-attn-triton"),
        # the January 2024 "Large Scale" H100 table: flash-attn 2.4.2 with ALiBi slopes for
        # 1b/3b/7b/70b, Triton for 13b/30b (llm-foundry 5e85bd62d sweep.py)
        ("mpt_H100-SXM-80GB_3b_s2048_512gpu_bf16", "fa2"),
        ("mpt_H100-SXM-80GB_70b_s2048_128gpu_bf16", "fa2"),
        ("mpt_H100-SXM-80GB_13b_s2048_512gpu_bf16", "flash-attn-triton"),
        ("mpt_H100-SXM-80GB_30b_s2048_256gpu_bf16", "flash-attn-triton"),
    ],
)
def test_mpt_attention_kernel_per_table(shipped, run_id, attention):
    case = case_of(shipped, run_id)
    assert case.scenario["kernels"]["attention"] == attention
    assert any(a.startswith(f"kernels: attention = {attention} (") for a in case.assumptions)


def test_stack_rule_matches_table_notes_and_model():
    rule = V.StackRule(attention="fa2", table="large scale", models=("mpt-3b",))
    big = "README table 'H100 80GB BF16 (Large Scale, >= 128 GPUs)'"
    assert rule.applies(big, "", "MPT-3b")
    assert not rule.applies(big, "", "MPT-13b")
    assert not rule.applies("README table 'H100 80GB BF16'", "", "MPT-3b")
    pure = V.StackRule(grad_reduce_dtype="bf16", notes="mp mode pure")
    assert pure.applies("any table", "Composer/FSDP ..., MP mode PURE, grad accum 3", "MPT-1b")
    assert not pure.applies("any table", "Composer/FSDP ..., MP mode DEFAULT", "MPT-1b")
    rules = V.source_rules("mosaicml/llm-foundry README")
    assert rules.stack_for("attention", "table 'A100 40GB'", "", "MPT-3b") == ("flash-attn-triton", "")
    assert rules.stack_for("grad_reduce_dtype", "table 'H100 80GB BF16'", "MP mode DEFAULT", "") == (
        "fp32",
        "",
    )


@pytest.mark.parametrize(
    ("run_id", "loss"),
    [
        # Megatron-Bridge performance scripts: cross_entropy_fusion_impl = "te" in every container
        ("mbridge_25.09_LLAMA3_8B_DGX-B200_8gpu_na", "te"),
        ("mbridge_26.08_GPTOSS120B_DGX-GB300_64gpu_mxfp8", "te"),
        # NeMo 2 (25.04): GPTConfig cross_entropy_loss_fusion = True, native impl (a stack rule)
        ("nemo_longseq_llama3_8b_b200_8k_cp1", "fused"),
        # NeMo 24.07 (NeMo 1) and Megatron-LM's README runs: Megatron-Core's unfused default
        ("megatronlm_readme_h100_70B", None),
        ("mpt_H100-SXM-80GB_7b_s2048_8gpu_bf16", "torch"),
    ],
)
def test_loss_kernel_per_source(shipped, run_id, loss):
    case = case_of(shipped, run_id)
    assert case.scenario["kernels"].get("cross_entropy") == loss
    if loss:
        assert any(a.startswith(f"kernels: cross_entropy = {loss} (") for a in case.assumptions)


def test_stack_rule_sets_the_loss_kernel():
    rule = V.StackRule(cross_entropy="fused", table="nemo 25.04")
    assert rule.applies("performance_long_sequence.md (LLAMA3-8B FP8 B200, NeMo 25.04.rc2)", "", "")
    rules = V.source_rules("NVIDIA/NeMo docs/source/performance/performance_summary.md")
    assert rules.stack_for("cross_entropy", "(NeMo 24.07, DGX-H100, FP8)", "", "") == ("", "")
    value, why = rules.stack_for("cross_entropy", "(LLAMA3-8B FP8 B200, NeMo 25.04.rc2)", "", "")
    assert value == "fused" and "NeMo 2" in why


@pytest.mark.parametrize(
    ("run_id", "dtype"),
    [
        ("mpt_A100-SXM-40GB_1b_s2048_8gpu_bf16", "bf16"),  # "MP mode PURE"
        ("mpt_A100-SXM-80GB_70b_s2048_64gpu_bf16", "bf16"),  # "MP mode PURE"
        ("mpt_A100-SXM-80GB_7b_s2048_8gpu_bf16", "fp32"),  # "MP mode DEFAULT"
        ("mpt_H100-SXM-80GB_3b_s2048_512gpu_bf16", "fp32"),
    ],
)
def test_mpt_grad_reduce_dtype_follows_mp_mode(shipped, run_id, dtype):
    case = case_of(shipped, run_id)
    assert case.scenario["kernels"]["grad_reduce_dtype"] == dtype
    # PyTorch FSDP keeps only the fp32 gradient shard, whatever it reduces in
    assert case.scenario["memory"]["sharded_grad_dtype"] == "fp32"
    # and only the fp32 parameter shard under FULL_SHARD (ZeRO-3; SHARD_GRAD_OP rows keep 16-bit weights)
    zero3 = case.scenario["parallel"]["zero"] == 3
    assert case.scenario["memory"].get("sharded_param_dtype", "") == ("fp32" if zero3 else "")


def test_only_pytorch_fsdp_rows_keep_an_fp32_shard(shipped):
    # Narayanan 2021's ZeRO-3 (DeepSpeed) row keeps the default layout
    case = case_of(shipped, "narayanan21_t2_zero3_529.6B_640gpu")
    assert "sharded_grad_dtype" not in case.scenario.get("memory", {})
    assert "sharded_param_dtype" not in case.scenario.get("memory", {})


@pytest.mark.parametrize(
    ("run_id", "needle"),
    [
        ("narayanan21_text_gpt3_1024gpu", "parallel split"),
        ("nemo_longseq_llama2_7b_h100_32k_nocp", "parallel split"),
        ("nemo2407_lora_LLAMA2-7B_8gpu", "fine-tuning"),
        ("mbridge_26.08_DeepSeekV4Flash_DGX-GB300_128gpu_mxfp8", "mixture-of-experts"),
        ("mbridge_26.06_Nemotron_3_Nano_DGX-H100_16gpu_fp8", "mixture-of-experts"),
    ],
)
def test_unusable_rows_have_reasons(shipped, run_id, needle):
    out = V.build_case(shipped[run_id])
    assert isinstance(out, V.Unusable)
    assert needle in out.reason


def test_qwen3_moe_rows_use_the_known_architecture(shipped):
    case = case_of(shipped, "mbridge_26.04.01_Qwen3_235B_a22B_DGX-H100_256gpu_fp8")
    assert case.is_moe and not case.is_target
    assert case.scenario["parallel"]["ep"] == 32
    assert any("Qwen3-235B-A22B" in a for a in case.assumptions)
    s = V.scenario_for(case)
    assert s.model.num_experts == 128 and s.model.top_k == 8 and s.model.dim_per_head == 128
    nemotron = case_of(shipped, "nemo2407_pretrain_Nemotron-340B_128gpu")  # "Nemotron-3" is not MoE
    assert not nemotron.is_moe


def test_unknown_gpu_and_missing_architecture():
    run = V.PublishedRun(
        line=2,
        cells={
            "id": "x",
            "gpu": "TPU v4",
            "num_gpus": "8",
            "seq_len": "2048",
            "global_batch": "8",
            "tokens_per_s": "100",
        },
    )
    out = V.build_case(run)
    assert isinstance(out, V.Unusable) and "TPU" in out.reason
    run = V.PublishedRun(
        line=3,
        cells={
            "id": "y",
            "model_name": "mystery-9b",
            "gpu": "A100-SXM-80GB",
            "num_gpus": "8",
            "tp": "1",
            "pp": "1",
            "seq_len": "2048",
            "global_batch": "8",
            "tokens_per_s": "100",
        },
    )
    out = V.build_case(run)
    assert isinstance(out, V.Unusable) and "architecture" in out.reason


# ----------------------------------------------------------------------------- conventions
def test_narayanan_tflops_convention(shipped):
    case = case_of(shipped, "narayanan21_t1_145.6B")
    s = V.scenario_for(case)
    step_time_s = 20.0
    B, seq, L, h, vocab, n = 2304, 2048, 80, 12288, 51200, 1536
    expected = 96 * B * seq * L * h**2 * (1 + seq / (6 * h) + vocab / (16 * L * h)) / step_time_s / n / 1e12
    assert V.predicted_value(case, s, step_time_s) == pytest.approx(expected, rel=1e-12)
    # and it is 4/3 of the model FLOPs (to the logit term): HFU-style, not MFU
    model = V.source_flops_per_step(V.FLOPS_EXACT, s.model, B, "none") / step_time_s / n / 1e12
    assert 1.30 < expected / model < 1.34


def test_tokens_and_mpt_conventions(shipped):
    case = case_of(shipped, "mpt_H100-SXM-80GB_7b_s2048_8gpu_bf16")
    s = V.scenario_for(case)
    assert V.predicted_value(case, s, 2.0) == pytest.approx(48 * 2048 / 2.0 / 8)
    n = flops.total_params(s.model)
    per_token = 6 * n + 12 * 32 * 4096 * 2048
    assert V.mpt_flops_per_step(s.model, 48, "none") == pytest.approx(per_token * 48 * 2048)
    assert n == pytest.approx(6.659e9, rel=0.01)  # the row's params_b (MPT NumParams)
    # MFU fallback for FP8 rows uses the FP8 peak, as composer does
    fp8 = case_of(shipped, "mpt_H100-SXM-80GB_3b_s2048_8gpu_fp8")
    fp8_mfu = V.Case(
        **{**{f: getattr(fp8, f) for f in fp8.__dataclass_fields__}, "metric": V.METRIC_MFU, "measured": 27.7}
    )
    s8 = V.scenario_for(fp8_mfu)
    tokens_per_gpu = 480 * 2048 / 1.0 / 8
    expected = 100 * V.mpt_flops_per_step(s8.model, 1, "none") / 2048 * tokens_per_gpu / 1978.9e12
    assert V.predicted_value(fp8_mfu, s8, 1.0) == pytest.approx(expected)


def test_exact_causal_is_below_exact(shipped):
    case = case_of(shipped, "mbridge_25.11_LLAMA3_8B_DGX-H100_8gpu_fp8-cs")
    s = V.scenario_for(case)
    exact = V.source_flops_per_step(V.FLOPS_EXACT, s.model, 128, "none")
    causal = V.source_flops_per_step(V.FLOPS_EXACT_CAUSAL, s.model, 128, "none")
    assert 0.85 < causal / exact < 0.92  # published TFLOPs / tokens ratio: 0.889


# ----------------------------------------------------------------------------- end to end
def small_csv(tmp_path: Path, shipped, ids: list[str]) -> Path:
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=V.CSV_COLUMNS)
        w.writeheader()
        for i in ids:
            w.writerow(dict(shipped[i].cells))
    return path


IDS = [
    "narayanan21_t1_1.7B",
    "megatronlm_readme_h100_1.7B",
    "mpt_A100-SXM-40GB_1b_s2048_8gpu_bf16",
    "mpt_H100-SXM-80GB_1b_s2048_8gpu_bf16",
    "nemo2407_pretrain_LLAMA2-7B_8gpu",
    "mbridge_26.08_DeepSeekV4Flash_DGX-GB300_128gpu_mxfp8",
]


def test_validate_report_and_mape(shipped):
    runs = [shipped[i] for i in IDS]
    report = V.validate_runs(runs, fake_simulate, progress=False)
    assert len(report.results) == 5 and len(report.unusable) == 1
    summary = report.summary()
    assert summary["overall"]["rows"] == 5
    assert summary["target_a100_h100_dense_16bit"]["rows"] == 4
    assert set(summary["by_source"]) == {"narayanan21", "megatron-lm", "mpt", "nemo"}
    errs = [abs(r.error_pct) for r in report.results]
    assert summary["overall"]["mape_pct"] == pytest.approx(sum(errs) / len(errs))
    text = V.format_report(report)
    assert "MAPE" in text and "DeepSeekV4Flash" in text


def test_validate_jobs_gives_the_same_report_in_the_same_order(shipped):
    """`validate --jobs 2` (issue 16): forked workers simulate the rows; the report, its row
    order and its unusable rows (with their reasons) are those of one process."""
    runs = list(shipped.values())[::12]  # a spread of sources, GPUs and unusable rows
    one = V.validate_runs(runs, V.default_simulate(), progress=False)
    two = V.validate_runs(runs, V.default_simulate(), progress=False, jobs=2)
    assert one.results == two.results and one.unusable == two.unusable
    assert len(one.results) >= 20 and one.unusable


def test_cli_validate_small_csv(tmp_path, shipped, monkeypatch, capsys):
    monkeypatch.setattr(V, "default_simulate", lambda: fake_simulate)
    path = small_csv(tmp_path, shipped, IDS)
    out = tmp_path / "out.csv"
    assert cli.main(["validate", str(path), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "MAPE" in captured.out and "overall" in captured.out
    assert "6/6" not in captured.err  # progress only on a terminal (simulator/progress.py)
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok", "unusable"}
    assert cli.main(["validate", str(path), "--json", "--gpu", "A100"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert {r["gpu"] for r in data["rows"]} == {"A100-SXM-80GB", "A100-SXM-40GB"}
    assert data["summary"]["overall"]["rows"] == 2
    from simulator.loading import scenario_from_dict

    for row in data["rows"]:  # each row carries its SPEC §1 scenario, loadable as is
        assert scenario_from_dict(row["scenario"]).name == row["id"]
    assert cli.main(["validate", str(path), "--source", "nowhere"]) == 2
    assert "--source" in capsys.readouterr().err


def _bad(tmp_path: Path, name: str, text: str | None) -> Path:
    path = tmp_path / name
    if text is None:
        path.mkdir()
    else:
        path.write_text(text)
    return path


HEADER = ",".join(V.CSV_COLUMNS)
GOOD_ROW = "r1,src,GPT-1.7B,1.7,24,2304,24,24,9216,51200,2048,A100-SXM-80GB,32,1,1,32,1,,1,,512,full,no,none,,137,,44,,,"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("missing.csv", "id,source,gpu\nx,y,A100\n", "missing column"),
        ("nonnumeric.csv", HEADER + "\n" + GOOD_ROW.replace(",512,", ",lots,"), "global_batch"),
        ("nonnumeric2.csv", HEADER + "\n" + GOOD_ROW.replace(",137,", ",fast,"), "measured_tflops_per_gpu"),
        ("empty.csv", "", "empty"),
        ("header_only.csv", HEADER + "\n", "no data rows"),
        ("adir.csv", None, "directory"),
    ],
)
def test_bad_csv_exits_2_with_one_line(tmp_path, capsys, monkeypatch, name, text, needle):
    monkeypatch.setattr(V, "default_simulate", lambda: fake_simulate)
    path = _bad(tmp_path, name, text)
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and needle in err
    with pytest.raises(ConfigError):
        V.read_runs_csv(path)


def test_good_row_from_header_constant_parses(tmp_path):
    path = _bad(tmp_path, "ok.csv", HEADER + "\n" + GOOD_ROW + "\n")
    (run,) = V.read_runs_csv(path)
    assert isinstance(V.build_case(run), V.Case)


def test_engine_smoke(shipped):
    runs = [shipped["mpt_H100-SXM-80GB_1b_s2048_8gpu_bf16"], shipped["narayanan21_t1_1.7B"]]
    report = V.validate_runs(runs, V.default_simulate(), progress=False)
    assert len(report.results) == 2
    for r in report.results:
        assert r.step_time_s > 0 and abs(r.error_pct) < 60


# ----------------------------------------------------------------------------- calibration script
def _calibrate_module():
    return load_benchmark("calibrate", "mfusim_calibrate")


def test_calibration_pieces(tmp_path, shipped):
    import numpy as np

    from simulator.specs import GPUEfficiency

    C = _calibrate_module()
    x, value, _ = C.minimize(lambda z: float(np.sum((z - np.array([1.0, -2.0])) ** 2)), np.zeros(2))
    assert value < 1e-4 and np.allclose(x, [1.0, -2.0], atol=0.02)
    eff = GPUEfficiency(sustained_clock_fraction=0.91, kernel_launch_s=7e-6, overlap_slowdown=0.1)
    back = C.decode(C.encode(eff))
    assert back.sustained_clock_fraction == pytest.approx(0.91) and back.kernel_launch_s == pytest.approx(
        7e-6
    )
    cases = [c for c in (V.build_case(r) for r in shipped.values()) if isinstance(c, V.Case) and c.is_target]
    split = C.split_rows(cases)
    assert split == C.split_rows(list(reversed(cases)))  # order-independent, deterministic
    assert 0.45 < sum(split.values()) / len(split) < 0.55
    toml = tmp_path / "efficiency.toml"
    toml.write_text(
        "[default]\nsustained_clock_fraction = 0.8\n\n[h100-sxm]\nsustained_clock_fraction = 0.5\n"
    )
    res = C.FitResult("megatron-core/hopper", GPUEfficiency(), eff, 30.0, 31.0, 5.0, 6.0, 10, 11, 100, 1.0)
    C.write_efficiency([res], toml)
    C.write_efficiency([res], toml)  # idempotent: replaces its own table
    import tomllib

    data = tomllib.loads(toml.read_text())
    assert data["default"] == {"sustained_clock_fraction": 0.8}
    assert data["stacks"]["megatron-core"]["hopper"]["sustained_clock_fraction"] == pytest.approx(0.91)
    assert data["h200"]["sustained_clock_fraction"] == pytest.approx(0.91)  # same silicon: inherits
    assert data["h100-sxm"]["sustained_clock_fraction"] == pytest.approx(0.91)
    assert (
        toml.read_text().count("\n[h100-sxm]\n") == 1
        and "Written by benchmarks/calibrate.py" in toml.read_text()
    )


def test_calibration_only_rewrites_its_own_tables(tmp_path):
    """`calibrate.py --only megatron-core/hopper` replaces that group's table and the per-GPU
    tables taking a value from it (Hopper, and Ampere's framework residuals); every other table
    (the other stacks, Blackwell) stays byte for byte, so helpers refitting different groups
    merge cleanly."""
    import tomllib

    from simulator.resources import catalog_file
    from simulator.specs import GPUEfficiency

    C = _calibrate_module()
    toml = tmp_path / "efficiency.toml"
    original = catalog_file("efficiency.toml").read_text(encoding="utf-8")
    toml.write_text(original, encoding="utf-8")
    eff = GPUEfficiency(sustained_clock_fraction=0.9, kernel_launch_s=3e-6, nccl_bw_fraction=0.8)
    res = C.FitResult("megatron-core/hopper", GPUEfficiency(), eff, 30.0, 31.0, 5.0, 6.0, 10, 11, 100, 1.0)
    C.write_efficiency([res], toml, only=True)
    before, after = tomllib.loads(original), tomllib.loads(toml.read_text(encoding="utf-8"))
    assert after["stacks"]["megatron-core"]["hopper"]["sustained_clock_fraction"] == pytest.approx(0.9)
    assert after["h100-sxm"]["kernel_launch_s"] == pytest.approx(3e-6)
    assert after["a100-80gb"]["nccl_bw_fraction"] == pytest.approx(0.8)  # framework residuals: the stack's
    assert after["a100-80gb"]["sustained_clock_fraction"] == pytest.approx(  # the chip's clock: Ampere fit
        before["stacks"]["composer-fsdp"]["ampere"]["sustained_clock_fraction"]
    )

    def table(text: str, header: str) -> str:
        start = text.index(f"\n[{header}]\n")
        return text[start : text.index("\n[", start + 1)]

    for header in (
        "default",
        "stacks.composer-fsdp.ampere",
        "stacks.megatron-core.blackwell",
        "b200",
        "gb300",
    ):
        assert table(toml.read_text(encoding="utf-8"), header) == table(original, header)
    assert C.main(["--only", "megatron-core/volta", "--dry-run"]) == 2


@pytest.mark.parametrize(
    ("label", "topology"),
    [
        ("A100-SXM-80GB", "dgx-a100"),
        ("NVIDIA A100 80GB", "dgx-a100"),
        ("A100-SXM4-40GB", "dgx-a100-40gb"),
        ("A100 40GB", "dgx-a100-40gb"),
        ("H100 SXM5 80GB", "dgx-h100"),
        ("H200", "dgx-h200"),
        ("GB200 NVL72", "gb200-nvl72"),
        ("B300", "dgx-b200"),
    ],
)
def test_gpu_labels(label, topology):
    mapping = V.gpu_mapping(label)
    assert isinstance(mapping, V.GPUMapping) and mapping.topology == topology


def test_unsupported_gpu_labels():
    for label in ("TPU v4", "H100 PCIe", "MI300X"):
        assert isinstance(V.gpu_mapping(label), str)
    teton = V.gpu_mapping("H100-SXM-96GB-HBM2e (500W, Grand Teton)")  # its own catalog part
    assert isinstance(teton, V.GPUMapping) and teton.topology == "dgx-h100" and teton.gpu == "h100-sxm-96gb"
    from simulator.loading import gpu_by_name

    # the platform alone is not the part: Llama 3 trained on 700 W 80 GB H100s in Grand Teton servers
    llama3 = V.gpu_mapping("H100 80GB HBM3 700W Grand Teton")
    assert isinstance(llama3, V.GPUMapping) and llama3.gpu is None and llama3.topology == "dgx-h100"
    part = gpu_by_name("h100-sxm-96gb")
    assert part.board_power_w == 500.0 and part.hbm_bandwidth_bytes_per_s == pytest.approx(2.4e12)


def test_other_sources_rules_and_torchtitan_flops():
    titan = V.source_rules("pytorch/torchtitan benchmarks")
    assert titan.key == "torchtitan" and titan.zero == 3 and titan.flop_convention == V.FLOPS_TORCHTITAN
    assert V.source_rules("Dubey et al. 2024, The Llama 3 Herd of Models").zero == 2
    assert V.source_rules("NeMo AutoModel performance").key == "automodel"
    assert V.source_rules("someone's blog").key == "other"
    from simulator.loading import model_preset

    m = model_preset("llama3-8b")
    n = flops.total_params(m) - m.vocab * m.hidden
    per_token = 6 * n + 12 * 32 * 4096 * 8192
    assert V.torchtitan_flops_per_step(m, 2) == pytest.approx(2 * 8192 * per_token)


def test_lenient_cells():
    assert V.parse_dtype("BF16") == "bf16" and V.parse_dtype("amp_bf16") == "bf16"
    assert V.parse_dtype("FP8-CS") == "fp8" and V.parse_dtype("mxfp8") == "mxfp8"
    assert (
        V.parse_dtype("") == "" and V.parse_dtype("nvfp4") == "nvfp4" and V.parse_dtype("fp8-mx") == "mxfp8"
    )
    assert V.parse_recompute("Full") == "full" and V.parse_recompute("selective") == "selective"
    assert V.parse_recompute("") == "" and V.parse_recompute("sometimes") is None
    assert V.parse_zero("ZeRO-1") == 1 and V.parse_zero("dist_opt") == 1 and V.parse_zero("FSDP") == 3
    assert V.parse_zero("zero2") == 2 and V.parse_zero("") == -1 and V.parse_zero("magic") is None


def test_row_without_num_gpus_or_seq_len_uses_what_it_has():
    cells = {
        "id": "z",
        "model_name": "LLAMA3-8B",
        "gpu": "H100-SXM-80GB",
        "num_gpus": "",
        "tp": "1",
        "pp": "1",
        "dp": "8",
        "seq_len": "",
        "global_batch": "64",
        "tokens_per_s": "10000",
        "precision": "bf16",
    }
    case = V.build_case(V.PublishedRun(line=2, cells=cells))
    assert isinstance(case, V.Case)
    assert case.scenario["cluster"]["num_gpus"] == 8
    s = V.scenario_for(case)
    assert s.model.seq_len == 8192  # the llama3-8b preset's


# ----------------------------------------------------------------------------- MoE (issue 13)
@pytest.mark.parametrize(
    ("run_id", "preset", "mtp"),
    [
        ("mbridge_26.04.01_DeepSeekV3_DGX-GB200_256gpu_mxfp8", "deepseek-v3", 1),
        ("mbridge_25.11_DeepSeekV3_DGX-GB300_256gpu_bf16", "deepseek-v3", 0),  # "(w/o MTP)"
        ("mbridge_26.04.01_Kimi_K2_DGX-GB300_256gpu_mxfp8", "kimi-k2", 0),
        ("mbridge_26.04.01_GPTOSS120B_DGX-H100_64gpu_bf16", "gpt-oss-120b", 0),
    ],
)
def test_moe_rows_now_simulated(shipped, run_id, preset, mtp):
    case = case_of(shipped, run_id)
    assert case.is_moe and case.scenario["model"]["preset"] == preset
    s = V.scenario_for(case)
    assert s.model.mtp_layers == mtp and s.model.routing == "balanced"  # force-balanced benchmarks


def test_forced_rows_get_the_sampling_spread_tokendrop_rows_exact_balance(shipped):
    """Force-balanced rows (random router logits): the busiest EP rank is the sampling spread's
    expected maximum (routing_skew.py); token-drop rows pad every expert to capacity 1.0, so all
    ranks carry the same load: load_imbalance = 1 exactly."""
    from simulator.routing_skew import busiest_rank_factor

    forced = V.scenario_for(case_of(shipped, "mbridge_26.04.01_DeepSeekV3_DGX-GB200_256gpu_mxfp8"))
    m, par = forced.model, forced.parallel
    tokens = par.micro_batch * m.seq_len * par.ep  # tp = cp = etp = 1 on this row
    assert (par.tp, par.cp, par.expert_tp) == (1, 1, 1)
    assert forced.expert_load_imbalance == busiest_rank_factor(m.num_experts, m.top_k, par.ep, tokens, 0.0)
    assert 1.005 < forced.expert_load_imbalance < 1.02
    dropped = case_of(shipped, "mbridge_25.09_DeepSeekV3_DGX-GB200_256gpu_na")
    assert "tokendrop" in dropped.scenario["model"]["name"].lower()
    assert V.scenario_for(dropped).expert_load_imbalance == 1.0
    assert any("padded to capacity" in n for n in dropped.assumptions)


def test_moe_pipeline_slots_and_racks(shipped):
    """Qwen3-235B (94 layers) at pp 4 · vp 12: 94 + embedding + loss = 96 slots, as Megatron's
    account-for-embedding/loss split makes it; 256 GB300 in 64-GPU NVLink segments."""
    case = case_of(shipped, "mbridge_26.04.01_Qwen3_235B_a22B_DGX-GB300_256gpu_mxfp8")
    par = case.scenario["parallel"]
    assert par["vp"] == 12 and par["account_for_embedding_in_pipeline_split"]
    assert case.scenario["cluster"]["gpus_used_per_node"] == 64
    assert case.dtype == "mxfp8"
    s = V.scenario_for(case)
    assert s.parallel.pipeline_extra_layers == 2


def test_data_spread_is_reported_not_fitted(shipped):
    """The same Qwen3-30B-A3B configuration on 16 H100 measured 10,494 and 5,275 tokens/s/GPU in
    two container releases: one spread group, with both rows and their ratio."""
    from simulator.validate.spread import moe_summary, spread_groups

    ids = [
        "mbridge_25.09_Qwen3_30B_a3B_DGX-H100_16gpu_na",
        "mbridge_25.11_Qwen3_30B_a3B_DGX-H100_16gpu_fp8-cs",
        "mbridge_26.04.01_Qwen3_30B_a3B_DGX-H100_16gpu_fp8",
    ]
    report = V.validate_runs([shipped[i] for i in ids], fake_simulate, progress=False)
    groups = spread_groups(report.results)
    assert len(groups) == 1
    g = groups[0]
    assert set(g["rows"]) == set(ids[:2]) and g["ratio"] == pytest.approx(10494 / 5275)
    moe = moe_summary(report.results)
    assert moe["all"]["rows"] == 3 and moe["data_spread"] == groups
    assert "Data spread" in V.format_report(report)


def test_spread_floor_is_the_best_single_prediction():
    """The floor of one group is min over c of sum |c/m - 1|: a convex piecewise-linear function,
    so a fine grid never beats the best measurement-valued c."""
    from simulator.validate.spread import best_constant_error_pct

    assert best_constant_error_pct([100.0]) == 0.0
    assert best_constant_error_pct([100.0, 200.0]) == pytest.approx(50.0)  # c = 100: 0 + 50%
    assert best_constant_error_pct([100.0, 150.0, 200.0]) == pytest.approx(75.0)  # c = 150
    ms = [5275.0, 9058.0, 10494.0, 7000.0]
    grid = [4000.0 + 10.0 * i for i in range(800)]
    brute = min(100.0 * sum(abs(c / m - 1.0) for m in ms) for c in grid)
    assert best_constant_error_pct(ms) <= brute + 1e-9
    assert best_constant_error_pct(ms) == pytest.approx(brute, rel=0.01)


def test_spread_floor_bounds_every_simulator_from_below(shipped):
    """Rows that simulate the very same scenario get one prediction from any simulator, so the
    reported floor is below the MAPE of any prediction: here the fake one, and a constant."""
    from simulator.validate.spread import spread_floor_pct

    ids = [
        "mbridge_26.06_GPTOSS120B_DGX-GB300_64gpu_mxfp8",
        "mbridge_26.06.01_GPTOSS120B_DGX-GB300_64gpu_mxfp8",
        "mbridge_26.08_GPTOSS120B_DGX-GB300_64gpu_mxfp8",
    ]
    report = V.validate_runs([shipped[i] for i in ids], fake_simulate, progress=False)
    scenarios = {str({k: v for k, v in r.case.scenario.items() if k != "name"}) for r in report.results}
    assert len(scenarios) == 1  # the same recipe in the three releases: one scenario
    floor = spread_floor_pct(report.results)
    measured = sorted(r.case.measured for r in report.results)
    assert floor > 0
    mape = sum(abs(r.error_pct) for r in report.results) / 3
    assert floor <= mape + 1e-9
    for c in measured:  # a constant prediction per scenario can at best reach the floor
        assert floor <= 100.0 * sum(abs(c / m - 1.0) for m in measured) / 3 + 1e-9


def test_label_and_source_tables_name_real_topologies_gpus_and_conventions():
    # the tables are data (simulator/catalog/gpu_labels.toml, validate_sources.toml): every name
    # in them must resolve, or a row would fail only when a CSV happens to use it
    from simulator.loading import gpu_by_name, load_topology
    from simulator.resources import published_runs_csv, topology_names

    table = V.gpu_labels()
    mappings = [m for _, m in table.labels] + [table.grand_teton]
    for m in mappings:
        assert m.topology in topology_names()
        assert load_topology(m.topology).gpus_per_node > 0
        if m.gpu is not None:
            assert gpu_by_name(m.gpu).name == m.gpu
    assert {label for _, label in table.parts} <= {k for k, _ in table.labels}
    sources = V.known_sources()
    assert len({s.rules.key for s in sources.sources}) == len(sources.sources)
    for s in sources.sources:
        assert s.rules.flop_convention in flops.FLOP_CONVENTIONS
        assert s.rules.dtype in ("bf16", "fp16", "fp8") and s.rules.recompute in ("none", "selective", "full")
        assert 0 <= s.rules.zero <= 3
    # every source of the shipped CSV is recognised by its text, not by the generic fallback
    shipped_keys = {s.rules.key for s in sources.sources if s.in_shipped_csv}
    runs = V.read_runs_csv(published_runs_csv())
    assert {V.source_rules(r.source, "").key for r in runs} == shipped_keys


# ----------------------------------------------------------------------------- published elsewhere
def test_supplement_fills_only_empty_cells_of_rows_that_exist(shipped):
    """Every supplemented id is a shipped row of the named source, and it never disagrees with a
    cell the CSV gives (the CSV is the published record; the supplement only fills its gaps)."""
    from simulator.validate.supplement import supplements

    table = supplements()
    assert table, "the shipped supplement is empty"
    for run_id, sup in table.items():
        assert run_id in shipped, run_id
        run = shipped[run_id]
        assert sup.source_match in run.source.lower(), run_id
        assert "@" in sup.cite, f"{run_id}: cite a file at a commit"
        for column, value in sup.cells:
            assert run.get(column) in ("", value), (run_id, column, run.get(column), value)


def test_narayanan_table1_uses_the_papers_launch_script(shipped):
    """run_table_1.sh: 7.5B ran MBS=16 with PyTorch DDP (gradients reduced during the backward
    pass); 39.1B ran pp=2 without interleaving, which the default rule would have interleaved."""
    case = case_of(shipped, "narayanan21_t1_7.5B")
    par = case.scenario["parallel"]
    assert par["micro_batch"] == 16 and par["global_batch"] == 512
    assert par["overlap_grad_reduce"] is True
    assert any("run_table_1.sh" in n and n.startswith("micro_batch") for n in case.assumptions)
    big = case_of(shipped, "narayanan21_t1_39.1B").scenario["parallel"]
    assert big["vp"] == 1 and big["schedule"] == "1f1b" and big["micro_batch"] == 4
    assert big["overlap_grad_reduce"] is False


def test_supplement_ignores_a_row_of_another_source(shipped):
    run = shipped["narayanan21_t1_7.5B"]
    other = V.PublishedRun(line=run.line, cells={**run.cells, "source": "my own cluster, 2026"})
    case = V.build_case(other)
    assert isinstance(case, V.Case)
    assert case.scenario["parallel"]["micro_batch"] == 1  # the generic default, not the script's


def test_rows_that_ran_but_do_not_fit_are_reported(shipped):
    """A published run ran, so a memory model that says it does not fit disagrees with a
    measurement: validate counts those rows (per GPU) in the summary and the text, and leaves the
    predictions alone; rows without a memory report are not counted."""
    from types import SimpleNamespace

    runs = [shipped[i] for i in IDS]
    over = {"narayanan21_t1_1.7B", "nemo2407_pretrain_LLAMA2-7B_8gpu"}

    def simulate(scn):
        base = fake_simulate(scn)
        fits = scn.name not in over
        return SimpleNamespace(step_time_s=base.step_time_s, mfu=base.mfu, memory=SimpleNamespace(fits=fits))

    report = V.validate_runs(runs, simulate, progress=False)
    mem = report.summary()["memory_disagreements"]
    assert mem["rows"] == 2 and mem["of"] == 5
    assert mem["by_gpu"] == {"A100-SXM-80GB": 1, "H100-SXM-80GB": 1}
    assert "Memory: 2 of 5 rows ran" in V.format_report(report)
    plain = V.validate_runs(runs, fake_simulate, progress=False)  # no memory report: nothing counted
    assert plain.summary()["memory_disagreements"]["rows"] == 0
    assert [r.predicted for r in plain.results] == [r.predicted for r in report.results]


def _automodel_case(model_name: str, ep: str, gpus: str, dp: str, pp: str = "1") -> V.Case:
    """A row as the NeMo AutoModel performance summary publishes it (no recompute, routing or
    dispatcher cells; EP blank for the GPT-OSS rows)."""
    cells = {
        "id": "automodel_" + model_name.lower().replace(" ", "_"),
        "source": "NVIDIA-NeMo/Automodel docs/performance-summary.md (NeMo AutoModel)",
        "model_name": model_name,
        "gpu": "H100-SXM-80GB",
        "num_gpus": gpus,
        "tp": "1",
        "pp": pp,
        "dp": dp,
        "ep": ep,
        "seq_len": "4096",
        "micro_batch": "1",
        "global_batch": str(8 * int(dp)),
        "zero_or_dist_opt": "fsdp",
        "precision": "bf16",
        "tokens_per_s": "1000",
    }
    case = V.build_case(V.PublishedRun(line=2, cells=cells))
    assert isinstance(case, V.Case)
    return case


def test_automodel_rows_run_the_benchmarks_gate_dispatcher_and_recompute() -> None:
    """The AutoModel rules (validate_sources.toml, from its benchmark recipes): FakeBalancedGate ->
    round_robin routing, DeepEP, full recompute, FSDP2's fp32 shards, no DeepSeek MTP module, and
    EP over every data-parallel rank where the table leaves it blank."""
    dsv3 = V.scenario_for(_automodel_case("DeepSeek V3 671B", "64", "256", "64", pp="4"))
    assert dsv3.model.routing == "round_robin" and dsv3.model.mtp_layers == 0
    assert dsv3.kernels.moe_dispatcher == "deepep"
    assert dsv3.parallel.recompute == "full" and dsv3.parallel.ep == 64
    assert dsv3.memory.sharded_param_dtype == "fp32"
    oss = V.scenario_for(_automodel_case("GPT-OSS 20B", "", "8", "8"))
    assert oss.model.num_experts == 32 and oss.parallel.ep == 8 and oss.parallel.recompute == "full"
    # a per-model rule: the GPT-OSS 120B recipe turns activation checkpointing off
    big = _automodel_case("GPT-OSS 120B", "", "64", "64")
    assert V.scenario_for(big).parallel.recompute == "none" and V.scenario_for(big).parallel.ep == 64
    assert any("activation_checkpointing false" in a for a in big.assumptions)
    qwen = V.scenario_for(_automodel_case("Qwen3 MoE 30B", "8", "8", "8"))
    assert qwen.model.num_experts == 128 and qwen.model.top_k == 8
    # a Megatron-Bridge row keeps Megatron's forced balancing and its MTP module
    mb = V.build_case(
        next(r for r in V.read_runs_csv(published_runs_csv()) if "DeepSeekV3_DGX-GB200" in r.run_id)
    )
    assert isinstance(mb, V.Case)
    assert V.scenario_for(mb).model.routing == "balanced"


def _torchtitan_row(recompute: str, pp: str = "1", precision: str = "fp8") -> V.Case | V.Unusable:
    """A row as torchtitan's benchmarks publish one (benchmarks/llama3_h100_202412_torchtitan.md
    @820504e2: TP, PP, FSDP, local batch, the AC mode, Float8 or not)."""
    tp, dp = "8", str(64 // int(pp))
    cells = {
        "id": "torchtitan_llama3_405b",
        "source": "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md",
        "model_name": "Llama 3.1 405B",
        "gpu": "H100-SXM-80GB",
        "num_gpus": "512",
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "seq_len": "8192",
        "micro_batch": "4",
        "global_batch": str(4 * 8 * int(dp)),
        "zero_or_dist_opt": "fsdp",
        "recompute": recompute,
        "precision": precision,
        "tokens_per_s": "100",
    }
    return V.build_case(V.PublishedRun(line=2, cells=cells))


def test_torchtitan_rows_run_its_stack_and_refuse_its_selective_ac() -> None:
    """validate's torchtitan rule follows what torchtitan ran (validate_sources.toml, cited there):
    its selective AC (op policy: keeps SDPA and every other matmul output; layer policy: every k-th
    block) is not mfusim's Megatron attention-core recompute, so a selective or unstated (its default
    is selective) recompute is refused, naming the reason; full AC rows run FSDP2's fp32 shards,
    F.cross_entropy on .float() logits, SDPA's FA2, Float8's dynamic (current) scaling and, under
    pipeline parallelism, parameters kept gathered for the step (reshard_after_forward false)."""
    for cell in ("selective", ""):
        refused = _torchtitan_row(cell)
        assert isinstance(refused, V.Unusable), cell
        assert "selective" in refused.reason and "torchtitan" in refused.reason
    case = _torchtitan_row("full", pp="8")
    assert isinstance(case, V.Case) and case.source_key == "torchtitan"
    scn = V.scenario_for(case)
    assert scn.parallel.recompute == "full" and scn.parallel.zero == 3
    assert not scn.parallel.reshard_after_forward
    assert scn.kernels.attention == "fa2" and scn.kernels.cross_entropy == "torch"
    assert scn.memory.sharded_param_dtype == "fp32" and scn.memory.sharded_grad_dtype == "fp32"
    assert scn.fp8_recipe == "current"
    # torch.distributed.pipelining: one schedule per step, PipelineStage's blocking reduce-scatter
    assert scn.parallel.local_batch == scn.parallel.global_batch // scn.parallel.dp
    flat = _torchtitan_row("full", precision="bf16")
    assert isinstance(flat, V.Case)
    assert V.scenario_for(flat).parallel.reshard_after_forward  # FSDP2 without PP reshards
    assert V.scenario_for(flat).parallel.local_batch == 0  # no pipeline: Megatron-style accumulation
    # the Llama 3 paper's rule is unchanged: FSDP kept after forward, no activation checkpointing
    paper = V.source_rules("Dubey et al. 2024, The Llama 3 Herd of Models")
    assert paper.zero == 2 and paper.recompute == "none" and not paper.recompute_not_modelled
