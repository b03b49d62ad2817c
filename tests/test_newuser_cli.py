"""What a new user meets first: the README's commands, the text tables, and the error lines for
common mistakes (a mistyped flag, a GPU flag on a collective, a split that does not multiply out)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.cli.parser import build_parser
from simulator.errors import ConfigError
from simulator.loading import load_scenario
from simulator.resources import scenario_names
from simulator.run import format_report
from simulator.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = """\
name = "newuser"
[model]
preset = "llama3-8b"
[cluster]
topology = "dgx-h100"
num_gpus = 16
[parallel]
tp = 2
pp = 2
micro_batch = 1
global_batch = 32
"""


def _readme_commands() -> list[list[str]]:
    """Every `mfusim ...` command of the README's bash blocks, as argv after `mfusim`."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words and words[0] == "mfusim":
                    commands.append(words[1:])
    return commands


def test_readme_commands_parse_and_name_files_that_exist() -> None:
    """Each README command runs as written: its flags parse, and every scenario it names is
    shipped, in the checkout, or written by an earlier README command (no placeholders)."""
    commands = _readme_commands()
    assert len(commands) >= 15
    parser = build_parser()
    shipped = set(scenario_names())
    written: set[str] = set()
    for argv in commands:
        if argv[:1] == ["schema"]:
            continue
        ns, extras = parser.parse_known_args(argv)
        assert not extras, (argv, extras)
        names = [ns.scenario] if isinstance(getattr(ns, "scenario", None), str) else []
        names += [n for n in getattr(ns, "scenarios", None) or [] if isinstance(n, str)]
        for name in names:
            assert (
                Path(name).stem in shipped
                and not name.endswith(".toml")
                or (ROOT / name).is_file()
                or name in written
            ), f"README: `mfusim {' '.join(argv)}` names {name!r}, which a new user does not have"
        for flag in ("export_best", "out"):
            if getattr(ns, flag, None):
                written.add(getattr(ns, flag))


def test_per_stage_table_shows_whole_category_names() -> None:
    """`gpu_spread` (10 letters) was cut to `gpu_sprea`; every row lines up with the header."""
    scn = load_scenario_text(SCENARIO)
    text = format_report(scn, simulate(scn).report)
    table = text.split("Per stage (% of step):\n")[1].splitlines()
    header, rows = table[0], table[1:3]
    assert "gpu_spread" in header.split()
    assert all(len(row) == len(header) for row in rows), table[:3]


def load_scenario_text(text: str):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.toml"
        path.write_text(text)
        return load_scenario(path)


def test_presets_tables_line_up(capsys: pytest.CaptureFixture[str]) -> None:
    """Long names (qwen1.5-moe-a2.7b, h100-sxm-96gb) no longer push their rows out of line."""
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    models = out.split("Model presets:\n")[1].split("\n\n")[0].splitlines()
    ends = {line.index("B ") for line in models[1:]}  # the params column ends with "B"
    assert len(ends) == 1, models
    gpus = out.split("GPUs (dense peak TFLOP/s):\n")[1].split("\n\n")[0].splitlines()
    assert len({len(line) for line in gpus}) == 1, gpus


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's refusals exit from inside the parser
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_mistyped_flag_names_the_command_and_the_closest_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO)
    err = _error(capsys, ["run", str(path), "--jsn"])
    assert err.startswith("mfusim run: error:") and "did you mean '--json'?" in err
    err = _error(
        capsys, ["kernel", "gemm", "--gpu", "h100-sxm", "--m", "8", "--n", "8", "--k", "8", "--bacth", "2"]
    )
    assert err.startswith("mfusim kernel gemm: error:") and "did you mean '--batch'?" in err
    err = _error(capsys, ["run", str(path), "--zzzzzz"])  # nothing close: no suggestion
    assert "did you mean" not in err


def test_collective_with_gpu_flag_points_to_topology(capsys: pytest.CaptureFixture[str]) -> None:
    """Was argparse's "ambiguous option: --gpu could match --gpus, --gpus-per-node"."""
    argv = ["kernel", "allreduce", "--topology", "dgx-h100", "--gpus", "8", "--bytes", "1e9"]
    err = _error(capsys, [*argv, "--gpu", "h100-sxm"])
    assert "flag --gpu" in err and "--topology" in err and "ambiguous" not in err
    assert main(argv) == 0  # without it, unchanged
    capsys.readouterr()


def test_split_that_does_not_multiply_out_suggests_dp(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("pp = 2\n", "pp = 2\ndp = 2\n"))
    err = _error(capsys, ["run", str(path)])
    assert "key 'parallel.dp'" in err and "dp = 4 fits" in err


def test_errors_in_installed_shipped_files_name_them_briefly() -> None:
    """A wheel install's shipped scenario is named by its file name, not a site-packages path
    cut in the middle; any other file keeps its path."""
    from simulator.cli.app import shipped_label

    package = Path(__file__).resolve().parents[1] / "simulator"
    inside = ConfigError("bad", key="parallel.dp", file=str(package / "scenarios" / "x.toml"))
    assert str(shipped_label(inside)) == "x.toml (shipped scenario): key 'parallel.dp': bad"
    elsewhere = ConfigError("bad", key="parallel.dp", file="/tmp/scenarios/x.toml")
    assert str(shipped_label(elsewhere)) == str(elsewhere)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("routing", '"dropless"'),
        ("load_imbalance", "1.2"),
        ("dispatch_dtype", '"fp8"'),
        ("first_dense_layers", "1"),
    ],
)
def test_expert_key_on_a_dense_model_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, value: str
) -> None:
    """Exact or refused: these were silently ignored on a dense model (only top_k was refused)."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("[cluster]", f"[model.moe]\n{key} = {value}\n[cluster]"))
    err = _error(capsys, ["run", str(path)])
    assert f"s.toml: key 'model.moe.{key}'" in err and "dense" in err and "num_experts" in err


def test_experts_without_top_k_say_it_is_missing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Was "must be between 1 and num_experts (8); got 0" for a key the user never wrote."""
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("[cluster]", "[model.moe]\nnum_experts = 8\n[cluster]"))
    err = _error(capsys, ["run", str(path)])
    assert "key 'model.moe.top_k': missing" in err and "got 0" not in err


def test_sweep_plot_draws_fitting_configurations_above_the_crosses() -> None:
    """The red crosses of configurations that do not fit were drawn over the blue points that
    do, so a busy sweep's plot showed almost no fitting configuration."""
    from simulator.plots import sweep_mfu_figure

    rows = [{"tp": 1, "pp": 1, "dp": 8, "status": "ok", "mfu": 0.5}]
    rows += [{"tp": 2, "pp": 1, "dp": 4, "status": "infeasible_memory", "mfu": 0.5}]
    fig = sweep_mfu_figure(rows)
    ax = fig.axes[0]
    fits, nofit = (c for c in ax.collections if c.get_label().startswith(("fits", "does not")))
    assert fits.get_label().startswith("fits") and fits.get_zorder() > nofit.get_zorder()


def test_whatif_on_a_baseline_that_does_not_fit_does_not_contradict_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was: "the cheapest way to fit is ZeRO-1 ... (+1.9 points). ...; none of the levers tried
    raises MFU within the GPU memory." -- the fit lever does, the sentence meant the others."""
    config = ROOT / "tests" / "fixtures" / "hf" / "mixtral_8x7b.json"
    path = tmp_path / "s.toml"
    path.write_text(
        f'[model]\nhf_config = "{config}"\nseq_len = 4096\n[cluster]\ntopology = "dgx-h100"\nnum_gpus = 64\n'
        "[parallel]\ntp = 2\npp = 1\nep = 8\nmicro_batch = 1\nglobal_batch = 256\n"
    )
    assert main(["whatif", str(path)]) == 0
    out = capsys.readouterr().out
    headline = out.splitlines()[1]
    rows = [line for line in out.splitlines() if re.match(r"\s*\d+\s+\S", line)]
    assert sum(" sequence parallel " in row for row in rows) == 1, rows  # was listed twice
    assert "the cheapest way to fit is" in headline
    assert "none of the levers tried raises MFU" not in headline
    assert "no other lever raises MFU within the GPU memory on its own" in headline
