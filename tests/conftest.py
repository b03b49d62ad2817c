"""Shared test helpers: run the CLI in-process, write small scenario files."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

from simulator import flops
from simulator.cli import main
from simulator.specs import Scenario

# Property tests draw the same examples on every run, so CI cannot fail by chance on a case
# no earlier run saw (a found counterexample becomes an explicit @example instead).
settings.register_profile("mfusim", derandomize=True, database=None)
settings.load_profile("mfusim")

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(stem: str, module_name: str | None = None) -> ModuleType:
    """benchmarks/<stem>.py as a module (the scripts are not a package), registered under
    `module_name` so that its dataclasses resolve their module by name."""
    name = module_name or stem
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# A small, valid scenario: quick to load and (once the engine exists) to simulate.
SMALL_SCENARIO = """\
name = "small test scenario"

[model]
layers = 4
hidden = 512
heads = 8
kv_heads = 8
ffn_hidden = 2048
vocab = 32000
seq_len = 1024
gated_mlp = false

[cluster]
topology = "dgx-a100"
num_gpus = 16

[parallel]
tp = 2
pp = 2
dp = 4
micro_batch = 1
global_batch = 16
schedule = "1f1b"
sequence_parallel = false
recompute = "none"
zero = 1

[precision]
dtype = "bf16"

[dataloader]
microbatch_latency_ms = 0.0
workers = 2
prefetch = 2
jitter = 0.0
seed = 0

[variability]
compute_jitter = 0.0
straggler_probability = 0.0
straggler_slowdown = 1.0
network_jitter = 0.0
seed = 0
"""

# A preset-based scenario whose [sweep] table is its last (tests may append sweep axes), for
# the planner's commands and the `import mfusim` API (issue 15).
SMALL_PLANNER_SCENARIO = """
name = "small"
[model]
preset = "gpt3-1.3b"
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
tp = 1
pp = 2
micro_batch = 1
global_batch = 16
[sweep]
tp = [1, 2]
pp = [1, 2]
micro_batch = [1, 2]
"""


@dataclass(frozen=True, slots=True)
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return 1  # SystemExit("message") prints the message and exits 1


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[[Sequence[str]], CliResult]:
    """Run `mfusim ARGS` in-process; SystemExit becomes an exit code, anything else propagates."""

    def run(argv: Sequence[str]) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        try:
            code = _exit_code(main(list(argv)))
        except SystemExit as exc:
            code = _exit_code(exc.code)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def small_scenario_text() -> str:
    return SMALL_SCENARIO


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[..., Path]:
    """write_file(text, name="scenario.toml") -> path in tmp_path (bytes allowed)."""

    def write(content: str | bytes, name: str = "scenario.toml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write


# ----------------------------------------------------------------------------- TOML writing
def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def dump_toml(data: dict[str, object], _prefix: str = "") -> str:
    """A minimal TOML writer (scalars, lists, nested tables; nan/inf as TOML literals)."""
    lines = []
    tables = []
    for key, value in data.items():
        name = json.dumps(str(key)) if not str(key).replace("_", "").replace("-", "").isalnum() else str(key)
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            tables.append((name, value))
        else:
            lines.append(f"{name} = {_toml_value(value)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for name, table in tables:
        full = f"{_prefix}.{name}" if _prefix else name
        out += f"\n[{full}]\n" + dump_toml(table, full)
    return out


@dataclass(frozen=True)
class FakeReport:
    """What validate reads from a simulation: step time, MFU, no memory report."""

    step_time_s: float
    mfu: float
    memory: None = None


def fake_simulate(scenario: Scenario) -> FakeReport:
    """Roofline stand-in for validate tests: hardware FLOPs at 50% of the dense peak, so a
    recipe's recompute modules change the prediction."""
    sf = flops.step_flops(scenario.model, scenario.parallel.global_batch, scenario.parallel.recompute)
    t = sf.hardware / (scenario.num_gpus * scenario.peak_flop_per_s * 0.5)
    return FakeReport(step_time_s=t, mfu=sf.model / (t * scenario.num_gpus * scenario.peak_flop_per_s))


# A small MoE model for layout tests (4 layers, 64 experts of 2,048, top-4): tests/test_expert_dp.py,
# tests/test_pipeline_runs.py
SMALL_MOE_MODEL = {
    "name": "moe",
    "layers": 4,
    "hidden": 2048,
    "heads": 16,
    "vocab": 32000,
    "seq_len": 4096,
    "moe": {"num_experts": 64, "top_k": 4, "expert_ffn_hidden": 2048},
}


def trace_sums_by_stage(events: list[dict]) -> dict[int, dict[str, float]]:
    """What a user does with the trace: add up `dur` by `cat` on each process's GPU timeline."""
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    out: dict[int, dict[str, float]] = {}
    for e in events:
        if e["ph"] == "X" and threads[(e["pid"], e["tid"])].startswith("compute"):
            stage = int(names[e["pid"]].split()[1])
            per = out.setdefault(stage, {})
            per[e["cat"]] = per.get(e["cat"], 0.0) + e["dur"] * 1e-6
    return out


@contextlib.contextmanager
def kernel_model_with(arch: str, **values: object) -> Iterator[None]:
    """The kernel model with `values` in kernels.toml's `[model.<arch>]` table (its cached
    parameters cleared before and after), e.g. to check that a bad value is refused naming it."""
    from simulator import kernel_catalog
    from simulator import kernels as K

    data = kernel_catalog.kernel_data()
    patched = {**data, "model": {**data["model"], arch: {**data["model"][arch], **values}}}
    K.params_for_architecture.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(K, "kernel_data", lambda: patched)
            yield
    finally:
        K.params_for_architecture.cache_clear()
