"""What a user reads (issue 17): batch arithmetic, fixed precision, metric definitions, refused
output formats, the default sweep grid announced, readable invalid-reason summaries."""

from __future__ import annotations

import re

import pytest

from simulator.cli import main
from simulator.run import batch_arithmetic, duration_text


def test_header_shows_how_the_global_batch_is_made(capsys) -> None:
    assert main(["run", "teaching-pp4"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"(\d+) seqs? × (\d+) micro-batch(?:es)? × dp (\d+) = ([\d,]+) sequences", out)
    assert m, out
    mb, n, dp, total = (int(g.replace(",", "")) for g in m.groups())
    assert mb * n * dp == total == 8
    assert "MFU = model FLOPs / (step time x GPUs x peak)" in out and "MFU(6Ψ) counts 6 x parameters" in out


def test_batch_arithmetic_of_gpt3() -> None:
    assert batch_arithmetic(1, 192, 8, 1536) == "1 seq × 192 micro-batches × dp 8 = 1,536 sequences"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (17.45, "17.4 s"),
        (0.1577, "158 ms"),
        (0.003963, "3.96 ms"),
        (1.0, "1.00 s"),
        (123.4, "123 s"),
        (0.0, "0 ms"),
    ],
)
def test_durations_have_three_significant_digits(seconds, text) -> None:
    assert duration_text(seconds) == text


def test_breakdown_rows_share_one_precision(capsys) -> None:
    assert main(["run", "teaching-pp4"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^  (compute|pp_comm|bubble|optimizer)\s+(\S+) (ms|s)\s", out, flags=re.M)
    assert len(rows) >= 3
    for _, value, _unit in rows:
        digits = value.replace(".", "").lstrip("0")
        assert len(digits) == 3 or value == "0", value


def test_unknown_output_extensions_are_refused(tmp_path, capsys) -> None:
    assert main(["sweep", "teaching-pp4", "--out", str(tmp_path / "s.parquet")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and ".parquet" in err and err.count("\n") == 1
    assert not (tmp_path / "s.parquet").exists()
    assert main(["validate", "--out", str(tmp_path / "v.xlsx")]) == 2
    assert ".xlsx" in capsys.readouterr().err


def test_default_sweep_grid_is_announced_and_invalid_reasons_keep_their_numbers(tmp_path, capsys) -> None:
    scn = tmp_path / "s.toml"
    scn.write_text(
        'name = "s"\n[model]\npreset = "gpt3-1.3b"\n[cluster]\ntopology = "dgx-a100"\nnum_gpus = 16\n'
        "[parallel]\nglobal_batch = 32\n"
    )
    assert main(["sweep", str(scn), "--engine", "analytic", "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    assert "no [sweep] table: sweeping the default grid" in captured.err
    assert "tp in {1, 2, 4, 8}" in captured.err and "(20 configurations" in captured.err
    summary = captured.out.split("invalid configurations by reason", 1)[1]
    assert " N " not in summary and "= N" not in summary
    assert re.search(r"tp\*pp\*cp = \d+ does not divide num_gpus = 16", summary)
