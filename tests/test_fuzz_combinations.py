"""Inputs a combination fuzzer found mis-handled (round 2, fourteenth session's fuzz lane).

Each test pins one defect: before its fix the input crashed, printed an impossible number or
silently simulated something else; now it is refused with exit status 2 and one line naming
the key, or simulated with numbers that keep the SPEC's invariants.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SMALL_SCENARIO, CliResult

import mfusim


def _refused(result: CliResult, key: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert len(result.err_lines) == 1, result.err
    assert "Traceback" not in result.err
    assert f"'{key}'" in result.err or key in result.err, result.err


def test_headroom_above_the_gpu_memory_is_refused(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # memory.headroom_gib above the A100's 79 GiB made capacity_gib negative (-21 GiB) in --json
    path = write_file(SMALL_SCENARIO + "\n[memory]\nheadroom_gib = 100.0\n")
    _refused(run_cli(["run", str(path), "--json"]), "memory.headroom_gib")
    # the flag takes the same check (it sets the same key)
    small = write_file(SMALL_SCENARIO, name="small.toml")
    result = run_cli(["run", str(small), "--json", "--memory-headroom", "80"])
    _refused(result, "--memory-headroom")
    # just below the GPU's memory is legal: a configuration that does not fit, never a negative one
    ok = run_cli(["run", str(small), "--json", "--memory-headroom", "79"])
    assert ok.code == 0, ok.err
    assert '"capacity_gib": -' not in ok.out


def test_api_dict_with_a_non_string_top_level_key_is_a_config_error() -> None:
    # a non-string key crashed ConfigError itself (AttributeError: 'int' object has no
    # attribute 'startswith')
    with pytest.raises(mfusim.ConfigError) as info:
        mfusim.load_scenario({1: 2})  # type: ignore[dict-item]
    assert info.value.key == "1"
    assert "unknown" in str(info.value)


@pytest.mark.parametrize("overrides", [5, 2.5, True])
def test_api_overrides_of_the_wrong_type_are_a_config_error(overrides: object) -> None:
    # was TypeError: 'int' object is not iterable, from inside the override parser
    with pytest.raises(mfusim.ConfigError) as info:
        mfusim.load_scenario("teaching-pp4", overrides=overrides)  # type: ignore[arg-type]
    assert info.value.key == "overrides"
    assert type(overrides).__name__ in str(info.value)


SWEEP_SCENARIO = SMALL_SCENARIO.replace("[variability]", "[sweep]\ntp = [1, 2]\n\n[variability]")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "{s}", "--trace", ""], "--trace"),
        (["sweep", "{w}", "--jobs", "1", "--out", ""], "--out"),
        (["sweep", "{w}", "--jobs", "1", "--export-best", ""], "--export-best"),
        (["sweep", "{w}", "--jobs", "1", "--export-top", "1", ""], "--export-top"),
        (["sweep", "{w}", "--jobs", "1", "--dask", ""], "--dask"),
        (["validate", "--out", ""], "--out"),
    ],
)
def test_an_empty_output_flag_is_refused_not_ignored(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], argv: list[str], flag: str
) -> None:
    # each of these ran to exit 0 writing nothing (or exporting into the working directory, or
    # running locally): the empty value failed the `if args.x:` test and the flag was dropped
    s, w = write_file(SMALL_SCENARIO), write_file(SWEEP_SCENARIO, name="sweep.toml")
    result = run_cli([a.format(s=s, w=w) for a in argv])
    _refused(result, f"flag {flag}")


def test_validate_with_an_empty_runs_path_does_not_read_the_published_csv(
    run_cli: Callable[[list[str]], CliResult],
) -> None:
    # `mfusim validate ''` validated the shipped calibration CSV instead of the file asked for
    result = run_cli(["validate", ""])
    assert result.code == 2, result.out[:200]
    assert len(result.err_lines) == 1 and "Traceback" not in result.err
    assert not result.out


def test_rope_mscale_on_learned_positions_is_refused(run_cli: Callable[[list[str]], CliResult]) -> None:
    # gpt3-1.3b has learned absolute positions: a YaRN factor there changed nothing (the step
    # time was identical to the letter) and was accepted without a word
    result = run_cli(["run", "teaching-pp4", "--json", "--set", "model.rope_mscale=1.5"])
    _refused(result, "model.rope_mscale")
    # with RoPE it is costed (the unfused YaRN RoPE), and 1 stays legal everywhere
    rope = run_cli(["run", "teaching-pp4", "--json", "--set", "model.position_embeddings=false"])
    yarn = run_cli(
        [
            "run",
            "teaching-pp4",
            "--json",
            "--set",
            "model.position_embeddings=false",
            "--set",
            "model.rope_mscale=1.5",
        ]
    )
    assert rope.code == yarn.code == 0, (rope.err, yarn.err)
    assert json.loads(yarn.out)["step_time_s"] > json.loads(rope.out)["step_time_s"]
    assert run_cli(["run", "teaching-pp4", "--json", "--set", "model.rope_mscale=1"]).code == 0


MFU_BASE = ["mfu", "--gpus", "8", "--gpu", "h100-sxm"]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        # 6Ψ has no sequence length: --seq-len with --params and --tokens-per-s was dropped
        (["--params", "7e9", "--tokens-per-s", "1e5", "--seq-len", "4096"], "--seq-len"),
        # --global-batch only turns --step-time-s into tokens/s: beside --tokens-per-s it was dropped
        (["--params", "7e9", "--tokens-per-s", "1e5", "--global-batch", "8"], "--global-batch"),
        (["--model", "llama3-8b", "--tokens-per-s", "1e5", "--global-batch", "8"], "--global-batch"),
    ],
)
def test_mfu_flags_that_would_be_ignored_are_refused(
    run_cli: Callable[[list[str]], CliResult], extra: list[str], flag: str
) -> None:
    _refused(run_cli(MFU_BASE + extra), f"flag {flag}")


def test_mfu_flags_that_are_used_stay_legal(run_cli: Callable[[list[str]], CliResult]) -> None:
    for extra in (
        ["--params", "7e9", "--step-time-s", "1", "--global-batch", "8", "--seq-len", "4096"],
        ["--model", "llama3-8b", "--tokens-per-s", "1e5", "--seq-len", "4096"],
        ["--model", "llama3-8b", "--step-time-s", "1", "--global-batch", "8"],
    ):
        result = run_cli([*MFU_BASE, *extra, "--json"])
        assert result.code == 0, (extra, result.err)


def test_mfu_on_a_gpu_without_bf16_tensor_cores_uses_fp16_or_refuses_bf16(
    run_cli: Callable[[list[str]], CliResult],
) -> None:
    # as scenarios and `mfusim kernel gemm` do: the V100 defaults to fp16 and refuses bf16
    # (the calculator reported "125 TFLOP/s dense bf16", a BF16 rate the V100 does not have)
    base = ["mfu", "--params", "7e9", "--tokens-per-s", "1e4", "--gpus", "8", "--gpu", "v100-32gb"]
    result = run_cli([*base, "--json"])
    assert result.code == 0, result.err
    assert json.loads(result.out)["dtype"] == "fp16"
    _refused(run_cli([*base, "--dtype", "bf16"]), "flag --dtype")
    assert (
        json.loads(run_cli(["mfu", "--params", "7e9", "--tokens-per-s", "1e5", *MFU_BASE[1:], "--json"]).out)[
            "dtype"
        ]
        == "bf16"
    )


@pytest.mark.parametrize("jitter", [0.1, 0.5, 1.0])
def test_a_jittered_loader_never_beats_its_throughput(jitter: float) -> None:
    # a loader slower than the GPU: 32 batches of 100 ms over 2 workers take 1.6 s per step on
    # average (the jitter multipliers have mean 1). Every replayed step drew the same latencies,
    # so the step ran at that one sample's pace: 1.23 s at jitter 1.0, seed 0 (23% faster than the
    # loader can deliver), and faster the larger the jitter.
    data = {
        "name": "loader-bound",
        "model": {"preset": "gpt3-1.3b", "layers": 2, "seq_len": 128},
        "cluster": {"topology": "dgx-a100", "num_gpus": 1},
        "parallel": {"micro_batch": 1, "global_batch": 32},
        "dataloader": {"microbatch_latency_ms": 100.0, "workers": 2, "prefetch": 1, "jitter": jitter},
    }
    bound_s = 32 * 0.100 / 2
    for seed in (0, 1, 2):
        data["dataloader"]["seed"] = seed
        report = mfusim.simulate(data)
        assert report.step_time_s >= bound_s * (1 - 1e-9), (seed, report.step_time_s)
        assert sum(report.breakdown_s.values()) == pytest.approx(report.step_time_s, rel=1e-6)


LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        # bool("false") is True: the string read as tied embeddings, the opposite of what it says
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings"),
        ({"hidden_act": ["silu"]}, "hidden_act"),  # read as no known activation
        ({"model_type": ["llama"]}, "model_type"),
        ({"alibi": "false"}, "alibi"),  # read as ALiBi present (truthy)
        # a string YaRN factor was read as "no YaRN": the attention factor dropped
        ({"rope_scaling": {"rope_type": "yarn", "factor": "4"}}, "rope_scaling"),
    ],
)
def test_hf_config_values_of_the_wrong_json_type_are_refused(
    run_cli: Callable[[list[str]], CliResult],
    write_file: Callable[..., Path],
    change: dict[str, object],
    key: str,
) -> None:
    config = write_file(json.dumps({**LLAMA_CONFIG, **change}), name="config.json")
    scenario = write_file(
        f'[model]\nhf_config = "{config}"\nseq_len = 512\n[cluster]\ntopology = "dgx-h100"\nnum_gpus = 8\n'
        "[parallel]\nmicro_batch = 1\nglobal_batch = 8\n"
    )
    result = run_cli(["run", str(scenario), "--json"])
    _refused(result, key)
    assert "config.json" in result.err
    good = write_file(json.dumps(LLAMA_CONFIG), name="config.json")
    assert good == config and run_cli(["run", str(scenario), "--json"]).code == 0


def test_api_plan_refuses_the_step_of_another_scenario() -> None:
    # the plan took tokens/s from the report and GPUs, batch and power from the scenario: a
    # 64-GPU step planned as the 4-GPU scenario's run gave GPU-hours for neither
    scn = mfusim.load_scenario("teaching-pp4")
    other = mfusim.simulate("seed-7b-64-a100")
    with pytest.raises(mfusim.ConfigError) as info:
        mfusim.plan(scn, other, tokens=1e12)
    assert info.value.key == "report"
    own = mfusim.plan(scn, mfusim.simulate(scn), tokens=1e12)
    assert own.gpu_hours == mfusim.plan("teaching-pp4", tokens=1e12).gpu_hours


def test_api_dict_takes_a_path_object_where_it_takes_a_path(tmp_path: Path) -> None:
    # a pathlib.Path topology was refused as "must be a topology name or a path to a topology file"
    topology = Path(__file__).resolve().parents[1] / "topologies" / "dgx-a100.toml"
    base = {"model": {"preset": "gpt3-1.3b"}, "parallel": {"micro_batch": 1, "global_batch": 8}}
    by_path = mfusim.load_scenario({**base, "cluster": {"topology": topology, "num_gpus": 8}})
    by_text = mfusim.load_scenario({**base, "cluster": {"topology": str(topology), "num_gpus": 8}})
    assert by_path == by_text
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_CONFIG))
    hf = {"hf_config": config, "seq_len": 512}
    cluster = {"topology": "dgx-h100", "num_gpus": 8}
    assert mfusim.load_scenario({**base, "model": hf, "cluster": cluster}).model.hidden == 512


@pytest.mark.parametrize("command", [["run"], ["sweep"], ["whatif"], ["compare", "teaching-pp4"]])
def test_an_empty_scenario_path_says_so(
    run_cli: Callable[[list[str]], CliResult], command: list[str]
) -> None:
    # Path("") is "." : the error read ".: is a directory, expected a TOML file"
    result = run_cli([*command, ""])
    assert result.code == 2 and len(result.err_lines) == 1
    assert "empty scenario path" in result.err and ".:" not in result.err


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["kernels.zero3_collectives=flat"], "kernels.zero3_collectives changes nothing"),
        (
            ["kernels.zero3_backward_prefetch=post", "parallel.zero=1"],
            "kernels.zero3_backward_prefetch changes",
        ),
        (["parallel.sequence_parallel=true"], "parallel.sequence_parallel = true changes nothing"),
        (["parallel.tp_comm_overlap=true"], "parallel.tp_comm_overlap = true changes nothing"),
    ],
)
def test_switches_that_change_nothing_here_say_so(
    run_cli: Callable[[list[str]], CliResult], sets: list[str], said: str
) -> None:
    # each was accepted without a word on teaching-pp4 (tp = 1, zero = 0) and left the step
    # time identical to the last digit, as the expert-only kernel switches on a dense model,
    # which already said so
    argv = ["run", "teaching-pp4", "--json"]
    base = run_cli(argv)
    for s in sets:
        argv += ["--set", s]
    result = run_cli(argv)
    assert result.code == 0, result.err
    assert said in result.err
    assert said in " ".join(json.loads(result.out)["warnings"])
    if len(sets) == 1:
        assert json.loads(result.out)["step_time_s"] == json.loads(base.out)["step_time_s"]


def test_fsdp_switches_under_zero_3_are_not_flagged(run_cli: Callable[[list[str]], CliResult]) -> None:
    sets = ["parallel.zero=3", "kernels.zero3_backward_prefetch=post", "kernels.zero3_collectives=flat"]
    result = run_cli(["run", "teaching-pp4", "--json", *[x for s in sets for x in ("--set", s)]])
    assert result.code == 0 and "changes nothing" not in result.err and "change nothing" not in result.err


def test_nvls_on_a_gpu_without_nvlink_sharp(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # NVLS on an A100 node (second-generation NVSwitch, no in-switch reduction) reduced in the
    # switch anyway: an 8-GPU all-reduce at 306 GB/s bus bandwidth, over the A100's 300 GB/s links
    topology = Path(__file__).resolve().parents[1] / "topologies" / "dgx-a100.toml"
    a100_nvls = write_file(
        topology.read_text().replace("[intra_node]", "[intra_node]\nnvls = true"), "t.toml"
    )
    _refused(
        run_cli(["kernel", "allreduce", "--topology", str(a100_nvls), "--gpus", "8", "--bytes", "1e9"]),
        "nvls",
    )
    _refused(
        run_cli(["run", "teaching-pp4", "--set", "cluster.intra_node.nvls=true"]), "cluster.intra_node.nvls"
    )
    # nor without an NVSwitch (it was dropped without a word on a PCIe or direct NVLink fabric)
    pcie = ["run", "llama3-70b-512-h100", "--set", "cluster.intra_node.fabric=pcie"]
    _refused(run_cli([*pcie, "--set", "cluster.intra_node.nvls=true"]), "cluster.intra_node.nvls")
    assert run_cli([*pcie, "--json"]).code == 0  # the topology's own NVLS goes with its switch
    # an A100 swapped onto a DGX H100 (NVLS on) runs without it, and says so
    swapped = run_cli(["run", "llama3-70b-512-h100", "--json", "--set", "cluster.gpu=a100-80gb"])
    assert swapped.code == 0 and "no NVLink SHARP" in swapped.err
    off = run_cli(
        [
            "run",
            "llama3-70b-512-h100",
            "--json",
            "--set",
            "cluster.gpu=a100-80gb",
            "--set",
            "cluster.intra_node.nvls=false",
        ]
    )
    assert json.loads(swapped.out)["step_time_s"] == json.loads(off.out)["step_time_s"]
    bus = json.loads(
        run_cli(
            ["kernel", "allreduce", "--topology", "dgx-a100", "--gpus", "8", "--bytes", "1e9", "--json"]
        ).out
    )
    assert bus["busbw_GBps"] <= 300.0


def test_whatif_prints_no_negative_zero_gain(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # levers a hair below the baseline printed their gain as "-0.0" (a negative zero)
    result = run_cli(["whatif", str(write_file(WHATIF_SCENARIO))])
    assert result.code == 0, result.err
    assert " +0.0 " in result.out and " -0.0 " not in result.out, result.out


WHATIF_SCENARIO = """\
name = "whatif gains near zero"
[model]
preset = "olmoe-1b-7b"
layers = 4
seq_len = 1024
[model.moe]
routing = "round_robin"
load_imbalance = 3.0
dispatch_dtype = "fp8"
[cluster]
topology = "dgx-a100-40gb"
num_gpus = 16
gpu = "b300"
[parallel]
tp = 2
pp = 2
dp = 4
ep = 8
micro_batch = 2
global_batch = 8
schedule = "zb-v"
[precision]
dtype = "mxfp8"
"""


def test_tp_overlap_without_sequence_parallel_says_so(run_cli: Callable[[list[str]], CliResult]) -> None:
    # Megatron-LM asserts sequence_parallel for --tp-comm-overlap (arguments.py: "Tensor parallel
    # communication/GEMM overlap can happen only when sequence parallelism is enabled"); the model
    # hides the all-reduces behind the layer's GEMMs, an idealisation it now names
    said = "parallel.tp_comm_overlap = true without parallel.sequence_parallel"
    argv = ["run", "llama3-70b-512-h100", "--json", "--set", "parallel.tp_comm_overlap=true"]
    off = run_cli([*argv, "--set", "parallel.sequence_parallel=false"])
    assert off.code == 0, off.err
    assert said in " ".join(json.loads(off.out)["warnings"])
    on = run_cli([*argv, "--set", "parallel.sequence_parallel=true"])
    assert on.code == 0 and said not in " ".join(json.loads(on.out)["warnings"])


@pytest.mark.parametrize("flag", ["--gpu", "--source"])
def test_validate_empty_filter_is_refused(run_cli: Callable[[list[str]], CliResult], flag: str) -> None:
    # `validate --gpu ''` matched every row (substring semantics) and ran the whole CSV
    _refused(run_cli(["validate", flag, ""]), flag)
