"""GPU memory capacity (issues 12/13): `fits` compares against what CUDA reports as the device's
memory (cudaDeviceProp totalGlobalMem, the caching allocator's ceiling), read from public device
dumps (openxla/xla xla/backends/gpu/target_config/specs/*.txtpb, device_memory_size), not the
datasheet's decimal gigabytes converted to GiB (which under-stated Blackwell by 6%)."""

from __future__ import annotations

import pytest

from simulator.loading import gpu_by_name
from simulator.units import GIB_BYTES

# device_memory_size of each dump, bytes
DEVICE_BYTES = {
    "a100-40gb": 42_331_013_120,
    "a100-80gb": 85_100_068_864,
    "h100-sxm": 84_942_979_072,
    "h200": 151_397_597_184,
    "b200": 191_514_411_008,
    "gb200": 197_897_748_480,
    "gb300": 297_021_079_552,
}


@pytest.mark.parametrize(("gpu", "device_bytes"), sorted(DEVICE_BYTES.items()))
def test_capacity_is_the_device_reported_memory(gpu: str, device_bytes: int) -> None:
    assert gpu_by_name(gpu).hbm_bytes == pytest.approx(device_bytes, abs=0.01 * GIB_BYTES)


def test_blackwell_capacity_exceeds_the_decimal_datasheet_conversion() -> None:
    """GB200's datasheet "186 GB" read as 10^9 bytes is 173.2 GiB; the device reports 184.3 GiB."""
    assert gpu_by_name("gb200").hbm_bytes > 186e9 + 10 * GIB_BYTES
