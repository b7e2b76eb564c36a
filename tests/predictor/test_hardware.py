"""GPU profiles, fitted collectives and the `--cluster` grammar (PRODUCT §2, METHOD §3.7,
§3.15). Everything here reads the embedded package data only."""

from __future__ import annotations

import math
import statistics

import pytest
from pydantic import ValidationError

from levers.errors import InputError
from predictor.hardware import DEFAULT_CLUSTER, GpuProfile, list_gpus, load_gpu, parse_cluster
from predictor.step.comm import Collective, CollectiveFit, bus_factor

ALL_GPUS = ["H100", "H200", "B200", "GB200", "B300", "GB300", "MI300X", "MI325X", "MI355X"]
# Stated fit tolerance on the fitted range (see scripts/build_hardware.py): NCCL switches
# protocol inside 1 MiB..512 MiB, so one line per curve cannot be exact.
MAX_POINT_REL_ERROR = 0.60  # worst point: B200 all_gather n=8 16 MiB, an outlier in the data
MAX_FIT_RMS_REL_ERROR = 0.30
MAX_MEDIAN_REL_ERROR = 0.10
CONSTANT_REL = 1e-9


@pytest.mark.parametrize("text, gpu, per_node, nodes, spec", [
    ("mi355x", "MI355X", 8, 1, "mi355x"),
    ("MI355X", "MI355X", 8, 1, "mi355x"),
    ("h100x1", "H100", 1, 1, "h100x1"),
    ("h200x8", "H200", 8, 1, "h200"),
    ("b200x8x2", "B200", 8, 2, "b200x8x2"),
    ("gb300x4x4", "GB300", 4, 4, "gb300x4x4"),
    ("gb200", "GB200", 4, 1, "gb200"),
    ("mi355xx8x2", "MI355X", 8, 2, "mi355x8x2"),
    ("mi355x8x2", "MI355X", 8, 2, "mi355x8x2"),
    (" H100X2 ", "H100", 2, 1, "h100x2"),
])
def test_cluster_grammar(text, gpu, per_node, nodes, spec):
    cluster = parse_cluster(text)
    assert (cluster.gpu.name, cluster.gpus_per_node, cluster.num_nodes) == (gpu, per_node, nodes)
    assert cluster.total_gpus == per_node * nodes
    assert cluster.spec == spec
    assert parse_cluster(cluster.spec) == cluster


@pytest.mark.parametrize("text", ["mi355x0", "foo", "h100x9", "h100x8x0", "h100xx8", "",
                                  "h100x", "h100x8x", "a100x8", "gb200x8"])
def test_bad_cluster_is_an_input_error(text):
    with pytest.raises(InputError) as caught:
        parse_cluster(text)
    assert caught.value.what == "--cluster"
    assert "GPU[xPER_NODE[xNODES]]" in caught.value.accepted
    assert "mi355x" in caught.value.accepted


@pytest.mark.parametrize("text, problem", [
    ("mi355x8x99999999999", "NODES 99999999999 (11 digits) is not in 1..1,024"),
    ("mi355x8x" + "9" * 10_000, "NODES 999999999999... (10000 digits) is not in 1..1,024"),
    ("h100x" + "1" * 20, "PER_NODE 111111111111... (20 digits) is not in 1..8 for H100"),
    ("b200x8x2000", "NODES 2,000 is not in 1..1,024"),
    ("h100x00000000009", "PER_NODE 9 is not in 1..8 for H100"),
])
def test_a_count_out_of_range_says_which_and_the_range_however_long(text, problem):
    with pytest.raises(InputError) as caught:
        parse_cluster(text)
    assert caught.value.problem == problem


def test_leading_zeros_are_the_count_they_write():
    assert parse_cluster("h100x00000000001x002").total_gpus == 2


def test_default_cluster_is_one_node_of_eight_mi355x():
    cluster = parse_cluster(DEFAULT_CLUSTER)
    assert (cluster.gpu.name, cluster.total_gpus, cluster.num_nodes) == ("MI355X", 8, 1)


def test_load_gpu_is_case_insensitive_and_names_the_accepted_gpus():
    assert [gpu.name for gpu in list_gpus()] == ALL_GPUS
    for name in ALL_GPUS:
        assert load_gpu(name.lower()) is load_gpu(name)
    with pytest.raises(InputError) as caught:
        load_gpu("x")
    assert caught.value.what == "--cluster" and "unknown GPU 'x'" in caught.value.problem
    assert "mi355x" in caught.value.accepted and "gb300" in caught.value.accepted


@pytest.mark.parametrize("name, domain, per_node, fabric", [
    ("H100", 8, 8, "switched"), ("H200", 8, 8, "switched"), ("B200", 8, 8, "switched"),
    ("B300", 8, 8, "switched"), ("GB200", 72, 4, "switched"), ("GB300", 72, 4, "switched"),
    ("MI300X", 8, 8, "mesh"), ("MI325X", 8, 8, "mesh"), ("MI355X", 8, 8, "mesh"),
])
def test_scale_up_domain_and_fabric(name, domain, per_node, fabric):
    gpu = load_gpu(name)
    assert (gpu.scale_up_domain, gpu.gpus_per_node, gpu.fabric) == (domain, per_node, fabric)
    assert gpu.vendor == ("amd" if name.startswith("MI") else "nvidia")


@pytest.mark.parametrize("text, scale_up_gpus", [
    ("mi355x", 8), ("b200x8x2", 8), ("h100x1x2", 1), ("h100x4", 4),
    ("gb300x4x4", 16), ("gb200x4x18", 72), ("gb200x4x20", 72), ("gb200x2x3", 6),
])
def test_scale_up_gpus_spans_nodes_only_inside_nvl72(text, scale_up_gpus):
    assert parse_cluster(text).scale_up_gpus() == scale_up_gpus


def _fits_with_points():
    for gpu in list_gpus():
        for name, fits in gpu.collectives.items():
            for group, fit in fits.items():
                if fit.fit_points:
                    yield gpu.name, name, group, fit


def test_fits_reproduce_their_measured_points_on_the_fitted_range():
    all_errors = []
    for gpu, name, group, fit in _fits_with_points():
        errors = fit.relative_errors()
        rms = math.sqrt(sum(e * e for e in errors) / len(errors))
        assert max(errors) <= MAX_POINT_REL_ERROR, (gpu, name, group, max(errors))
        assert rms <= MAX_FIT_RMS_REL_ERROR, (gpu, name, group, rms)
        all_errors += errors
    assert len(all_errors) > 400
    assert statistics.median(all_errors) <= MAX_MEDIAN_REL_ERROR


@pytest.mark.parametrize("gpu, name, group, message_bytes, measured_us, rel", [
    # aiconfigurator NCCL 2.29.2 (aic_nccl_compact.json)
    ("H100", "allreduce", 8, 67108864, 324.53, 0.25),
    ("B200", "all_to_all", 8, 67108864, 138.85, 0.15),
    ("H200", "allgather", 4, 268435456, 660.74, 0.25),
    # vLLM 0.24.0 custom all-reduce, CUDA graphs (aic_custom_ar_compact.json)
    ("H100", "allreduce_one_shot", 2, 524288, 6.32, 0.10),
    ("B200", "allreduce_two_shot", 8, 8388608, 39.24, 0.05),
    # RCCL all_reduce, 8 MI300X (comm_constants.json amd_rccl_tests_raw)
    ("MI300X", "allreduce", 8, 268435456, 1540.4, 0.20),
])
def test_fits_match_points_copied_from_the_public_data(gpu, name, group, message_bytes,
                                                       measured_us, rel):
    predicted = load_gpu(gpu).collective_us(name, group, message_bytes)
    assert predicted == pytest.approx(measured_us, rel=rel)


@pytest.mark.parametrize("name, group, alpha_us, bandwidth_gbps", [
    ("allreduce_one_shot", 2, 4.9, 60.0),
    ("allreduce_one_shot", 4, 5.5, 63.0),
    ("allreduce_two_shot", 4, 6.4, 100.0),
    ("allreduce_one_shot", 8, 6.4, 56.0),
    ("allreduce_two_shot", 8, 11.0, 123.0),
    ("all_to_all", 2, 35.0, 113.0),
    ("all_to_all", 4, 36.5, 206.0),
    ("all_to_all", 8, 38.0, 409.0),
    ("p2p_inter", 2, 44.0, 45.0),
    ("allreduce_inter", 2, 58.7, 19.8),
    ("allreduce_inter", 16, 90.5, 31.6),
    ("all_to_all_inter", 16, 47.4, 37.9),
])
def test_mi355x_measured_constants_of_method_3_15(name, group, alpha_us, bandwidth_gbps):
    fit = load_gpu("MI355X").collectives[name][group]
    assert fit.alpha_us == pytest.approx(alpha_us, rel=CONSTANT_REL)
    assert fit.bandwidth_gbps == pytest.approx(bandwidth_gbps, rel=CONSTANT_REL)
    assert "METHOD §3.15" in fit.source


def test_mi355x_platform_constants():
    gpu = load_gpu("mi355x")
    assert gpu.kernel_launch_us == 4.98
    assert gpu.pp_hop_overhead_us == 970.0
    assert gpu.intra_node_bw_gbps == 600.0  # B_node, METHOD §3.15
    assert gpu.nic_bw_gbps == 50.0
    one_shot = gpu.collectives["allreduce_one_shot"][8]
    two_shot = gpu.collectives["allreduce_two_shot"][8]
    switch = gpu.custom_allreduce_switch_bytes
    assert one_shot.time_us(switch) == pytest.approx(two_shot.time_us(switch), abs=0.05)


def test_every_gpu_prices_every_collective():
    for gpu in list_gpus():
        assert set(gpu.collectives) == {c.value for c in Collective}, gpu.name
        assert 2 in gpu.collectives["p2p"] and 2 in gpu.collectives["p2p_inter"]
        for name in ("allreduce_one_shot", "allreduce", "all_to_all", "allgather"):
            assert {2, 4, 8} <= set(gpu.collectives[name]), (gpu.name, name)


def test_collective_us_rules():
    gpu = load_gpu("H100")
    fits = gpu.collectives["allreduce"]
    message_bytes = 16 << 20
    assert gpu.collective_us("allreduce", 1, message_bytes) == 0.0
    assert gpu.collective_us("allreduce", 3, message_bytes) == fits[4].time_us(message_bytes)
    assert gpu.collective_us("allreduce", 16, message_bytes) == fits[8].time_us(message_bytes)
    without_alpha = gpu.collective_us("allreduce", 8, message_bytes, include_alpha=False)
    assert without_alpha == pytest.approx(fits[8].time_us(message_bytes) - fits[8].alpha_us)
    assert gpu.collective_us(Collective.ALL_TO_ALL, 8, 0) == gpu.collectives["all_to_all"][8].alpha_us
    with pytest.raises(ValueError):
        gpu.collective_us("broadcast", 8, message_bytes)


def test_time_us_units():
    fit = CollectiveFit(alpha_us=5.0, bandwidth_gbps=100.0, source="test")
    assert fit.time_us(1e9) == pytest.approx(5.0 + 1e4)  # 1 GB at 100 GB/s = 10 ms
    assert fit.time_us(1e9, include_alpha=False) == pytest.approx(1e4)
    with pytest.raises(ValidationError):
        CollectiveFit(alpha_us=1.0, bandwidth_gbps=0.0, source="test")
    with pytest.raises(ValidationError):
        fit.alpha_us = 2.0


def test_mesh_bandwidth_grows_with_group_switched_does_not():
    mi355x = load_gpu("MI355X")
    eta = mi355x.large_collective_eta["allreduce"]
    for group in (2, 4, 8):
        assert mi355x.large_collective_bw_gbps(group) == pytest.approx(600.0 * eta * (group - 1) / 7)
    assert mi355x.large_collective_bw_gbps(16) == mi355x.large_collective_bw_gbps(8)
    h100 = load_gpu("H100")
    eta = h100.large_collective_eta["all_to_all"]
    for group in (2, 4, 8, 72):
        assert h100.large_collective_bw_gbps(group, "all_to_all") == pytest.approx(450.0 * eta)
    assert h100.large_collective_bw_gbps(1) == math.inf
    algbw = mi355x.large_collective_algbw_gbps(8)
    assert algbw == pytest.approx(mi355x.large_collective_bw_gbps(8) / bus_factor("allreduce", 8))


def test_large_collective_eta_is_an_efficiency():
    for gpu in list_gpus():
        assert set(gpu.large_collective_eta) == {"allreduce", "allgather", "reduce_scatter",
                                                 "all_to_all"}
        assert all(0.3 < eta <= 1.0 for eta in gpu.large_collective_eta.values()), gpu.name


def test_fp4_bits_per_value_by_vendor():
    for gpu in list_gpus():
        assert gpu.fp4_bits_per_value == (4.5 if gpu.vendor == "nvidia" else 4.25)


def test_peak_flops_and_fp4_fallback():
    mi355x = load_gpu("MI355X")
    assert mi355x.peak_flops("bf16") == pytest.approx(2516.6e12)
    assert mi355x.peak_flops("fp4") == pytest.approx(10066.3e12)
    assert mi355x.peak_flops("mxfp4") == mi355x.peak_flops("fp4")
    for name in ("H100", "H200", "MI300X", "MI325X"):
        gpu = load_gpu(name)
        assert gpu.fp4_tflops is None
        assert gpu.peak_flops("fp4") == gpu.peak_flops("fp8") == gpu.fp8_tflops * 1e12
    with pytest.raises(ValueError):
        mi355x.peak_flops("int3")


def test_hbm_is_the_binary_capacity_in_decimal_gb():
    assert load_gpu("MI355X").hbm_gb == pytest.approx(288 * 2**30 / 1e9)
    assert load_gpu("H100").hbm_gb == pytest.approx(81559 * 2**20 / 1e9)
    assert all(gpu.hbm_gb > 80 for gpu in list_gpus())


def test_every_field_has_a_source():
    unsourced = {"name", "vendor", "collectives", "sources"}
    for gpu in list_gpus():
        for field in set(GpuProfile.model_fields) - unsourced:
            assert gpu.sources.get(field, "").strip(), (gpu.name, field)
        for fits in gpu.collectives.values():
            assert all(fit.source.strip() for fit in fits.values())


def test_unmeasured_gpus_say_where_their_collectives_come_from():
    assert "B200 fit" in load_gpu("B300").collectives["allreduce"][8].source
    assert "GB200 fit" in load_gpu("GB300").collectives["all_to_all"][4].source
    assert "B200 fit" in load_gpu("GB200").collectives["allgather"][8].source
    assert "scaled" in load_gpu("MI300X").collectives["all_to_all"][8].source
    assert "ASSUMED" in load_gpu("H100").collectives["allreduce_inter"][16].source


def test_profiles_are_frozen():
    gpu = load_gpu("H100")
    with pytest.raises(ValidationError):
        gpu.hbm_gb = 1.0
    with pytest.raises(ValidationError):
        GpuProfile.model_validate({**gpu.model_dump(), "unexpected": 1})
