"""`mfusim sweep` (issue 5): counts, columns, resume after a kill, --jobs, Dask, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.loading import load_scenario
from simulator.resources import data_dir
from simulator.sweep import (
    COLUMNS,
    KEY_COLUMNS,
    SPEC_CONFIG_COLUMNS,
    _cell,
    plan_sweep,
    run_sweep,
)
from simulator.timeline import CATEGORIES

# A 5.1e9-parameter GPT-style model on 8 A100-80GB. By hand (24 configurations):
#   tp × pp with tp·pp ∤ 8 → no integer dp: (4,4) (8,2) (8,4), × 2 micro-batch sizes = 6 invalid;
#   (tp,pp) = (1,1): dp = 8, micro_batch 2 → 16 ∤ global_batch 8: 1 more invalid;
#   (1,1) micro_batch 1: 18 B × 5.1e9 = 92 GB of model state: infeasible_memory;
#   the other 16 fit (model state ≤ 46 GB).
SMALL = """
name = "small"
[model]
layers = 24
hidden = 4096
heads = 32
vocab = 32000
seq_len = 1024
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
global_batch = 8
sequence_parallel = true
recompute = "selective"
[sweep]
tp = [1, 2, 4, 8]
pp = [1, 2, 4]
micro_batch = [1, 2]
"""
SMALL_COUNTS = {"ok": 16, "infeasible_memory": 1, "invalid": 7}


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return header, [dict(zip(header, r, strict=True)) for r in reader]


def key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[c] for c in KEY_COLUMNS)


def test_counts_by_hand(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    result = run_sweep(load_scenario(small), engine="analytic", out=out)
    assert result.counts == SMALL_COUNTS
    _, rows = read_csv(out)
    assert len(rows) == 24
    by = {(r["tp"], r["pp"], r["micro_batch"]): r for r in rows}
    oom = by[("1", "1", "1")]
    assert oom["status"] == "infeasible_memory" and "GiB" in oom["reason"]
    assert float(oom["mfu"]) > 0 and float(oom["peak_memory_gib"]) > 80  # still simulated
    bad = by[("8", "4", "1")]
    assert bad["status"] == "invalid" and "parallel.dp" in bad["reason"] and bad["dp"] == ""
    assert bad["mfu"] == "" and bad["step_time_s"] == "" and bad["compute_s"] == ""
    assert by[("1", "1", "2")]["status"] == "invalid" and "global_batch" in by[("1", "1", "2")]["reason"]
    # ranked: feasible only, best first
    mfus = [r["mfu"] for r in result.ranked]
    assert len(mfus) == 16 and mfus == sorted(mfus, reverse=True)


def test_csv_columns(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    header, rows = read_csv(out)
    assert tuple(header) == COLUMNS
    spec = (
        list(SPEC_CONFIG_COLUMNS)
        + ["status", "reason", "step_time_s", "tokens_per_s", "mfu", "hfu", "peak_memory_gib"]
        + [f"{c}_s" for c in CATEGORIES]
    )
    assert header[: len(spec)] == spec
    ok = [r for r in rows if r["status"] == "ok"]
    for r in ok:
        step = float(r["step_time_s"])
        assert sum(float(r[f"{c}_s"]) for c in CATEGORIES) == pytest.approx(step, rel=1e-6)
        assert 0 < float(r["mfu"]) <= float(r["hfu"]) < 1
        assert int(r["tp"]) * int(r["pp"]) * int(r["dp"]) == 8


def test_jsonl_output(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 24 and all(tuple(r) == COLUMNS for r in rows)
    assert sum(r["status"] == "ok" for r in rows) == 16


def test_resume_after_kill(small: Path, tmp_path: Path) -> None:
    full = tmp_path / "full.csv"
    run_sweep(load_scenario(small), engine="analytic", out=full)
    text = full.read_text()
    lines = text.splitlines(keepends=True)
    # killed while writing the 12th row: 11 whole rows and half a line
    partial = tmp_path / "partial.csv"
    kept = "".join(lines[:12])
    partial.write_text(kept + lines[12][: len(lines[12]) // 2])
    result = run_sweep(load_scenario(small), engine="analytic", out=partial, resume=True)
    after = partial.read_text()
    assert after.startswith(kept)  # finished rows are never rewritten
    header, rows = read_csv(partial)
    assert tuple(header) == COLUMNS
    keys = [key(r) for r in rows]
    assert len(keys) == len(set(keys)) == 24
    _, expected = read_csv(full)
    assert sorted(map(key, expected)) == sorted(keys)
    assert {key(r): (r["status"], r["mfu"]) for r in expected} == {
        key(r): (r["status"], r["mfu"]) for r in rows
    }
    assert result.counts == SMALL_COUNTS
    # resuming a complete file evaluates nothing and changes nothing
    run_sweep(load_scenario(small), engine="analytic", out=partial, resume=True)
    assert partial.read_text() == after


def test_resume_after_kill_in_the_header(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "h.csv"
    out.write_text(",".join(COLUMNS)[:30])
    result = run_sweep(load_scenario(small), engine="analytic", out=out, resume=True)
    header, rows = read_csv(out)
    assert tuple(header) == COLUMNS and len(rows) == 24 and result.counts == SMALL_COUNTS


def test_resume_jsonl_after_kill(small: Path, tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl"
    run_sweep(load_scenario(small), engine="analytic", out=full)
    lines = full.read_text().splitlines(keepends=True)
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(lines[:5]) + lines[5][:40])
    run_sweep(load_scenario(small), engine="analytic", out=partial, resume=True)
    rows = [json.loads(line) for line in partial.read_text().splitlines()]
    expected = [json.loads(line) for line in lines]
    assert len(rows) == 24
    assert sorted(json.dumps(r, sort_keys=True) for r in rows) == sorted(
        json.dumps(r, sort_keys=True) for r in expected
    )


def test_resume_keys_survive_odd_values(tmp_path: Path) -> None:
    # ints where floats are expected, strings where ints are: keys read back as written
    path = tmp_path / "odd.toml"
    path.write_text(
        SMALL.replace("micro_batch = [1, 2]", 'grad_bucket_params = [40000000, 20000000]\nzero = [0, "x"]')
    )
    out = tmp_path / "odd.csv"
    first = run_sweep(load_scenario(path), engine="analytic", out=out)
    assert len(first.rows) == 4 * 3 * 2 * 2
    assert sum(r["status"] == "invalid" for r in first.rows if r["zero"] == "x") == 4 * 3 * 2
    before = out.read_text()
    again = run_sweep(load_scenario(path), engine="analytic", out=out, resume=True)
    assert out.read_text() == before and len(again.rows) == len(first.rows)


def test_resume_refuses_a_foreign_file(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "other.csv"
    out.write_text("a,b,c\n1,2,3\n")
    assert main(["sweep", str(small), "--out", str(out), "--resume", "--engine", "analytic"]) == 2
    assert out.read_text() == "a,b,c\n1,2,3\n"
    no_newline = tmp_path / "notes.csv"
    no_newline.write_text("my notes")
    assert main(["sweep", str(small), "--out", str(no_newline), "--resume", "--engine", "analytic"]) == 2
    assert no_newline.read_text() == "my notes"
    jsonl = tmp_path / "other.jsonl"
    jsonl.write_text("a,b,c\n")
    assert main(["sweep", str(small), "--out", str(jsonl), "--resume", "--engine", "analytic"]) == 2
    assert jsonl.read_text() == "a,b,c\n"


def test_jobs_2_gives_the_same_rows(small: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    run_sweep(load_scenario(small), engine="analytic", out=one, jobs=1)
    run_sweep(load_scenario(small), engine="analytic", out=two, jobs=2)
    assert one.read_text() == two.read_text()


def test_dask_local_cluster(small: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    one, dask = tmp_path / "one.csv", tmp_path / "dask.csv"
    run_sweep(load_scenario(small), engine="analytic", out=one)
    result = run_sweep(load_scenario(small), engine="analytic", out=dask, jobs=2, dask="local")
    assert result.counts == SMALL_COUNTS
    _, a = read_csv(one)
    _, b = read_csv(dask)
    assert sorted(a, key=key) == sorted(b, key=key)


def test_default_axes_are_divisors(tmp_path: Path) -> None:
    path = tmp_path / "nosweep.toml"
    path.write_text(
        SMALL.split("[sweep]")[0]
        .replace("num_gpus = 8", "num_gpus = 16")
        .replace("global_batch = 8", "global_batch = 16")
    )
    plan = plan_sweep(load_scenario(path))
    axes = dict(plan.axes)
    assert axes["tp"] == (1, 2, 4, 8)  # divisors of 16 within a DGX node
    assert axes["pp"] == (1, 2, 4, 8, 16)  # divisors of 16 up to 24 layers
    assert plan.size == 20


def test_cli_table_json_and_plot(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    assert (
        main(
            ["sweep", str(small), "--out", str(out), "--engine", "analytic", "--top", "3", "--plot", str(png)]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "16 ok, 1 infeasible_memory, 7 invalid" in captured.out
    assert "MFU" in captured.out and "comp" in captured.out
    assert "24/24" not in captured.err  # the progress bar draws only on a terminal
    assert png.stat().st_size > 10_000
    assert main(["sweep", str(small), "--engine", "analytic", "--json", "--top", "2"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["counts"] == SMALL_COUNTS and len(obj["top"]) == 2


def test_parallel_table_valid_only_with_the_sweep(tmp_path: Path) -> None:
    # tp = 16 alone does not fit 8 GPUs, but every configuration replaces tp
    path = tmp_path / "base.toml"
    path.write_text(SMALL.replace("[parallel]", "[parallel]\ntp = 16"))
    out = tmp_path / "s.csv"
    assert main(["sweep", str(path), "--out", str(out), "--engine", "analytic"]) == 0
    _, rows = read_csv(out)
    assert sum(r["status"] == "ok" for r in rows) == 16


def test_cli_errors_exit_2(small: Path, tmp_path: Path) -> None:
    assert main(["sweep", str(small), "--resume"]) == 2
    assert main(["sweep", str(tmp_path / "missing.toml")]) == 2
    assert main(["sweep", str(small), "--out", str(tmp_path)]) == 2


def test_auto_refines_the_top_with_the_engine(small: Path, tmp_path: Path) -> None:
    """One ranking: the engine's numbers wherever it ran; the top K (--top) all engine-checked;
    the largest closed-form/engine gap reported; table and CSV agree."""
    out = tmp_path / "auto.csv"
    result = run_sweep(load_scenario(small), engine="auto", top=5, refine=2, out=out)
    assert [r["engine"] for r in result.ranked[:5]] == ["des"] * 5
    mfus = [r["mfu"] for r in result.ranked]
    assert mfus == sorted(mfus, reverse=True)  # one order, whichever engine gave the number
    _, rows = read_csv(out)
    checked = [r for r in rows if r["engine"] == "des"]
    assert len(checked) >= 5 and len(rows) == 24
    by_mfu = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: -float(r["mfu"]))
    assert [key(r) for r in by_mfu[:5]] == [tuple(_cell(v) for v in key(r)) for r in result.ranked[:5]]
    gaps = [abs(float(r["closed_form_mfu"]) - float(r["mfu"])) / float(r["mfu"]) for r in checked]
    assert result.largest_gap == pytest.approx(max(gaps), rel=1e-9)


def test_gpt3_175b_sweep_recompute_only_adds_work(tmp_path: Path) -> None:
    # A reduced version of the shipped GPT-3 175B sweep (the full one: benchmarks/bench_sweep.py).
    # (Megatron's published choice for this model is tp=8 with a pipeline; the closed form ranks
    # tp=4 pp=8 vp=2 first, by 3 points of MFU: an open calibration question, not asserted here.)
    scn = load_scenario(data_dir("scenarios") / "gpt3-175b-1024-a100.toml")
    from dataclasses import replace

    scn = replace(
        scn,
        sweep=(("tp", (2, 4, 8)), ("pp", (4, 8, 16)), ("recompute", ("none", "selective")), ("vp", (1, 2))),
    )
    result = run_sweep(scn, engine="analytic", top=3, jobs=2)
    ok = {(r["tp"], r["pp"], r["vp"], r["recompute"]): r for r in result.rows if r["status"] == "ok"}
    pairs = [(ok[k], ok[(*k[:3], "selective")]) for k in ok if k[3] == "none" and (*k[:3], "selective") in ok]
    assert len(pairs) >= 5
    for none, selective in pairs:
        # recomputing attention adds FLOPs and saves memory; it never makes a step faster
        assert selective["step_time_s"] >= none["step_time_s"]
        assert selective["peak_memory_gib"] <= none["peak_memory_gib"]
    # tensor parallelism shards weights: at a given pipeline depth, more tp means less memory
    for (tp, pp, vp, rc), row in ok.items():
        wider = ok.get((2 * tp, pp, vp, rc))
        if wider is not None:
            assert wider["peak_memory_gib"] < row["peak_memory_gib"]
