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


# HBM peak bandwidth of each Blackwell SKU from the same dumps: memoryClockRate (kHz) x 2 (DDR) x
# memoryBusWidth (bits) / 8, i.e. the dump's memory_bandwidth field (b200/gb200.txtpb@300ec95ab85f,
# gb300.txtpb@4336d12e0706; B300 SXM6 AC: cudaGetDeviceProperties 3,996,000 kHz and 7,680 bits).
MEM_CLOCK_HZ = 3_996_000_000
BUS_BITS = {"b200": 7680, "b300": 7680, "gb200": 7936, "gb300": 7936}


@pytest.mark.parametrize(("gpu", "bus_bits"), sorted(BUS_BITS.items()))
def test_blackwell_hbm_bandwidth_is_the_device_peak(gpu: str, bus_bits: int) -> None:
    peak = MEM_CLOCK_HZ * 2 * bus_bits / 8
    assert gpu_by_name(gpu).hbm_bandwidth_bytes_per_s == pytest.approx(peak, rel=1e-3)


def test_hgx_parts_have_less_hbm_bandwidth_than_nvl72_parts() -> None:
    """The HGX B200/B300 run 15 of Blackwell's 16 x 512-bit HBM3e controllers, the NVL72 parts 31/32
    of the width: 3.2% less bandwidth on the DGX node, below the datasheets' rounded 8 TB/s."""
    for hgx, nvl in (("b200", "gb200"), ("b300", "gb300")):
        ratio = gpu_by_name(hgx).hbm_bandwidth_bytes_per_s / gpu_by_name(nvl).hbm_bandwidth_bytes_per_s
        assert ratio == pytest.approx(7680 / 7936, rel=1e-3)
        assert gpu_by_name(nvl).hbm_bandwidth_bytes_per_s < 8.0e12
