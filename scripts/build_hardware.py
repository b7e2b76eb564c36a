"""Build `predictor/data/hardware.json`: GPU profiles with fitted collectives.

    python scripts/build_hardware.py [--source-dir DIR] [--out FILE]

Inputs (public, `shared/data/hardware/`, see its README): `hardware.json` (specs with a
source per field), `aic_nccl_compact.json` (aiconfigurator-measured NCCL 2.29.2 points,
single node), `aic_custom_ar_compact.json` (engine custom all-reduce, CUDA graphs),
`comm_constants.json` (RCCL points), and METHOD §3.15 (MI355X measured constants, which
win over any secondary source).

Fitting rule (METHOD §3.7): `t_us = alpha_us + m / B` by least squares on *relative*
error (each row divided by its measured time, so a 10 us point counts as much as a
1 ms one), over the bandwidth-relevant range only:
- library collectives (NCCL all_reduce / all_gather / reduce_scatter / alltoall,
  RCCL all_reduce): messages 1 MiB .. 512 MiB. Below 1 MiB NCCL switches protocol and
  the small-message regime belongs to the custom all-reduce; above 512 MiB nothing in
  serving moves.
- custom all-reduce (vLLM 0.24.0 `custom_all_reduce`, 2 KiB .. 8 MiB): split by vLLM's
  kernel choice, one-shot (1-stage) at 2 GPUs, below 512 KiB at 4, below 256 KiB at 8;
  two-shot (2-stage) otherwise.
A negative alpha is clamped to 0 and B refitted. Each fit keeps its measured points.
GPUs without measured data take a sibling's fits (B300 <- B200, GB300 <- GB200,
GB200 8-GPU <- B200 8-GPU, MI325X <- MI300X) or a derivation stated in the source.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from predictor.hardware import GpuProfile  # noqa: E402
from predictor.step.comm import Collective, bus_factor  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
GIB_IN_GB = (1 << 30) / 1e9
LIBRARY_FIT_RANGE_BYTES = (1 * MIB, 512 * MIB)
AIC = "ai-dynamo/aiconfigurator@095f58a51c4c systems/data/{system}/comm"
METHOD_315 = "METHOD §3.15 (MI355X, measured)"
CUSTOM_AR_VERSION = "vllm-0.24.0"
NCCL_OPS = {Collective.ALLREDUCE: "all_reduce", Collective.ALLGATHER: "all_gather",
            Collective.REDUCE_SCATTER: "reduce_scatter", Collective.ALL_TO_ALL: "alltoall"}
MI355X_NIC_GBPS = 50.0

# name -> (hardware.json key, aiconfigurator system or None, measured sibling or None)
GPUS = {
    "H100": ("H100_SXM", "h100_sxm", None),
    "H200": ("H200_SXM", "h200_sxm", None),
    "B200": ("B200_SXM(HGX)", "b200_sxm", None),
    "GB200": ("GB200(NVL72)", "gb200", None),
    "B300": ("B300_SXM(HGX, Blackwell Ultra)", None, "B200"),
    "GB300": ("GB300(NVL72)", None, "GB200"),
    "MI300X": ("MI300X", None, None),
    "MI325X": ("MI325X", None, "MI300X"),
    "MI355X": ("MI355X", None, None),
}

# Runtime-visible HBM in 1e9 B: vendors quote binary capacities (80 GiB, 288 GiB).
HBM_GB = {
    "H100": (81559 * MIB / 1e9, "nvidia-smi 81559 MiB (hardware.json note; 80 GiB part)"),
    "H200": (151397597184 / 1e9, "aiconfigurator h200_sxm.yaml 151397597184 B (141 GiB)"),
    "B200": (193273528320 / 1e9, "aiconfigurator b200_sxm.yaml 193273528320 B (180 GiB)"),
    "GB200": (189471 * MIB / 1e9, "nvidia-smi 189471 MiB (hardware.json, gb200.yaml)"),
    "B300": (275040 * MIB / 1e9, "nvidia-smi 275040 MiB (hardware.json, b300_sxm.yaml)"),
    "GB300": (284208 * MIB / 1e9, "nvidia-smi 284208 MiB (hardware.json, gb300.yaml)"),
    "MI300X": (192 * GIB_IN_GB, "192 GiB HBM3 (ROCm gpu-specs; binary capacity)"),
    "MI325X": (256 * GIB_IN_GB, "256 GiB HBM3E (ROCm gpu-specs table VRAM 256 GiB)"),
    "MI355X": (288 * GIB_IN_GB, "288 GiB HBM3E (ROCm gpu-specs table VRAM 288 GiB)"),
}
C2C = ("NVLink-C2C 900 GB/s bidirectional per Grace shared by its 2 GPUs -> 225 GB/s "
       "per GPU per direction (ASSUMPTION; aiconfigurator uses PCIe 64)")
GEN5 = "PCIe Gen5 x16 host (DGX B200/B300 hosts are Gen5 Xeons; aiconfigurator assumes Gen6 128)"
HOST_LINK_OVERRIDES = {"B200": (64.0, GEN5), "B300": (64.0, GEN5),
                       "GB200": (225.0, C2C), "GB300": (225.0, C2C)}
DGX_DRAM = "2 TB host DRAM per 8-GPU node (DGX H100/H200/B200/B300 datasheets) / 8"
GRACE_DRAM = "480 GB LPDDR5X per Grace (GB200/GB300 NVL72 datasheet) / 2 GPUs"
AMD_DRAM = "ASSUMPTION: 2 TB host DRAM per 8-GPU OAM node (typical) / 8"
HOST_DRAM_GB = {"GB200": (240.0, GRACE_DRAM), "GB300": (240.0, GRACE_DRAM)}
NVIDIA_LAUNCH = ("aiconfigurator's 3 us constant per-op latency on NVIDIA parts "
                 "(hardware.json _conventions); bounded by the smallest measured graph "
                 "kernel, TRT-LLM custom all-reduce 2 KiB at 2 GPUs: 2.77 us (H100)")

# METHOD §3.15, MI355X: (alpha_us, B_GBps) per group; all-to-all alpha 35-38 us is
# spread over the groups in order (midpoint at 4).
MI355X_ONE_SHOT = {2: (4.9, 60.0), 4: (5.5, 63.0), 8: (6.4, 56.0)}
MI355X_TWO_SHOT = {4: (6.4, 100.0), 8: (11.0, 123.0)}
MI355X_ALL_TO_ALL = {2: (35.0, 113.0), 4: (36.5, 206.0), 8: (38.0, 409.0)}
MI355X_INTER = {Collective.P2P_INTER: {2: (44.0, 45.0)},
                Collective.ALLREDUCE_INTER: {2: (58.7, 19.8), 16: (90.5, 31.6)},
                Collective.ALL_TO_ALL_INTER: {16: (47.4, 37.9)}}
MI355X_B_NODE_GBPS = 600.0  # METHOD §3.15
MI300X_B_NODE_GBPS = 448.0  # 7 xGMI links x 64 GB/s (hardware.json)
MI325X_SAME_PLATFORM = ("same CDNA3 xGMI platform; 8-GPU 16 GiB all_reduce busbw 319 GB/s on "
                        "MI325X vs 316 on MI300X, comm_constants.json")


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(alpha_us, B_GBps) minimising relative error of `alpha + m / B` on points."""
    m = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    rows = np.stack([np.ones_like(m), m], axis=1) / t[:, None]
    (alpha, inv_b), *_ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, inv_b = 0.0, float(np.sum(m / t) / np.sum((m / t) ** 2))
    return float(alpha), float(1e-3 / inv_b)  # bytes/us -> GB/s


def fit(points: list, source: str) -> dict:
    alpha, bandwidth = fit_line(points)
    worst = max(abs(alpha + m / (bandwidth * 1e3) - t) / t for m, t in points)
    return {"alpha_us": round(alpha, 3), "bandwidth_gbps": round(bandwidth, 2),
            "source": f"{source}; max error {worst:.0%} on {len(points)} points",
            "fit_points": [[int(m), float(t)] for m, t in points]}


def line(alpha_us: float, bandwidth_gbps: float, source: str) -> dict:
    return {"alpha_us": round(alpha_us, 3), "bandwidth_gbps": round(bandwidth_gbps, 2),
            "source": source}


def in_range(points: list) -> list:
    low, high = LIBRARY_FIT_RANGE_BYTES
    return [(m, t) for m, t, *_ in points if low <= m <= high]


def nccl_fits(system: str, nccl: dict) -> dict:
    """Library collectives of one aiconfigurator system, fitted on 1 MiB..512 MiB."""
    out: dict = {}
    where = f"{AIC.format(system=system)}/nccl, NCCL {nccl[system]['nccl_version']}"
    for name, op in NCCL_OPS.items():
        for key, body in nccl[system]["ops"].items():
            if key.startswith(op + "_n"):
                group = int(key.rsplit("_n", 1)[1])
                points = in_range(body["points_[bytes,us,busbw_GBps]"])
                source = f"fit to {op} n={group}, 1 MiB..512 MiB ({where})"
                out.setdefault(name, {})[group] = fit(points, source)
    return out


def custom_allreduce_fits(system: str, custom_ar: dict) -> dict:
    """vLLM custom all-reduce split into its one-shot and two-shot kernels."""
    out: dict = {}
    for key, by_bytes in custom_ar[system][CUSTOM_AR_VERSION].items():
        group = int(key.rsplit("_n", 1)[1])
        points = sorted((int(m), t) for m, t in by_bytes.items())
        one_shot_below = {2: float("inf"), 4: 512 * KIB}.get(group, 256 * KIB)
        where = f"{CUSTOM_AR_VERSION} custom all-reduce n={group} ({AIC.format(system=system)}/vllm)"
        parts = {Collective.ALLREDUCE_ONE_SHOT: [p for p in points if p[0] < one_shot_below],
                 Collective.ALLREDUCE_TWO_SHOT: [p for p in points if p[0] >= one_shot_below]}
        for name, part in parts.items():
            if part:
                kind = name.value.rsplit("_", 2)[-2]
                out.setdefault(name, {})[group] = fit(part, f"fit to {kind}-shot points of {where}")
    return out


def measured_fits(system: str, nccl: dict, custom_ar: dict) -> dict:
    return {**nccl_fits(system, nccl), **custom_allreduce_fits(system, custom_ar)}


def p2p_from_pairwise(pairwise: dict, what: str) -> dict:
    """In-node send/recv from a 2-GPU all-to-all: each rank sends half its buffer."""
    return {2: line(pairwise["alpha_us"], pairwise["bandwidth_gbps"] / 2,
                    f"derived from {what} 2-GPU all-to-all (each rank sends m/2 to its "
                    f"peer, so B_p2p = B/2): {pairwise['source']}")}


def borrow(fits: dict, sibling: str, why: str) -> dict:
    return {**fits, "source": f"{sibling} fit ({why}): {fits['source']}"}


def nvidia_collectives(name: str, nccl: dict, custom_ar: dict, nic_gbps: float) -> dict:
    """Measured fits, a sibling's when unmeasured; NVL72 8-GPU groups from HGX B200."""
    _, system, sibling = GPUS[name]
    own = measured_fits(system or GPUS[sibling][1], nccl, custom_ar)
    if sibling:
        why = f"{name} has no measured collectives; same NVLink5 switched fabric"
        own = {c: {g: borrow(f, sibling, why) for g, f in fits.items()} for c, fits in own.items()}
    if name.startswith("GB"):
        b200 = measured_fits("b200_sxm", nccl, custom_ar)
        why = "same NVLink5/NVSwitch; NVL72 data covers 2 and 4 GPUs"
        for collective, fits in own.items():
            if 8 not in fits and 8 in b200.get(collective, {}):
                fits[8] = borrow(b200[collective][8], "B200", why)
    own[Collective.P2P] = p2p_from_pairwise(own[Collective.ALL_TO_ALL][2], "NCCL")
    return {**own, **inter_node(nic_gbps, is_mi355x_nic=False)}


def inter_node(nic_gbps: float, is_mi355x_nic: bool) -> dict:
    """Across-node tiers (METHOD §3.7): MI355X measured (§3.15); other NICs scale its
    bandwidth by NIC rate, and send/recv is the NIC at 0.8 efficiency."""
    scale = nic_gbps / MI355X_NIC_GBPS
    out: dict = {}
    for collective, by_group in MI355X_INTER.items():
        for group, (alpha, bandwidth) in by_group.items():
            source = f"{METHOD_315} {collective} {group} GPUs: {alpha} us, {bandwidth} GB/s"
            if is_mi355x_nic:
                fitted = line(alpha, bandwidth, source + " (same 400G NIC per GPU)")
            elif collective == Collective.P2P_INTER:
                fitted = line(alpha, nic_gbps * 0.8, f"NIC {nic_gbps:g} GB/s at 0.8 efficiency "
                              f"(METHOD §3.7); alpha ASSUMED from {source}")
            else:
                fitted = line(alpha, bandwidth * scale, f"ASSUMED from {source}, B scaled by "
                              f"NIC {nic_gbps:g}/{MI355X_NIC_GBPS:g} GB/s")
            out.setdefault(collective, {})[group] = fitted
    return out


def mesh_collectives(b_node_gbps: float, eta: float, alpha_us: float, why: str,
                     n: int = 8) -> dict:
    """Library collectives on a full xGMI mesh, METHOD §3.7 B(g) = B_node eta (g-1)/(N-1)."""
    out: dict = {}
    for collective in (Collective.ALLREDUCE, Collective.ALLGATHER, Collective.REDUCE_SCATTER):
        for group in (2, 4, 8):
            busbw = b_node_gbps * eta * (group - 1) / (n - 1)
            out.setdefault(collective, {})[group] = line(
                alpha_us, busbw / bus_factor(collective, group),
                f"mesh rule (METHOD §3.7) B_node {b_node_gbps:g} GB/s, eta {eta:.3f}, "
                f"g={group}, N={n}; {why}")
    return out


def mi355x_lines(b_node_gbps: float) -> dict:
    """METHOD §3.15 custom all-reduce and all-to-all, B scaled to another xGMI B_node."""
    scale = b_node_gbps / MI355X_B_NODE_GBPS
    out: dict = {}
    for collective, table in ((Collective.ALLREDUCE_ONE_SHOT, MI355X_ONE_SHOT),
                              (Collective.ALLREDUCE_TWO_SHOT, MI355X_TWO_SHOT),
                              (Collective.ALL_TO_ALL, MI355X_ALL_TO_ALL)):
        for group, (alpha, bandwidth) in table.items():
            source = f"{METHOD_315} {collective} {group} GPUs: {alpha} us, {bandwidth} GB/s"
            if scale != 1:
                source += f"; B scaled by xGMI B_node {b_node_gbps:g}/{MI355X_B_NODE_GBPS:g}"
            out.setdefault(collective, {})[group] = line(alpha, bandwidth * scale, source)
    return out


def amd_collectives(name: str, comm: dict) -> tuple[dict, float]:
    """MI355X from METHOD §3.15; MI300X/MI325X from RCCL points and scaled MI355X lines.

    Returns the collectives and the mesh eta of the library collectives."""
    rccl = comm["amd_rccl_tests_raw"]
    points = rccl["MI300X_8gpu_1node (AAC8, RCCL develop a7809b3)"]["out_of_place_[bytes,us,busbw]"]
    mi300x_ar = fit(in_range(points),
                    f"fit to RCCL all_reduce 8 MI300X, 1 MiB..512 MiB ({rccl['source']})")
    eta = mi300x_ar["bandwidth_gbps"] * bus_factor(Collective.ALLREDUCE, 8) / MI300X_B_NODE_GBPS
    b_node = MI355X_B_NODE_GBPS if name == "MI355X" else MI300X_B_NODE_GBPS
    why = (f"eta and alpha from the MI300X RCCL all_reduce fit ({mi300x_ar['source']}); "
           "all-gather/reduce-scatter ASSUME the all-reduce eta and alpha")
    out = {**mesh_collectives(b_node, eta, mi300x_ar["alpha_us"], why), **mi355x_lines(b_node)}
    if name == "MI300X":
        out[Collective.ALLREDUCE][8] = mi300x_ar
    elif name == "MI325X":
        out[Collective.ALLREDUCE][8] = borrow(mi300x_ar, "MI300X", MI325X_SAME_PLATFORM)
    out[Collective.P2P] = p2p_from_pairwise(out[Collective.ALL_TO_ALL][2], "METHOD §3.15")
    return {**out, **inter_node(MI355X_NIC_GBPS, is_mi355x_nic=True)}, eta


def switch_bytes(vendor: str, collectives: dict) -> tuple[int, str]:
    """Custom all-reduce one-shot/two-shot switch (METHOD §3.7)."""
    if vendor == "nvidia":
        return 256 * KIB, "vLLM custom_all_reduce: 1-stage below 256 KiB at 8 GPUs, 2-stage above"
    one = collectives[Collective.ALLREDUCE_ONE_SHOT][8]
    two = collectives[Collective.ALLREDUCE_TWO_SHOT][8]
    crossing_bytes = (two["alpha_us"] - one["alpha_us"]) * 1e3 / (
        1 / one["bandwidth_gbps"] - 1 / two["bandwidth_gbps"])
    return round(crossing_bytes / KIB) * KIB, "crossover of the 8-GPU one-shot and two-shot lines"


def etas(collectives: dict, link_gbps: float, n: int, mesh_eta: float | None) -> dict:
    """eta = fitted bus bandwidth at the full node / link bandwidth (METHOD §3.7)."""
    out = {}
    for collective in NCCL_OPS:
        if mesh_eta is not None and collective != Collective.ALL_TO_ALL:
            out[collective.value] = round(mesh_eta, 4)
            continue
        fits = collectives[collective]
        group = n if n in fits else max(fits)
        busbw = fits[group]["bandwidth_gbps"] * bus_factor(collective, group)
        out[collective.value] = round(busbw / link_gbps, 4)
    return out


def spec_fields(name: str, spec: dict) -> tuple[dict, dict]:
    """Scalar fields and their sources from hardware.json, with the stated overrides."""
    def take(key: str) -> tuple[float | None, str]:
        entry = spec[key]
        note = f" ({entry['note']})" if entry.get("note") else ""
        return entry["value"], f"hardware.json {key}: {entry['source']}{note}"

    is_nvidia = not name.startswith("MI")
    domain = (72, "NVL72: 72 GPUs on one NVLink switch domain (PRODUCT §2)") if name.startswith(
        "GB") else (8, "one node: NVLink/xGMI stops at the node (PRODUCT §2)")
    values = {
        "hbm_gb": HBM_GB[name], "hbm_bandwidth_gbps": take("hbm_bandwidth_GBps"),
        "bf16_tflops": take("bf16_dense_tflops"), "fp8_tflops": take("fp8_dense_tflops"),
        "fp4_tflops": take("fp4_dense_tflops"), "gpus_per_node": take("gpus_per_node"),
        "scale_up_domain": domain,
        "fabric": ("switched", "NVLink through NVSwitch: every pair at full link rate")
        if is_nvidia else ("mesh", "xGMI full mesh: 7 links per GPU, one per peer"),
        "intra_node_bw_gbps": take("intra_node_bw_per_gpu_per_direction_GBps"),
        "nic_bw_gbps": take("nic_bw_per_gpu_per_direction_GBps"),
        "host_link_gbps": HOST_LINK_OVERRIDES.get(name) or take("host_to_device_GBps"),
        "host_dram_per_gpu_gb": HOST_DRAM_GB.get(name)
        or (256.0, DGX_DRAM if is_nvidia else AMD_DRAM),
        "kernel_launch_us": (3.0, NVIDIA_LAUNCH) if is_nvidia else (4.98, f"{METHOD_315}, §3.7"),
        "pp_hop_overhead_us": (970.0, "METHOD §3.6 (fitted at one client on MI355X; engine "
                               "overhead, applied to every GPU: ASSUMPTION off MI355X)"),
        "gemm_tile_rows": (64.0, "ASSUMPTION: tensor-core GEMM tiles of 64 rows (predictor/step/operators.py "
                           "efficiency by shape, M / (M + 64)); anchors calibrate the compute factor"),
    }
    if name == "MI355X":
        values["intra_node_bw_gbps"] = (MI355X_B_NODE_GBPS, f"{METHOD_315}: B_node = 600 GB/s")
    return {k: v for k, (v, _) in values.items()}, {k: s for k, (_, s) in values.items()}


def build_profile(name: str, hardware: dict, nccl: dict, custom_ar: dict, comm: dict) -> dict:
    fields, sources = spec_fields(name, hardware[GPUS[name][0]])
    vendor = "amd" if name.startswith("MI") else "nvidia"
    if vendor == "amd":
        collectives, mesh_eta = amd_collectives(name, comm)
    else:
        collectives = nvidia_collectives(name, nccl, custom_ar, fields["nic_bw_gbps"])
        mesh_eta = None
    switch, sources["custom_allreduce_switch_bytes"] = switch_bytes(vendor, collectives)
    fields["custom_allreduce_switch_bytes"] = switch
    fields["large_collective_eta"] = etas(collectives, fields["intra_node_bw_gbps"],
                                          fields["gpus_per_node"], mesh_eta)
    sources["large_collective_eta"] = (
        "bus bandwidth of the fitted full-node collective / link bandwidth (METHOD §3.7)"
        + ("; mesh library collectives: MI300X RCCL all_reduce" if mesh_eta else ""))
    profile = {"name": name, "vendor": vendor, **fields, "sources": sources,
               "collectives": {str(c): {str(g): f for g, f in sorted(fits.items())}
                               for c, fits in collectives.items()}}
    return GpuProfile.model_validate(profile).model_dump(mode="json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=Path,
                        default=REPO.parent / "shared" / "data" / "hardware")
    parser.add_argument("--out", type=Path, default=REPO / "predictor" / "data" / "hardware.json")
    args = parser.parse_args()

    def read(file: str) -> dict:
        return json.loads((args.source_dir / file).read_text())

    hardware, comm = read("hardware.json"), read("comm_constants.json")
    nccl, custom_ar = read("aic_nccl_compact.json"), read("aic_custom_ar_compact.json")
    gpus = {name: build_profile(name, hardware, nccl, custom_ar, comm) for name in GPUS}
    about = {"built_by": "scripts/build_hardware.py",
             "inputs": "shared/data/hardware/*.json (public; licences in its README) and "
                       "METHOD §3.15",
             "units": "GB = 1e9 B; GB/s = 1e9 B/s per GPU per direction; us; TFLOP/s dense",
             "collective_form": "t_us = alpha_us + message_bytes / (bandwidth_gbps * 1e3)"}
    args.out.write_text(json.dumps({"_about": about, "gpus": gpus}, indent=1) + "\n")
    print(f"wrote {len(gpus)} GPU profiles to {args.out}")


if __name__ == "__main__":
    main()
