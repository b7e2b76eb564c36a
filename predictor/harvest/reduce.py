"""Reduce a deployment to the anchor layouts a harvest can measure (METHOD §2, §3.14).

An anchor is one kernel set at one width: one replica, no pipeline, on one node. A
deployment that is more than that is *reduced* to runs with the same kernels, and what
was taken away is restored analytically:

- a disaggregated deployment: one anchor per pool layout (the pools and the hand-off
  are restored by §3.11);
- replicas: one replica is measured (load across replicas: the DES);
- PP stages: dropped first (restored by Eq. 4, §3.6);
- a stage wider than one node: TP halved (with attention DP while it is above 1, so the
  attention kernels keep their width) until it fits, and EP narrowed to at most the new
  TP (restored by Eq. 1 and by the imbalance law of §3.5; a narrower anchor covers a
  wider target when its sweep is full, METHOD §4).

Only anchor-defining levers and the widths survive into the harvest text: scheduler,
load and transferable levers (spec depth among them, Eq. 2; the captured-size cap,
§3.3) do not make a new harvest, and the engine's full default ladder is swept.
`harvest_config_text` writes a reduced configuration the way `inferasim harvest
--config` reads it; the agent's harvest hints and the harvester's own refusals use the
same text, so a printed command is the one that would run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from levers.catalog import LEVERS, LeverKind
from levers.configuration import Configuration, format_value
from predictor.harvest.launch import DRAFT_CHECKPOINT, DRAFT_METHODS

WIDTH_LEVERS = ("tp", "pp", "ep", "attention_dp")
ANCHOR_LEVERS = tuple(lever.name for lever in LEVERS if lever.kind == LeverKind.ANCHOR_DEFINING)
DEFAULTS = Configuration()


@dataclass(frozen=True, slots=True)
class Reduction:
    """One anchor layout of a deployment: the configuration to harvest, which pool it
    measures (None: a colocated deployment), and each step that reduced it."""

    config: Configuration
    pool: str | None = None
    steps: tuple[str, ...] = ()

    @property
    def is_reduced(self) -> bool:
        """Not the layout that was asked for: a pool of it, or a narrower run."""
        return bool(self.steps) or self.pool is not None


def _pools(config: Configuration) -> list[tuple[str | None, Configuration]]:
    layouts = config.pool_layouts()
    if layouts is None:
        return [(None, config)]
    pools = []
    for label, (tp, ep, dp), count in (("prefill", layouts[0], config.prefill_replicas),
                                       ("decode", layouts[1], config.decode_replicas)):
        pools.append((label, replace(config, disaggregated=False, prefill_layout=None, decode_layout=None,
                                     kv_transfer_backend=None, prefill_replicas=1, decode_replicas=1,
                                     tp=tp, ep=ep, attention_dp=dp, replicas=count)))
    return pools


def _narrow(config: Configuration, devices: int, span: str) -> tuple[Configuration, list[str]]:
    """Halve TP (and attention DP while > 1) until one stage fits; EP follows."""
    tp, dp = config.tp, config.attention_dp
    while tp > devices and tp % 2 == 0:
        tp //= 2
        dp = dp // 2 if dp > 1 and dp % 2 == 0 else dp
    ep = min(config.ep, tp)
    steps = []
    if tp != config.tp:
        steps.append(f"TP{config.tp}->TP{tp} ({span}; restored by Eq. 1, METHOD §3.1)")
    if dp != config.attention_dp:
        steps.append(f"attention DP{config.attention_dp}->DP{dp} (attention TP{config.attention_tp} kept)")
    if ep != config.ep:
        steps.append(f"EP{config.ep}->EP{ep} (restored by the imbalance law, METHOD §3.5)")
    return replace(config, tp=tp, attention_dp=dp, ep=ep), steps


def anchor_layouts(config: Configuration, devices: int, span: str | None = None) -> list[Reduction]:
    """The anchor layouts measuring ``config`` (module docstring), one per pool, each
    stage at most ``devices`` wide (``span`` says why, for the reduction's note)."""
    reductions = []
    for pool, layout in _pools(config):
        steps = []
        if layout.replicas > 1:
            steps.append(f"{layout.replicas} replicas -> 1 (load across replicas: the DES)")
        if layout.pp > 1:
            steps.append(f"PP{layout.pp} dropped (restored by Eq. 4, METHOD §3.6)")
        narrowed, more = _narrow(replace(layout, replicas=1, pp=1), devices, span or f"one node of {devices}")
        reductions.append(Reduction(narrowed, pool, tuple(steps + more)))
    return reductions


def harvest_config_text(config: Configuration) -> str:
    """``k=v,...`` for ``harvest --config``: the widths, every anchor-defining lever that
    is set, and the spec depth when a method is set (one depth measures the method:
    Eq. 2 carries the others)."""
    items = [f"{name}={format_value(getattr(config, name))}" for name in WIDTH_LEVERS]
    for name in ANCHOR_LEVERS:
        value = getattr(config, name)
        if value is not None and value != getattr(DEFAULTS, name):
            items.append(f"{name}={format_value(value)}")
    if config.spec_method != "none":
        items.append(f"spec_depth={config.spec_depth}")
    return ",".join(items)


def harvest_command(engine: str, model: str, cluster: str, config: Configuration, *extra: str) -> str:
    """The `inferasim harvest` line for one anchor layout (a drafting method names its draft
    checkpoint's place: ``--draft-model DRAFT_CHECKPOINT``, to replace)."""
    if config.spec_method in DRAFT_METHODS:
        extra = ("--draft-model", DRAFT_CHECKPOINT, *extra)
    tail = "".join(f" {item}" for item in extra)
    return (f"inferasim harvest --engine {engine} --model {model} --cluster {cluster} "
            f"--config {harvest_config_text(config)}{tail}")
