"""Did-you-mean and aliases on every name a user types (issue 17)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.loading import load_scenario
from simulator.names import canonical, closest, did_you_mean

BASE = """name = "x"
[model]
preset = "{preset}"
[cluster]
topology = "{topology}"
num_gpus = 8
{cluster_extra}
[parallel]
tp = 2
global_batch = 16
{parallel_extra}
{extra}
"""


def _scenario(tmp_path, **kw):
    fields = {
        "preset": "gpt3-1.3b",
        "topology": "dgx-a100",
        "cluster_extra": "",
        "parallel_extra": "",
        "extra": "",
    }
    fields.update(kw)
    path = tmp_path / "s.toml"
    path.write_text(BASE.format(**fields))
    return path


def _error(tmp_path, **kw) -> str:
    with pytest.raises(ConfigError) as exc:
        load_scenario(_scenario(tmp_path, **kw))
    return str(exc.value)


@pytest.mark.parametrize(
    ("kw", "key", "suggestion"),
    [
        ({"parallel_extra": "tpp = 2"}, "parallel.tpp", "tp"),
        ({"extra": "[precison]\ndtype = 'bf16'"}, "precison", "precision"),
        (
            {"cluster_extra": "[cluster.inter_node]\nnic_gbps = 100"},
            "cluster.inter_node.nic_gbps",
            "nic_Gbps",
        ),
        ({"preset": "llama3-8c"}, "model.preset", "llama3-8b"),
        ({"topology": "dgx-a10"}, "cluster.topology", "dgx-a100"),
        ({"cluster_extra": 'gpu = "h10"'}, "cluster.gpu", "h100-sxm"),
        ({"parallel_extra": 'schedule = "1f1c"'}, "parallel.schedule", "1f1b"),
        ({"extra": '[precision]\ndtype = "bf61"'}, "precision.dtype", "bf16"),
        ({"parallel_extra": 'recompute = "selectiv"'}, "parallel.recompute", "selective"),
    ],
)
def test_misspellings_name_the_closest_choice(tmp_path, kw, key, suggestion) -> None:
    message = _error(tmp_path, **kw)
    assert f"'{key}'" in message and "s.toml" in message
    assert f"did you mean {suggestion!r}?" in message
    assert "docs/reference.md" in message or "must be one of" in message or "known" in message


@pytest.mark.parametrize(
    ("kw", "attr", "value"),
    [
        ({"preset": "llama-3-8b"}, "model.name", "llama3-8b"),
        ({"preset": "LLaMA3-8B"}, "model.name", "llama3-8b"),
        ({"cluster_extra": 'gpu = "h100"'}, "topology.gpu.name", "h100-sxm"),
        ({"cluster_extra": 'gpu = "H100"'}, "topology.gpu.name", "h100-sxm"),
        ({"topology": "DGX_H100"}, "topology.gpu.name", "h100-sxm"),
        ({"parallel_extra": 'schedule = "1F1B"'}, "parallel.schedule", "1f1b"),
        ({"parallel_extra": 'recompute = "Selective"'}, "parallel.recompute", "selective"),
        ({"extra": '[precision]\ndtype = "bfloat16"'}, "dtype", "bf16"),
        ({"extra": '[precision]\ndtype = "BF16"'}, "dtype", "bf16"),
    ],
)
def test_case_and_aliases_resolve_to_the_catalog_name(tmp_path, kw, attr, value) -> None:
    scn = load_scenario(_scenario(tmp_path, **kw))
    obj: object = scn
    for part in attr.split("."):
        obj = getattr(obj, part)
    assert obj == value


def test_alias_simulates_exactly_the_canonical_name(tmp_path) -> None:
    """An alias is a spelling, not an approximation: the same scenario, field for field."""
    a = load_scenario(
        _scenario(tmp_path, parallel_extra='schedule = "1F1B"', extra='[precision]\ndtype = "bfloat16"')
    )
    b_path = tmp_path / "b.toml"
    b_path.write_text(
        BASE.format(
            preset="gpt3-1.3b",
            topology="dgx-a100",
            cluster_extra="",
            parallel_extra='schedule = "1f1b"',
            extra='[precision]\ndtype = "bf16"',
        )
    )
    b = load_scenario(b_path)
    assert a.parallel == b.parallel and a.dtype == b.dtype and a.model == b.model


def test_separator_twins_are_never_merged() -> None:
    """`gpt3-1.3b` and `gpt3-13b` differ by a dot: neither stands for the other."""
    assert canonical("gpt3-13b", ["gpt3-1.3b", "gpt3-13b"]) == "gpt3-13b"
    assert canonical("gpt3_1.3b", ["gpt3-1.3b", "gpt3-13b"]) == "gpt3-1.3b"
    assert canonical("ab", ["a-b", "a_b"]) is None  # ambiguous: the exact name is needed


def test_nothing_close_gives_no_suggestion() -> None:
    assert did_you_mean("zzzzzz", ["tp", "pp", "dp"]) == ""
    assert closest("swep", ["run", "sweep", "whatif", "validate", "topo"]) == "sweep"
    assert canonical(3, ["bf16"]) is None and did_you_mean(None, ["bf16"]) == ""


def test_a_slip_on_an_aliased_short_name_suggests_its_target() -> None:
    """'h1000' is one key from the alias 'h100', not from 'h800': the suggestion is h100-sxm."""
    gpus = ["a100-80gb", "a100-40gb", "h100-sxm", "h800", "h200", "b200", "v100-32gb"]
    assert closest("h1000", gpus) == "h100-sxm"
    assert closest("a1000", gpus) == "a100-80gb"
    assert closest("h2000", gpus) == "h200"
    # an alias whose target is not among the choices is never suggested
    assert closest("h1000", ["h800", "h200"]) == "h800"


def test_misspelled_subcommand_names_the_closest(capsys) -> None:
    from simulator.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["swep", "x.toml"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean 'sweep'?" in err and err.count("\n") == 1


def test_flag_choices_take_aliases_and_suggest(capsys) -> None:
    from simulator.cli import main

    args = ["mfu", "--params", "7e9", "--tokens-per-s", "1e5", "--gpus", "8", "--gpu", "H100", "--json"]
    assert main([*args, "--dtype", "bfloat16"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["dtype"] == "bf16"
    with pytest.raises(SystemExit):
        main([*args, "--dtype", "bf61"])
    assert "did you mean 'bf16'?" in capsys.readouterr().err


def test_unknown_key_errors_point_to_the_reference(tmp_path) -> None:
    message = _error(tmp_path, parallel_extra="tpp = 2")
    assert "docs/reference.md" in message and "SPEC" not in message


def test_mfu_model_alias_reports_the_catalog_name(capsys) -> None:
    import json

    from simulator.cli import main

    args = ["mfu", "--model", "LLaMA-3-8B", "--tokens-per-s", "1e5", "--gpus", "8", "--gpu", "H100", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "llama3-8b"
