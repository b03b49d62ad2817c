"""From a simulated step to the numbers users read (SPEC §4).

MFU = model FLOPs per step / (step time × N × peak); HFU adds recomputed FLOPs;
`mfu_6psi` uses the seed's 6Ψ per token. The breakdown is the mean over pipeline stages
of each stage's exclusive timeline, so it sums to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .memory import MemoryReport, memory_footprint
from .specs import ParallelConfig, Scenario
from .timeline import CATEGORIES
from .units import GIB_BYTES, TERA

if TYPE_CHECKING:
    from .program import Program


def mean_breakdown(by_stage: tuple[dict[str, float], ...] | list[dict[str, float]]) -> dict[str, float]:
    n = max(len(by_stage), 1)
    return {c: sum(s.get(c, 0.0) for s in by_stage) / n for c in CATEGORIES}


@dataclass(frozen=True, slots=True)
class StepReport:
    name: str
    num_gpus: int
    parallel: ParallelConfig
    step_time_s: float
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    six_psi_flops_per_step: float
    peak_flop_per_s: float
    breakdown_by_stage_s: tuple[dict[str, float], ...]
    memory: MemoryReport | None = None
    warnings: tuple[str, ...] = ()
    collectives: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    def _utilization(self, flops: float) -> float:
        return flops / (self.step_time_s * self.num_gpus * self.peak_flop_per_s)

    @property
    def mfu(self) -> float:
        return self._utilization(self.model_flops_per_step)

    @property
    def hfu(self) -> float:
        return self._utilization(self.hardware_flops_per_step)

    @property
    def mfu_6psi(self) -> float:
        return self._utilization(self.six_psi_flops_per_step)

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops_per_step / self.step_time_s / self.num_gpus / TERA

    @property
    def breakdown_s(self) -> dict[str, float]:
        return mean_breakdown(self.breakdown_by_stage_s)

    def to_dict(self) -> dict[str, Any]:
        par = self.parallel
        out: dict[str, Any] = {
            "name": self.name,
            "num_gpus": self.num_gpus,
            "parallel": {
                "tp": par.tp,
                "pp": par.pp,
                "dp": par.dp,
                "cp": par.cp,
                "ep": par.ep,
                "vp": par.vp,
                "micro_batch": par.micro_batch,
                "global_batch": par.global_batch,
                "num_microbatches": par.num_microbatches,
                # gradient accumulation as pipeline runs: only when the scenario sets local_batch
                **(
                    {"local_batch": par.local_batch, "pipeline_runs": par.pipeline_runs}
                    if par.local_batch
                    else {}
                ),
                "schedule": par.schedule,
                "recompute": par.recompute,
                "sequence_parallel": par.sequence_parallel,
                "zero": par.zero,
                "etp": par.expert_tp,
                "ep_comm_overlap": par.ep_comm_overlap,
                "pipeline_layout": list(par.pipeline_layout),
                # the context-parallel implementation (no effect at cp = 1, so shown only above it)
                **({"cp_comm_type": par.cp_comm_type} if par.cp > 1 else {}),
            },
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_flops_per_step": self.model_flops_per_step,
            "hardware_flops_per_step": self.hardware_flops_per_step,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "mfu_6psi": self.mfu_6psi,
            "breakdown_s": self.breakdown_s,
            "breakdown_by_stage_s": [dict(s) for s in self.breakdown_by_stage_s],
        }
        if self.memory is not None:
            out["memory"] = self.memory.to_dict()
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.collectives:
            out["collectives"] = list(self.collectives)
        out.update(self.extra)
        return out


def step_report(
    scn: Scenario, program: Program, step_time_s: float, by_stage: tuple[dict[str, float], ...]
) -> StepReport:
    """The SPEC §4 report of a step, however its time was obtained (engine or closed form).
    The expected wait for the job's slowest GPU (simulator/gpu_spread.py) is added here, to both
    paths alike, as the `gpu_spread` category of every stage."""
    from .flops import step_flops
    from .gpu_spread import (
        SPREAD_CATEGORY,
        bubble_fraction,
        gpu_speed_spread,
        slowest_gpu_factor,
        spread_wait_s,
    )

    par = scn.parallel
    wait_s = spread_wait_s(
        by_stage,
        slowest_gpu_factor(gpu_speed_spread(scn), scn.num_gpus),
        bubble_fraction(par.schedule, par.pp, par.vp, par.microbatches_per_run),
    )
    if wait_s > 0.0:
        step_time_s += wait_s
        by_stage = tuple({**s, SPREAD_CATEGORY: s.get(SPREAD_CATEGORY, 0.0) + wait_s} for s in by_stage)

    f = step_flops(
        scn.model, scn.parallel.global_batch, scn.parallel.recompute, scn.parallel.recompute_modules
    )
    memory = memory_footprint(scn)
    warnings = list(scn.warnings()) + list(program.warnings)
    if not memory.fits:
        warnings.append(
            f"does not fit in GPU memory: {memory.peak_bytes / GIB_BYTES:.1f} GiB needed per GPU, "
            f"{memory.capacity_bytes / GIB_BYTES:.0f} GiB available"
        )
    return StepReport(
        name=scn.name,
        num_gpus=scn.num_gpus,
        parallel=scn.parallel,
        step_time_s=step_time_s,
        tokens_per_step=scn.tokens_per_step,
        model_flops_per_step=f.model,
        hardware_flops_per_step=f.hardware,
        six_psi_flops_per_step=f.six_psi,
        peak_flop_per_s=scn.peak_flop_per_s,
        breakdown_by_stage_s=by_stage,
        memory=memory,
        warnings=tuple(warnings),
        collectives=program.collectives,
        extra={"kernels": software_stack(scn, program)},
    )


def software_stack(scn: Scenario, program: Program | None = None) -> dict[str, Any]:
    """The kernel choices and system-level residuals this step was costed with (issue 12)."""
    from dataclasses import asdict

    from .clocks import sustained_clock_fraction
    from .gpu_spread import gpu_speed_spread, slowest_gpu_factor
    from .kernels import architecture, resolve_attention

    k = scn.kernels
    from .program import deepspeed_pipe, tp_comm_async

    # DeepSpeed reduces in its 16-bit communication_data_type (program.DS_PIPE_NOTE)
    wide = "bf16" if deepspeed_pipe(scn) else "fp32"
    grad_dtype = k.grad_reduce_dtype or ("fp16" if scn.dtype == "fp16" else wide)
    out = {
        "architecture": architecture(scn.gpu.name),
        "attention": resolve_attention(scn.gpu, k.attention, k.flash_attention),
        "grad_reduce_dtype": grad_dtype,
        "tp_comm_async": tp_comm_async(scn),
        "cross_entropy": k.cross_entropy or "unfused",
        "zero3_collectives": k.zero3_collectives,
        "stack": k.stack,
        "zero3_backward_prefetch": k.zero3_backward_prefetch,
        "fused_grouped_mlp": k.fused_grouped_mlp,
        "cuda_graph_impl": k.cuda_graph_impl,
        "cuda_graph_modules": list(k.cuda_graph_modules),
        "moe_dispatcher": k.moe_dispatcher,
        "ep_comm_sms": k.ep_comm_sms_used,  # the key or the dispatcher's default
        # the clock this GPU runs at: the calibrated reference-SKU clock × the board-power law
        "system": {
            **asdict(scn.gpu.efficiency),
            "sustained_clock_fraction": sustained_clock_fraction(scn.gpu),
            # the power-limited clock of the step's kernel mix (simulator/clocks.py)
            "tensor_activity": program.tensor_activity if program is not None else 0.0,
            "power_limited_clock": program.power_clock if program is not None else 1.0,
            # per-GPU speed spread and the expected extra time of the slowest of num_gpus GPUs
            "gpu_speed_spread": gpu_speed_spread(scn),
            "slowest_gpu_factor": slowest_gpu_factor(gpu_speed_spread(scn), scn.num_gpus),
        },
    }
    if scn.model.is_moe:
        out["expert_gemm_overhead"] = expert_gemm_overhead(scn)
    return out


def expert_gemm_overhead(scn: Scenario) -> dict[str, Any]:
    """The eager per-expert GEMM residual as this MoE step pays it (program.EXPERT_GEMM_OVERHEAD_NOTE):
    whether the path runs, the time per GEMM, the GEMMs and the time per MoE layer and micro-batch
    (trace segments named program.EXPERT_GEMM_OVERHEAD_NAME)."""
    from .program import eager_expert_gemms, eager_expert_path, expert_gemm_overhead_s

    per_gemm = expert_gemm_overhead_s(scn)
    gemms = eager_expert_gemms(scn)
    return {
        "eager_path": eager_expert_path(scn),
        "per_gemm_s": per_gemm,
        "gemms_per_moe_layer_microbatch": gemms,
        "per_moe_layer_microbatch_s": per_gemm * gemms,
    }
