"""The whole training run: days, GPU-hours, cost, energy and goodput (issue 15, docs/plan.md).

One simulated step gives tokens/s; a run of `tokens` tokens on N GPUs then takes
`tokens / tokens_per_s / goodput` seconds of wall-clock time, where the goodput is the fraction
of wall time spent on useful steps. The rest goes to checkpoint stalls, work lost since the last
checkpoint when a GPU fails, and restarts.

Failures are a Poisson process with rate N·λ (λ per GPU), so the job's mean time between
interruptions is M = 1 / (N·λ). With a checkpoint every τ seconds of work that stalls the job
for δ seconds, and R seconds to restart after a failure, the expected wall time of one τ of
work is (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22(3) -- the complete model with failures during restarts too):

    T(τ) = M · e^{R/M} · (e^{(τ+δ)/M} − 1),        goodput = τ / T(τ)

Its optimum interval is Young's first-order sqrt(2·δ·M) (Young 1974, "A first order
approximation to the optimum checkpoint interval", CACM 17(9)) refined by Daly's higher-order
estimate. Asynchronous checkpoints stall the job only for the copy of each GPU's share to host
memory; the storage write then runs behind compute, and a failure during it loses that
checkpoint too: on average `write_s` more work (folded into the restart term R).

Everything here is SI (seconds, bytes, watts, joules); human units only in `to_dict` keys
that name them (days, MWh) and in the loader (minutes, GB/s, per year).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .specs import RunSpec
from .units import DAY_S, HOUR_S, JOULES_PER_MWH, MIN_S

if TYPE_CHECKING:
    from .metrics import StepReport
    from .specs import GPUSpec, Scenario

MIN_GOODPUT = 1e-3  # below this the plan is meaningless (the job mostly restarts): refused


# ----------------------------------------------------------------------------- closed forms
def young_interval_s(stall_s: float, mtbf_s: float) -> float:
    """Young (1974): the first-order optimum checkpoint interval, sqrt(2·δ·M)."""
    return math.sqrt(2.0 * stall_s * mtbf_s)


def daly_interval_s(stall_s: float, mtbf_s: float) -> float:
    """Daly (2006): the higher-order optimum of the complete model `segment_wall_s`.

    τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ   for δ < 2M, else τ = M.
    It tends to Young's sqrt(2δM) when δ ≪ M.
    """
    if stall_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = stall_s / (2.0 * mtbf_s)
    return young_interval_s(stall_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - stall_s


def segment_wall_s(work_s: float, stall_s: float, restart_s: float, mtbf_s: float) -> float:
    """Daly (2006): expected wall time to complete `work_s` of work and its checkpoint.

    T = M·e^{R/M}·(e^{(τ+δ)/M} − 1) with failures (rate 1/M) also striking during restarts.
    Without failures (M = inf) it is τ + δ. Computed in log space: no overflow.
    """
    if math.isinf(mtbf_s):
        return work_s + stall_s
    x = (work_s + stall_s) / mtbf_s
    log_expm1 = x + math.log(-math.expm1(-x)) if x > 0 else -math.inf
    log_t = math.log(mtbf_s) + restart_s / mtbf_s + log_expm1
    return math.exp(min(log_t, 700.0))


def goodput(work_s: float, stall_s: float, restart_s: float, mtbf_s: float) -> float:
    """Fraction of wall time spent on useful work: τ / T(τ) (Daly 2006)."""
    return work_s / segment_wall_s(work_s, stall_s, restart_s, mtbf_s)


def _time_fractions(
    work_s: float, stall_s: float, restart_s: float, rework_s: float, mtbf_s: float, seg_s: float
) -> dict[str, float]:
    """Where the expected wall time of a segment goes (Daly's model, term by term).

    An attempt of L = τ + δ succeeds with probability e^{−L/M}: e^{L/M} − 1 failed attempts are
    expected, each losing E[t | t < L] of work, so lost work = M·(e^{L/M} − 1) − L. Each
    failure is followed by a restart that takes M·(e^{R/M} − 1) on average when restarts can
    fail too. Asynchronous checkpoints' extra rework w is part of R there and counted as lost work.
    """
    if math.isinf(mtbf_s):
        return {"useful": work_s / seg_s, "checkpoint": stall_s / seg_s, "restart": 0.0, "lost_work": 0.0}
    failures = math.expm1((work_s + stall_s) / mtbf_s)
    lost_s = mtbf_s * failures - (work_s + stall_s)
    restarts_s = failures * mtbf_s * math.expm1((restart_s + rework_s) / mtbf_s)
    share = restart_s / (restart_s + rework_s) if restart_s + rework_s > 0 else 1.0
    return {
        "useful": work_s / seg_s,
        "checkpoint": stall_s / seg_s,
        "restart": restarts_s * share / seg_s,
        "lost_work": (lost_s + restarts_s * (1.0 - share)) / seg_s,
    }


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True, slots=True)
class Plan:
    """A whole training run, SI inside. `to_dict` gives the `plan` object of `run --json`."""

    tokens: float
    num_gpus: int
    tokens_per_s: float
    tokens_per_step: int
    num_steps: int
    goodput: float
    checkpoint_interval_s: float | None  # None: no failures and none asked for
    interval_source: str  # "young-daly" | "given" | "storage-bound" | "none"
    optimal_checkpoint_interval_s: float | None  # the Young/Daly optimum (None: no failures)
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_stall_s: float
    checkpoint_async: bool
    job_mtbf_s: float | None  # None: failure rate 0
    restart_s: float
    fractions: dict[str, float]  # useful, checkpoint, restart, lost_work: sum to 1
    usd_per_gpu_hour: float | None
    it_power_w_per_gpu: float | None  # None: the GPU catalog has no board power
    pue: float
    warnings: tuple[str, ...] = ()

    @property
    def step_time_s(self) -> float:
        return self.tokens_per_step / self.tokens_per_s

    @property
    def checkpoint_every_steps(self) -> int | None:
        if self.checkpoint_interval_s is None:
            return None
        return round(self.checkpoint_interval_s / self.step_time_s)

    @property
    def compute_time_s(self) -> float:
        """Failure-free time of the useful steps: tokens / tokens_per_s."""
        return self.tokens / self.tokens_per_s

    @property
    def wall_time_s(self) -> float:
        return self.compute_time_s / self.goodput

    @property
    def gpu_hours(self) -> float:
        """GPU-hours reserved: tokens / tokens_per_s / 3600 × GPUs / goodput."""
        return self.wall_time_s / HOUR_S * self.num_gpus

    @property
    def cost_usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.gpu_hours * self.usd_per_gpu_hour

    @property
    def expected_interruptions(self) -> float:
        return 0.0 if self.job_mtbf_s is None else self.wall_time_s / self.job_mtbf_s

    @property
    def facility_power_w(self) -> float | None:
        """Average facility power: N × (board + node overhead) × utilization × PUE."""
        if self.it_power_w_per_gpu is None:
            return None
        return self.num_gpus * self.it_power_w_per_gpu * self.pue

    @property
    def energy_j(self) -> float | None:
        """Facility energy over the whole wall time (restarts and stalls drawn at training power)."""
        power = self.facility_power_w
        return None if power is None else power * self.wall_time_s

    def to_dict(self) -> dict[str, Any]:
        energy, power, mtbf = self.energy_j, self.facility_power_w, self.job_mtbf_s
        return {
            "tokens": self.tokens,
            "num_steps": self.num_steps,
            "tokens_per_s": self.tokens_per_s,
            "compute_days": self.compute_time_s / DAY_S,
            "days": self.wall_time_s / DAY_S,
            "gpu_hours": self.gpu_hours,
            "cost_usd": self.cost_usd,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "energy_mwh": None if energy is None else energy / JOULES_PER_MWH,
            "facility_power_mw": None if power is None else power / 1e6,
            "goodput": self.goodput,
            "time_fractions": dict(self.fractions),
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "checkpoint_every_steps": self.checkpoint_every_steps,
            "checkpoint_interval_source": self.interval_source,
            "optimal_checkpoint_interval_s": self.optimal_checkpoint_interval_s,
            "checkpoint_bytes": self.checkpoint_bytes,
            "checkpoint_write_s": self.checkpoint_write_s,
            "checkpoint_stall_s": self.checkpoint_stall_s,
            "checkpoint_async": self.checkpoint_async,
            "job_mtbf_hours": None if mtbf is None else mtbf / HOUR_S,
            "expected_interruptions": self.expected_interruptions,
            "restart_s": self.restart_s,
            "pue": self.pue,
            "it_power_w_per_gpu": self.it_power_w_per_gpu,
        }


def plan_run(
    run: RunSpec,
    *,
    num_gpus: int,
    gpu: GPUSpec,
    params: float,
    tokens_per_s: float,
    tokens_per_step: int,
) -> Plan:
    """The plan of a run from one step's throughput: pure arithmetic, no simulation."""
    if not (tokens_per_s > 0 and math.isfinite(tokens_per_s)):
        raise ConfigError(f"needs a positive throughput, got {tokens_per_s!r} tokens/s", key="run.tokens")
    warnings: list[str] = []
    ckpt_bytes = params * run.checkpoint_bytes_per_param
    write_s = ckpt_bytes / run.storage_write_bytes_per_s
    # Each GPU stages its share of the state to host memory (DCP writes every shard once).
    snapshot_s = ckpt_bytes / num_gpus / gpu.host_link_bytes_per_s if gpu.host_link_bytes_per_s else 0.0
    if run.checkpoint_async:
        stall_s, rework_s = snapshot_s, write_s
    else:
        stall_s, rework_s = max(write_s, snapshot_s), 0.0
    rate = num_gpus * run.gpu_failure_rate_per_s
    mtbf_s = math.inf if rate == 0 else 1.0 / rate
    # Checkpoints are taken between optimizer steps: an interval is a whole number of steps.
    step_s = tokens_per_step / tokens_per_s

    def whole_steps(t_s: float) -> float:
        return max(1, round(t_s / step_s)) * step_s

    # the next asynchronous checkpoint cannot start before the previous one is written
    min_interval_s = step_s
    if run.checkpoint_async and write_s - stall_s > step_s:
        min_interval_s = math.ceil((write_s - stall_s) / step_s - 1e-9) * step_s
    daly_s = None if math.isinf(mtbf_s) else whole_steps(daly_interval_s(stall_s, mtbf_s))
    optimum = None if daly_s is None else max(daly_s, min_interval_s)
    interval: float | None
    if run.checkpoint_interval_s > 0:
        interval, source = whole_steps(run.checkpoint_interval_s), "given"
        if run.checkpoint_async and interval < min_interval_s:
            raise ConfigError(
                f"{run.checkpoint_interval_s / MIN_S:.3g} min is shorter than one asynchronous checkpoint's "
                f"write ({write_s / MIN_S:.3g} min at storage_write_GBps); checkpoints would pile up",
                key="run.checkpoint_interval_min",
            )
    elif daly_s is None:
        interval, source = None, "none"
    else:
        interval, source = optimum, ("young-daly" if daly_s >= min_interval_s else "storage-bound")
    restart_eff_s = run.restart_s + rework_s
    if interval is None:
        fractions = {"useful": 1.0, "checkpoint": 0.0, "restart": 0.0, "lost_work": 0.0}
        good = 1.0
    else:
        seg_s = segment_wall_s(interval, stall_s, restart_eff_s, mtbf_s)
        good = interval / seg_s
        if good < MIN_GOODPUT:
            raise ConfigError(
                f"with a job MTBF of {mtbf_s / MIN_S:.3g} min, {run.restart_s / MIN_S:.3g} min restarts and "
                f"{stall_s:.3g} s checkpoint stalls, the job would spend over {1 - MIN_GOODPUT:.1%} of its "
                "time failing; check gpu_failures_per_year, restart_min and storage_write_GBps",
                key="run.gpu_failures_per_year",
            )
        fractions = _time_fractions(interval, stall_s, run.restart_s, rework_s, mtbf_s, seg_s)
    if good < 0.5:
        warnings.append(f"goodput {good:.0%}: failures and checkpoints take most of the wall time")
    if gpu.board_power_w > 0:
        it_w: float | None = (gpu.board_power_w + gpu.node_overhead_w_per_gpu) * run.power_utilization
    else:
        it_w = None
        warnings.append(f"GPU {gpu.name} has no board power in the catalog: energy not reported")
    return Plan(
        tokens=run.tokens,
        num_gpus=num_gpus,
        tokens_per_s=tokens_per_s,
        tokens_per_step=tokens_per_step,
        num_steps=math.ceil(run.tokens / tokens_per_step),
        goodput=good,
        checkpoint_interval_s=interval,
        interval_source=source,
        optimal_checkpoint_interval_s=optimum,
        checkpoint_bytes=ckpt_bytes,
        checkpoint_write_s=write_s,
        checkpoint_stall_s=stall_s,
        checkpoint_async=run.checkpoint_async,
        job_mtbf_s=None if math.isinf(mtbf_s) else mtbf_s,
        restart_s=run.restart_s,
        fractions=fractions,
        usd_per_gpu_hour=run.usd_per_gpu_hour,
        it_power_w_per_gpu=it_w,
        pue=run.pue,
        warnings=tuple(warnings),
    )


def plan_for(
    scn: Scenario, report: StepReport, run: RunSpec | None = None, tokens_per_s: float | None = None
) -> Plan:
    """The plan of `scn`'s run (its `[run]` table, or `run`) from its simulated step (or from
    `tokens_per_s`, e.g. the mean over sampled steps with jitter and stragglers)."""
    from .flops import total_params

    spec = run if run is not None else scn.run
    if spec is None:
        raise ConfigError("no [run] table: give run.tokens (or --tokens)", key="run.tokens")
    return plan_run(
        spec,
        num_gpus=scn.num_gpus,
        gpu=scn.gpu,
        params=float(total_params(scn.model)),
        tokens_per_s=report.tokens_per_s if tokens_per_s is None else tokens_per_s,
        tokens_per_step=scn.tokens_per_step,
    )


# A sweep row's plan (`mfusim sweep` with a [run] table): the columns and how --rank-by uses them.
PLAN_COLUMNS = ("time_to_train_days", "gpu_hours", "cost_usd", "energy_mwh", "goodput")
# --rank-by name -> (column, higher is better)
RANK_KEYS = {
    "mfu": ("mfu", True),
    "tokens_per_s": ("tokens_per_s", True),
    "time_to_train": ("time_to_train_days", False),
    "cost": ("cost_usd", False),
}


def check_rank_by(scn: Scenario, rank_by: str, key: str = "rank_by") -> None:
    """Ranking by the plan needs one: time_to_train a [run] table, cost also its price."""
    if rank_by == "time_to_train" and scn.run is None:
        raise ConfigError("time_to_train needs a [run] table or --tokens N", key=key)
    if rank_by == "cost" and (scn.run is None or scn.run.usd_per_gpu_hour is None):
        raise ConfigError(
            "cost needs a [run] table with usd_per_gpu_hour, or --tokens N --usd-per-gpu-hour P", key=key
        )


def plan_columns(p: Plan) -> dict[str, float | None]:
    d = p.to_dict()
    return {
        "time_to_train_days": d["days"],
        "gpu_hours": d["gpu_hours"],
        "cost_usd": d["cost_usd"],
        "energy_mwh": d["energy_mwh"],
        "goodput": d["goodput"],
    }


def _num(x: float) -> str:
    """A figure for a person: 28,519,437 or 30,399 or 2.44 or 0.0244."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def format_plan(p: Plan) -> str:
    """The plan as text lines for `mfusim run`."""
    d = p.to_dict()
    lines = [
        "",
        f"  Whole run: {p.tokens:.3g} tokens in {p.num_steps:,} steps",
        f"  wall clock {_num(d['days'])} days ({_num(d['compute_days'])} days of useful steps), "
        f"{_num(p.gpu_hours)} GPU-hours" + (f", ${_num(p.cost_usd)}" if p.cost_usd is not None else ""),
    ]
    if d["energy_mwh"] is not None:
        lines.append(
            f"  energy {_num(d['energy_mwh'])} MWh at {_num(d['facility_power_mw'])} MW facility power "
            f"(PUE {p.pue:g}, {p.it_power_w_per_gpu:.0f} W IT per GPU)"
        )
    fr = p.fractions
    lines.append(
        f"  goodput {p.goodput:.1%}: checkpoint stalls {fr['checkpoint']:.1%}, restarts {fr['restart']:.1%}, "
        f"lost work {fr['lost_work']:.1%}"
    )
    if p.job_mtbf_s is not None:
        lines.append(
            f"  job MTBF {_num(p.job_mtbf_s / HOUR_S)} h, ~{_num(p.expected_interruptions)} interruptions; "
            f"checkpoint {p.checkpoint_bytes / 1e12:.3g} TB: write {p.checkpoint_write_s:.3g} s, "
            f"stall {p.checkpoint_stall_s:.3g} s" + (" (async)" if p.checkpoint_async else "")
        )
    if p.checkpoint_interval_s is not None:
        line = f"  checkpoint every {_num(p.checkpoint_interval_s / MIN_S)} min ({p.interval_source})"
        if p.interval_source == "given" and p.optimal_checkpoint_interval_s is not None:
            line += f"; the Young/Daly optimum is {_num(p.optimal_checkpoint_interval_s / MIN_S)} min"
        lines.append(line)
    return "\n".join(lines)
