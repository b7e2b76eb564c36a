"""The `cpu` hardware profile from /proc text (given, so the test is the same anywhere)."""

import pytest

from levers.errors import InputError
from predictor.harvest.cpu import (
    DEFAULT_BANDWIDTH_GBPS,
    cpu_cluster,
    cpu_profile,
    is_cpu_cluster,
    parse_cpuinfo,
    read_cpu_facts,
)

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9654
cpu MHz\t\t: 2400.000
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16
processor\t: 1
model name\t: AMD EPYC 9654
"""
MEMINFO = "MemTotal:       16000000 kB\nMemFree: 1 kB\n"


def test_facts_from_proc_text():
    model, clock, flags = parse_cpuinfo(CPUINFO)
    assert model == "AMD EPYC 9654" and clock == pytest.approx(2.4) and "avx512f" in flags
    facts = read_cpu_facts(CPUINFO, MEMINFO, cores=4)
    assert facts.memory_gb == pytest.approx(16000000 * 1024 / 1e9)
    # 4 cores x 2.4 GHz x (2 FMA x 16 lanes x 2) x 2 (bf16) = 1.2288 TFLOP/s
    assert facts.peak_tflops() == pytest.approx(4 * 2.4 * 64 * 2 / 1e3)


def test_profile_defaults_and_given_numbers(monkeypatch):
    monkeypatch.delenv("INFERASIM_CPU_BANDWIDTH_GBPS", raising=False)
    facts = read_cpu_facts(CPUINFO, MEMINFO, cores=4)
    profile = cpu_profile(facts)
    assert profile.name == "cpu" and profile.vendor == "cpu" and profile.gpus_per_node == 1
    assert profile.hbm_bandwidth_gbps == DEFAULT_BANDWIDTH_GBPS
    assert profile.collective_us("allreduce", 1, 1e6) == 0.0            # width 1 communicates nothing
    assert cpu_profile(facts, bandwidth_gbps=60.0, peak_tflops=2.0).bf16_tflops == 2.0
    monkeypatch.setenv("INFERASIM_CPU_BANDWIDTH_GBPS", "35.5")
    assert cpu_profile(facts).hbm_bandwidth_gbps == 35.5
    monkeypatch.setenv("INFERASIM_CPU_BANDWIDTH_GBPS", "fast")
    with pytest.raises(InputError, match="INFERASIM_CPU_BANDWIDTH_GBPS"):
        cpu_profile(facts)


def test_cluster_text():
    assert is_cpu_cluster("cpu") and is_cpu_cluster("CPU") and not is_cpu_cluster("mi355x")
    cluster = cpu_cluster(cpu_profile(read_cpu_facts(CPUINFO, MEMINFO, cores=2)))
    assert cluster.total_gpus == 1 and cluster.spec == "cpu" and cluster.scale_up_gpus() == 1
