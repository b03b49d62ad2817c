"""Unit constants: the one place human units meet SI (DESIGN.md §3).

Everything inside the simulator is SI: seconds, bytes, FLOP, FLOP/s, bytes/s.
Rates use decimal prefixes (tera = 1e12). GiB is binary and is used for memory
capacity only. Files and reports convert with these constants and nowhere else.
"""

from __future__ import annotations

GIGA = 1e9
TERA = 1e12

GIB_BYTES = 2**30

US_S = 1e-6  # one microsecond in seconds
MS_S = 1e-3  # one millisecond in seconds
MIN_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0
YEAR_S = 365.25 * DAY_S  # Julian year
JOULES_PER_MWH = 3.6e9

BITS_PER_BYTE = 8


def gbps_to_bytes_per_s(gbit_per_s: float) -> float:
    """Network link rate in Gb/s (decimal, bits) -> bytes/s."""
    return gbit_per_s * GIGA / BITS_PER_BYTE


def gBps_to_bytes_per_s(gbyte_per_s: float) -> float:
    """Bandwidth in GB/s (decimal, bytes) -> bytes/s."""
    return gbyte_per_s * GIGA


def bytes_per_s_to_gBps(bytes_per_s: float) -> float:
    """bytes/s -> GB/s (decimal), for messages."""
    return bytes_per_s / GIGA


def tflops_to_flop_per_s(tflop_per_s: float) -> float:
    return tflop_per_s * TERA


def us_to_s(us: float) -> float:
    return us * US_S


def ms_to_s(ms: float) -> float:
    return ms * MS_S


def gib_to_bytes(gib: float) -> float:
    return gib * GIB_BYTES


def bytes_to_gib(num_bytes: float) -> float:
    return num_bytes / GIB_BYTES


def s_to_us(seconds: float) -> float:
    """Chrome trace `ts`/`dur` are microseconds: convert there and only there."""
    return seconds / US_S


NS_S = 1e-9  # one nanosecond in seconds


def s_to_ns(seconds: float) -> int:
    """Whole nanoseconds (traces round every span edge to the nanosecond, issue 17)."""
    return round(seconds / NS_S)


# Bytes per element of each training dtype (weights/activations as stored).
# MXFP8: 1 byte + one E8M0 scale per 32 elements (OCP Microscaling Formats spec v1.0);
# NVFP4: 4 bits + one E4M3 scale per 16 elements (NVIDIA, "Pretraining LLMs with NVFP4", arXiv 2509.25149).
# fp8_blockwise (a kernel dtype, not a precision.dtype: "fp8" GEMMs under [precision] fp8_recipe =
# "blockwise"): 1 byte + one fp32 scale per 1x128 tile of the activation / gradient operand
# (Transformer Engine Float8BlockScaling; the weight's 128x128 blocks carry 4 / 16384 bytes, counted
# as the 1x128 operand's: an upper bound of 0.03% of its bytes)
DTYPE_BYTES = {
    "fp32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "mxfp8": 1 + 1 / 32,
    "nvfp4": 0.5 + 1 / 16,
    "fp8_blockwise": 1 + 4 / 128,
}
