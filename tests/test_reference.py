"""docs/reference.md and the scenario JSON Schema: generated from the code, complete, up to date (issue 17)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from simulator.cli import reference
from simulator.resources import data_dir

ROOT = Path(__file__).resolve().parent.parent
REGEN = "python -m simulator.cli.reference --write"


@pytest.fixture(scope="module")
def json_fields() -> dict[str, dict[str, str]]:
    return reference.all_json_fields()


@pytest.fixture(scope="module")
def markdown(json_fields) -> str:
    return reference.reference_markdown(json_fields)


def test_committed_reference_is_up_to_date(markdown) -> None:
    committed = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert committed == markdown, f"docs/reference.md is stale: run `{REGEN}`"


def test_committed_schema_is_up_to_date() -> None:
    committed = reference.schema_path().read_text(encoding="utf-8")
    assert committed == reference.schema_text(), f"simulator/scenario.schema.json is stale: run `{REGEN}`"


@pytest.mark.parametrize("kind", ["scenario", "topology"])
def test_every_accepted_key_is_documented(kind, markdown) -> None:
    """The loader is asked which keys it accepts; each has a meaning and a row in the reference."""
    rows = reference.key_rows(kind)
    keys = {r.key for r in rows}
    # the probe finds the keys the loader's own tables name (not a tautology: the loader is asked)
    from simulator.loading import PARALLEL_KEYS, SCENARIO_KEYS, TOPOLOGY_KEYS

    if kind == "scenario":
        assert set(SCENARIO_KEYS) <= keys and {f"parallel.{k}" for k in PARALLEL_KEYS} <= keys
        assert {"cluster.inter_node.nic_Gbps", "model.moe.top_k"} <= keys
    else:
        assert set(TOPOLOGY_KEYS) <= keys
    undocumented = [r.key for r in rows if not r.meaning]
    assert not undocumented, f"add a line to simulator/cli/reference.py KEYS for: {undocumented}"
    for r in rows:
        if r.kind == "value" and not r.key.startswith("sweep."):
            assert f"| `{r.key.rpartition('.')[2]}` |" in markdown, r.key
        assert r.since, r.key


def test_every_json_field_and_csv_column_is_documented(json_fields) -> None:
    missing = [
        f"{command}: {path}"
        for command, paths in json_fields.items()
        for path in paths
        if not reference.json_meaning(command, path)
    ]
    assert not missing, f"add the meaning to simulator/cli/reference.py JSON_FIELDS: {missing}"
    columns = [
        c for cols in reference.csv_columns().values() for c in cols if not reference.column_meaning(c)
    ]
    assert not columns, f"add the meaning to simulator/cli/reference.py COLUMN_MEANINGS: {columns}"
    assert {"mfu", "breakdown_s.<category>", "memory.parts_gib.activations"} <= set(json_fields["run"])


def test_every_command_with_json_output_is_documented() -> None:
    from simulator.cli.parser import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with_json = {
        name
        for name, p in sub.choices.items()  # type: ignore[union-attr]
        if any("--json" in a.option_strings for a in p._actions)
    }
    assert with_json <= set(reference.JSON_EXAMPLES), with_json - set(reference.JSON_EXAMPLES)


def test_schema_accepts_every_shipped_scenario_and_refuses_a_typo() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = reference.scenario_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    shipped = sorted(data_dir("scenarios").glob("*.toml"))
    assert shipped
    for path in shipped:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, (path.name, errors)
    bad = {
        "model": {"preset": "gpt3-1.3b"},
        "cluster": {"topology": "dgx-a100", "num_gpus": 8},
        "parallel": {"tpp": 2},
    }
    assert any("tpp" in e.message for e in validator.iter_errors(bad))
    # every accepted key is a property of the schema
    for row in reference.key_rows("scenario"):
        node = schema
        for part in row.key.split("."):
            node = node["properties"][part]


def test_reference_and_schema_ship_in_the_wheel() -> None:
    """pyproject maps docs/ into the package (simulator.docs) and lists the schema as package data."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = pyproject["tool"]["setuptools"]
    assert "simulator.docs" in setuptools["packages"]
    assert setuptools["package-dir"]["simulator.docs"] == "docs"
    assert "reference.md" in setuptools["package-data"]["simulator.docs"]
    assert "scenario.schema.json" in setuptools["package-data"]["simulator"]
    assert reference.reference_path().is_file()


def test_schema_command_prints_the_schema(capsys) -> None:
    from simulator.cli import main

    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == reference.scenario_schema()
