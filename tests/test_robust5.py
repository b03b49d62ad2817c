"""Small contract gaps a demanding user hits (robust5): `--unset`, nullable `--json` fields,
attention head dims the fused kernels cannot run as given, `sweep --dask` with `--jobs`, enum
case, and a fuzz pass over odd inputs. Every check is on behaviour: what is simulated, or the
one-line refusal (exit 2, naming the flag or file and key, no traceback)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import SMALL_PLANNER_SCENARIO, dump_toml

import mfusim
from simulator.errors import ConfigError
from simulator.loading import load_scenario


def assert_refused(res, *needles: str) -> str:
    """Exit 2, one line on stderr naming every needle, no traceback."""
    assert res.code == 2, (res.code, res.err)
    assert "Traceback" not in res.err + res.out
    lines = res.err_lines
    assert len(lines) == 1, res.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _write(tmp_path: Path, data: dict, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "scenario.toml"
    path.write_text(dump_toml(data), encoding="utf-8")
    return path


def _planner() -> dict:
    data = tomllib.loads(SMALL_PLANNER_SCENARIO)
    del data["sweep"]
    return data


# ----------------------------------------------------------------------------- 1. --unset
def test_unset_is_the_file_without_the_key(tmp_path: Path) -> None:
    """`--unset K` loads exactly the scenario whose file never set K: dp derived from the GPUs
    again, kv_heads back to the preset's (GQA: fewer K/V heads than query heads)."""
    data = _planner()
    data["model"]["kv_heads"] = 32  # llama3-8b has 8 K/V heads; the file makes it MHA
    data["model"]["preset"] = "llama3-8b"
    data["parallel"]["dp"] = 4
    with_keys = _write(tmp_path, data, "with")
    without = {**data, "model": {"preset": "llama3-8b"}, "parallel": dict(data["parallel"])}
    del without["parallel"]["dp"]
    plain = _write(tmp_path, without, "without")

    unset = load_scenario(with_keys, [("model.kv_heads", None), ("parallel.dp", None)], "--set")
    reference = load_scenario(plain)
    assert unset.model == reference.model and unset.parallel == reference.parallel
    assert unset.model.kv_heads < unset.model.heads  # the preset's GQA, not the file's 32
    assert load_scenario(with_keys).model.kv_heads == 32


def test_unset_on_the_command_line_simulates_the_default(tmp_path: Path, run_cli) -> None:
    data = _planner()
    data["parallel"]["dp"] = 4
    data["run"] = {"tokens": 1e9, "gpu_failures_per_year": 0.0}
    with_keys = _write(tmp_path, data, "with")
    plain_data = {**data, "parallel": {k: v for k, v in data["parallel"].items() if k != "dp"}}
    del plain_data["run"]
    plain = _write(tmp_path, plain_data, "without")

    res = run_cli(["run", str(with_keys), "--unset", "parallel.dp", "--unset", "run", "--json"])
    assert res.code == 0, res.err
    got = json.loads(res.out)
    ref = json.loads(run_cli(["run", str(plain), "--json"]).out)
    assert "plan" not in got  # the whole [run] table unset: no plan
    assert got["parallel"]["dp"] == ref["parallel"]["dp"] == 8 // (data["parallel"]["pp"])
    assert got["mfu"] == pytest.approx(ref["mfu"], rel=1e-12)

    # unsets apply before sets: a fresh [run] with every other key at its default (failures on)
    res = run_cli(["run", str(with_keys), "--unset", "run", "--set", "run.tokens=1e9", "--json"])
    assert res.code == 0, res.err
    plan = json.loads(res.out)["plan"]
    assert plan["job_mtbf_hours"] is not None  # the file's gpu_failures_per_year = 0 is gone


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (
            ["--unset", "parallel.dpp"],
            ["--unset parallel.dpp", "unknown key", "did you mean", "scenario.toml"],
        ),
        (["--unset", "model.moe.bogus"], ["--unset model.moe.bogus", "unknown key"]),
        (["--unset", "cluster.num_gpus"], ["--unset cluster.num_gpus", "required", "cannot be unset"]),
        (["--unset", "model"], ["--unset model", "required", "cannot be unset"]),
        (["--unset", "parallel.tp", "--set", "parallel.tp=2"], ["--unset parallel.tp", "both set and unset"]),
        (["--unset", "parallel.tp=2"], ["--unset", "without a value"]),
        (["--unset", ""], ["--unset", "dotted key"]),
        (["--unset", "parallel.tp.x"], ["--unset parallel.tp.x", "not a table"]),
        (["--unset", "sweep.tp"], ["--unset sweep.tp", "only `mfusim sweep`"]),
        (["--tokens", "1e9", "--unset", "run.tokens"], ["run.tokens", "both set and unset"]),
    ],
)
def test_unset_refusals_name_the_flag(tmp_path: Path, run_cli, argv, needles) -> None:
    path = _write(tmp_path, _planner(), "s")
    assert_refused(run_cli(["run", str(path), *argv]), *needles)


def test_unset_on_every_scenario_command(tmp_path: Path, run_cli) -> None:
    data = tomllib.loads(SMALL_PLANNER_SCENARIO)
    data["parallel"]["dp"] = 4
    path = _write(tmp_path, data, "s")
    for command in (["whatif"], ["compare", str(path)], ["sweep", "--jobs", "1", "--engine", "analytic"]):
        res = run_cli([command[0], str(path), *command[1:], "--unset", "parallel.dpx"])
        assert_refused(res, "--unset parallel.dpx", "'dp'")
    assert_refused(run_cli(["whatif", str(path), "--unset", "run"]), "--unset run", "does not plan")
    res = run_cli(
        ["sweep", str(path), "--jobs", "1", "--engine", "analytic", "--unset", "sweep.tp", "--json"]
    )
    assert res.code == 0, res.err
    assert {row["tp"] for row in json.loads(res.out)["top"]} <= {1, 2, 4, 8}


def test_unset_in_the_python_api(tmp_path: Path) -> None:
    data = _planner()
    data["parallel"]["dp"] = 4
    path = _write(tmp_path, data, "s")
    assert (
        mfusim.load_scenario(path, overrides={"parallel.dp": None}).parallel.dp == 8 // data["parallel"]["pp"]
    )
    with pytest.raises(ConfigError, match="overrides parallel.dq.*unknown key"):
        mfusim.load_scenario(path, overrides={"parallel.dq": None})
    with pytest.raises(ConfigError, match="overrides cluster.num_gpus.*cannot be unset"):
        mfusim.load_scenario(data, overrides={"cluster.num_gpus": None})


# ----------------------------------------------------------------------------- 3. nullable --json fields
def test_every_null_in_the_examples_is_documented_as_nullable() -> None:
    """docs/reference.md never gives a field the bare type `null` (the example's value): each
    field an example prints as null is declared with its type and when it is null."""
    from simulator.cli.reference import NULLABLE, all_json_fields, reference_markdown

    fields = all_json_fields()
    for command, paths in fields.items():
        for path, type_name in paths.items():
            if type_name == "null":
                assert path in NULLABLE.get(command, {}), (command, path)
    for command, paths in NULLABLE.items():
        for path in paths:
            assert path in fields[command], (command, path)  # no stale declaration
    text = reference_markdown(fields)
    assert "| null |" not in text
    assert "| `plan.cost_usd` | number or null |" in text


def test_plan_fields_are_null_exactly_when_documented(tmp_path: Path, run_cli) -> None:
    """Run the plan both ways: without a price and failures, the declared fields are null; with
    them, none of the plan's fields is."""
    from simulator.cli.reference import NULLABLE

    path = _write(tmp_path, _planner(), "s")
    plan_paths = {
        p.removeprefix("plan."): t for p, (t, _) in NULLABLE["run"].items() if p.startswith("plan.")
    }
    res = run_cli(
        ["run", str(path), "--set", "run.tokens=1e9", "--set", "run.gpu_failures_per_year=0", "--json"]
    )
    plan = json.loads(res.out)["plan"]
    nulls = {k for k, v in plan.items() if v is None}
    assert nulls == set(plan_paths) - {"energy_mwh", "facility_power_mw", "it_power_w_per_gpu"}
    assert plan["checkpoint_interval_source"] == "none"
    res = run_cli(["run", str(path), "--tokens", "1e9", "--usd-per-gpu-hour", "2", "--json"])
    plan = json.loads(res.out)["plan"]
    assert all(v is not None for v in plan.values())
    json_types = {"number": (int, float), "integer": (int,), "string": (str,)}
    for name, type_name in plan_paths.items():
        assert isinstance(plan[name], json_types[type_name]), (name, plan[name])


# ----------------------------------------------------------------------------- 2. unaligned head dims
def _kernel(run_cli, *args: str) -> dict:
    res = run_cli(
        ["kernel", "attention", "--gpu", "h100-sxm", "--seq", "4096", "--heads", "16", *args, "--json"]
    )
    assert res.code == 0, res.err
    return json.loads(res.out)


@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_fa2_runs_an_unaligned_head_dim_padded_to_8(run_cli, pass_) -> None:
    """FlashAttention-2 zero-pads q, k, v to the next multiple of 8 (flash_attn_interface.py): the
    kernel takes the padded head dim's time, while the FLOPs counted stay the model's."""
    for dim, padded in ((125, 128), (63, 64), (81, 88)):
        odd = _kernel(run_cli, "--head-dim", str(dim), "--impl", "fa2", "--pass", pass_)
        pad = _kernel(run_cli, "--head-dim", str(padded), "--impl", "fa2", "--pass", pass_)
        assert odd["time_s"] == pytest.approx(pad["time_s"], rel=1e-12)
        assert odd["flops"] == pytest.approx(pad["flops"] * dim / padded, rel=1e-12)
        assert odd["head_dim"] == dim
    # the unfused path runs the head dim as given: no padding, less time than the padded dim
    odd = _kernel(run_cli, "--head-dim", "125", "--impl", "unfused", "--pass", pass_)
    pad = _kernel(run_cli, "--head-dim", "128", "--impl", "unfused", "--pass", pass_)
    assert odd["time_s"] < pad["time_s"]


@pytest.mark.parametrize("impl", ["fa3", "cudnn"])
def test_fa3_and_cudnn_refuse_an_unaligned_head_dim(run_cli, impl, tmp_path: Path) -> None:
    line = assert_refused(
        run_cli(
            [*"kernel attention --gpu h100-sxm --seq 4096 --heads 16 --head-dim 125 --impl".split(), impl]
        ),
        "--head-dim",
        "multiples of 8",
        "125",
    )
    assert '"fa2" pads it to 128' in line
    assert _kernel(run_cli, "--head-dim", "120", "--impl", impl)["head_dim"] == 120  # aligned: runs
    data = {
        "model": {
            "layers": 2,
            "hidden": 2000,
            "heads": 16,
            "ffn_hidden": 8000,
            "vocab": 32000,
            "seq_len": 2048,
        },
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"global_batch": 16},
        "kernels": {"attention": impl},
    }
    path = _write(tmp_path, data, "s")
    assert_refused(run_cli(["run", str(path)]), "scenario.toml", "kernels.attention", "125")
    res = run_cli(["run", str(path), "--set", "kernels.attention=fa2", "--json"])
    assert res.code == 0, res.err
    # the GPU's default implementation (cuDNN on H100) is refused the same way, naming the key to set
    del data["kernels"]
    assert_refused(run_cli(["run", str(_write(tmp_path, data, "default"))]), "kernels.attention", "125")


# ----------------------------------------------------------------------------- 4. sweep --dask with --jobs
def test_sweep_refuses_jobs_with_a_dask_scheduler(tmp_path: Path, run_cli) -> None:
    """--jobs sets local processes (or a LocalCluster's workers with --dask local); a remote
    scheduler's own workers run the sweep, so the count was dropped silently: refused before
    any connection is tried, naming both flags."""
    path = _write(tmp_path, tomllib.loads(SMALL_PLANNER_SCENARIO), "s")
    line = assert_refused(
        run_cli(["sweep", str(path), "--dask", "tcp://127.0.0.1:1", "--jobs", "4"]), "--jobs", "--dask"
    )
    assert "tcp://127.0.0.1:1" in line


# ----------------------------------------------------------------------------- 5. enum case
def _schema_enums(node: dict, path: tuple[str, ...] = ()):
    for key, sub in node.get("properties", {}).items():
        if "anyOf" in sub and "enum" in sub["anyOf"][0]:
            yield (*path, key), tuple(sub["anyOf"][0]["enum"])
        yield from _schema_enums(sub, (*path, key))


def _variants(name: str) -> set[str]:
    from simulator.names import ALIASES

    out = {name.upper(), name.title(), name.replace("-", "_"), name.replace("-", "").upper(), f" {name} "}
    out |= {alias.upper() for alias, target in ALIASES.items() if target == name}
    return out - {name}


def _outcome(path: tuple[str, ...], value: str):
    from simulator.cli.reference import MINIMAL_SCENARIO

    data = json.loads(json.dumps(MINIMAL_SCENARIO))
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    try:
        return mfusim.load_scenario(data)
    except ConfigError as err:
        return ("refused", err.key)


def test_schema_and_loader_agree_on_the_spelling_of_names() -> None:
    """The loader takes every enum value in any case, with separators either way, and by its
    aliases (simulator/names.py); the schema says the same with a pattern beside the enum (kept
    for completion). Every variant the schema accepts loads exactly as the canonical name does
    (the same Scenario, or the same refusal for reasons of context); a name that is none is
    refused by both."""
    jsonschema = pytest.importorskip("jsonschema")
    from simulator.cli.reference import scenario_schema

    schema = scenario_schema()
    enums = list(_schema_enums(schema))
    assert {"precision.dtype", "parallel.schedule", "cluster.gpu", "kernels.attention"} <= {
        ".".join(p) for p, _ in enums
    }
    for path, allowed in enums:
        sub = schema
        for part in path:
            sub = sub["properties"][part]
        validator = jsonschema.Draft202012Validator(sub)
        if "" in allowed:  # documented default "": the schema and the loader take it as leaving the key out
            assert validator.is_valid("") and not isinstance(_outcome(path, ""), tuple), path
        else:
            assert not validator.is_valid(""), path
        for name in (a for a in allowed if a):
            canonical = _outcome(path, name)
            for variant in _variants(name):
                assert validator.is_valid(variant), (path, variant)
                assert _outcome(path, variant) == canonical, (path, variant)
        # ECMA-262 (u flag) allows escaping syntax characters only: `\-` breaks strict validators
        pattern = sub["anyOf"][1]["pattern"]
        escaped = [pattern[i + 1] for i, c in enumerate(pattern) if c == "\\"]
        assert set(escaped) <= set("^$\\.*+?()[]{}|/"), (path, set(escaped))
        assert not validator.is_valid("zz-not-a-name")
        assert _outcome(path, "zz-not-a-name") == ("refused", ".".join(path))


# ----------------------------------------------------------------------------- 6. fuzz findings
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model.kv_heads", 0),
        ("model.ffn_hidden", 0),
        ("model.head_dim", 0),
        ("model.moe.expert_ffn_hidden", 0),
    ],
)
def test_an_explicit_zero_size_is_refused_not_read_as_the_default(
    tmp_path: Path, run_cli, key, value
) -> None:
    """kv_heads = 0 ran as many K/V heads as query heads (ModelSpec's 0 = derive): a file's 0 asks
    for a model without heads or width, so it is refused, pointing at leaving the key out."""
    data = _planner()
    if key.startswith("model.moe."):
        data["model"] = {"preset": "mixtral-8x7b", "layers": 2}
    path = _write(tmp_path, data, "s")
    line = assert_refused(run_cli(["run", str(path), "--set", f"{key}={value}"]), f"--set {key}", ">= 1")
    assert f"--unset {key}" in line
    assert run_cli(["run", str(path), "--unset", key, "--json"]).code == 0


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--set", "run.tokens=1e9", "--tokens", "2e9"], "--tokens"),
        (["--set", "run.usd_per_gpu_hour=1", "--usd-per-gpu-hour", "2"], "--usd-per-gpu-hour"),
        (["--set", "memory.headroom_gib=1", "--memory-headroom", "2"], "--memory-headroom"),
    ],
)
def test_a_shorthand_and_its_set_key_together_are_refused(tmp_path: Path, run_cli, argv, flag) -> None:
    """`--tokens 2e9` silently won over `--set run.tokens=1e9`: two flags giving one key are refused."""
    path = _write(tmp_path, _planner(), "s")
    assert_refused(run_cli(["run", str(path), *argv]), flag, "--set")
