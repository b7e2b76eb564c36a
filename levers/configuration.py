"""A complete assignment of the 36 levers (`Configuration`) and partial configurations.

A partial configuration names only what it changes (PRODUCT.md §3); it is a plain
``dict[str, value]`` validated by :func:`parse_partial`. ``None`` on an optional lever
means "the engine default" (backends, block size) or "the checkpoint's dtype"
(precision levers), resolved by the predictor from the model card.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Mapping

from levers.catalog import LEVERS, SHARED_SUFFIX, Engine, LayoutOptions, get_lever, parse_layout, parse_layout_options
from levers.errors import InputError
from levers.inputs import parse_yaml, quote, read_text


@dataclass(frozen=True, slots=True)
class Configuration:
    """The 36 levers (PRODUCT.md §3), with defaults that describe a plain colocated
    deployment. Field order is the lever order."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    attention_dp: int = 1
    dcp: int = 1
    replicas: int = 1
    disaggregated: bool = False
    prefill_layout: str | None = None
    prefill_replicas: int = 1
    decode_layout: str | None = None
    decode_replicas: int = 1
    kv_transfer_backend: str | None = None
    weight_dtype: str | None = None
    activation_dtype: str | None = None
    expert_dtype: str | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    moe_backend: str | None = None
    all_to_all_backend: str = "none"
    graph_capture: str = "full"
    max_captured_batch: int = 256
    allreduce_algorithm: str | None = None
    max_running_requests: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill_size: int = 8192
    kv_memory_fraction: float = 0.9
    kv_block_size: int | None = None
    spec_method: str = "none"
    spec_depth: int = 0
    host_kv_tier_gb: float | str = 0.0      # GB per GPU, or "N:shared" (levers.catalog.SHARED_SUFFIX)
    prefix_cache: str = "on"
    eplb_replicas: int = 0
    fusions: tuple[str, ...] = ()
    concurrency: int = 64
    arrival_rate: float = 0.0
    router: str = "least_loaded"

    # --- derived facts ---------------------------------------------------------------
    @property
    def host_tier_gb_per_gpu(self) -> float:
        """Host DRAM for KV per GPU, private or shared."""
        value = self.host_kv_tier_gb
        return float(value[: -len(SHARED_SUFFIX)]) if isinstance(value, str) else float(value)

    @property
    def is_host_tier_shared(self) -> bool:
        """One host KV pool over every node of the deployment (``N:shared``)."""
        return isinstance(self.host_kv_tier_gb, str) and self.host_kv_tier_gb.endswith(SHARED_SUFFIX)

    @property
    def replica_gpus(self) -> int:
        """GPUs of one colocated replica: ``tp * pp`` (SGLang convention)."""
        return self.tp * self.pp

    @property
    def attention_tp(self) -> int:
        return self.tp // self.attention_dp if self.attention_dp else self.tp

    @property
    def dense_tp(self) -> int:
        """TP of dense MLP layers and shared experts: the whole stage, unless attention
        DP is on, when they follow the attention ranks (PRODUCT.md §3)."""
        return self.attention_tp if self.attention_dp > 1 else self.tp

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep if self.ep else self.tp

    @property
    def layout_options(self) -> LayoutOptions:
        """The replica layout's options (`levers.catalog.LayoutOptions`). A disaggregated
        configuration describes its decode pool; a pool's own configuration
        (`predictor.feasibility.pool_configs`) keeps its layout text when it has options."""
        text = self.decode_layout if self.disaggregated else (self.decode_layout or self.prefill_layout)
        if not text:
            return LayoutOptions(self.tp, self.ep, self.attention_dp)
        return parse_layout_options(text)

    @property
    def tp_subgroup(self) -> int:
        """Attention-DP ranks per TP subgroup of the selected projections, shared experts
        and dense MLP (``/TSt``; 1 = none)."""
        return self.layout_options.subgroup

    @property
    def dwdp_ranks(self) -> int:
        """Ranks sharing expert-weight storage in a DWDP prefill pool's configuration (1 = no DWDP)."""
        return 1 if self.disaggregated else self.layout_options.dwdp

    def pool_layouts(self) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
        """(prefill (tp, ep, dp), decode (tp, ep, dp)) when disaggregated."""
        if not self.disaggregated or not self.prefill_layout or not self.decode_layout:
            return None
        return parse_layout(self.prefill_layout), parse_layout(self.decode_layout)

    @property
    def total_gpus(self) -> int:
        layouts = self.pool_layouts()
        if layouts is None:
            return self.replicas * self.replica_gpus
        (ptp, _, _), (dtp, _, _) = layouts
        return self.pp * (self.prefill_replicas * ptp + self.decode_replicas * dtp)

    # --- conversion -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every lever by name (JSON-ready: ``fusions`` as a list). Written per trial to the
        ledger, so a flat read of the fields, not ``dataclasses.asdict``'s deep copy."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["fusions"] = list(self.fusions)
        return data

    def with_changes(self, partial: Mapping[str, Any]) -> "Configuration":
        """Apply a validated partial configuration; normalises disaggregated layouts."""
        return normalise(replace(self, **dict(partial)))

    def diff(self, other: "Configuration") -> dict[str, Any]:
        """Levers whose value differs in ``self`` relative to ``other``."""
        return {name: getattr(self, name) for name in _FIELD_NAMES
                if getattr(self, name) != getattr(other, name)}

    def describe(self, base: "Configuration | None" = None) -> str:
        """Compact ``k=v,...`` of what differs from ``base`` (default: the defaults)."""
        changed = self.diff(base or Configuration())
        return ",".join(f"{k}={format_value(v)}" for k, v in changed.items()) or "defaults"


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Configuration))
DEFAULT_CHUNK_TOKENS = Configuration().chunked_prefill_size


def engine_only_values(engine: Engine | str, given: Iterable[str] = ()) -> dict[str, Any]:
    """The levers whose default the engine cannot run and which it allows one value for
    (llama.cpp: no graph capture, one device): that value, unless ``given``."""
    defaults, chosen = Configuration(), {}
    for lever in LEVERS:
        if lever.name in given or lever.values is None or lever.is_ranged or lever.optional:
            continue
        legal = lever.legal_values(engine)
        if len(legal) == 1 and getattr(defaults, lever.name) not in legal:
            chosen[lever.name] = legal[0]
    return chosen


def normalise(config: Configuration) -> Configuration:
    """One convention everywhere: a disaggregated deployment's top-level tp/ep/dp
    describe its decode pool (a colocated one with pool levers set is left for
    :mod:`levers.legality` to reject)."""
    if config.disaggregated and config.decode_layout:
        tp, ep, dp = parse_layout(config.decode_layout)
        return replace(config, tp=tp, ep=ep, attention_dp=dp)
    return config


def format_value(value: Any) -> str:
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "+".join(value) if value else "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_partial(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Validate lever names and values (type/range/known value); engine legality is
    decided later by :mod:`levers.legality`."""
    pairs = items.items() if isinstance(items, Mapping) else items
    partial: dict[str, Any] = {}
    for name, raw in pairs:
        lever = get_lever(name)
        partial[lever.name] = lever.parse(raw)
    return partial


CONFIG_FILE_EXPECTED = "a YAML or JSON mapping of lever: value (or lines of lever=value)"


def parse_config_text(texts: str | Iterable[str] | None) -> dict[str, Any]:
    """``k=v,k=v`` (may repeat; merged left to right, later keys win); ``@FILE`` reads
    the pairs from a file through the input layer (:func:`config_file_pairs`)."""
    if texts is None:
        return {}
    if isinstance(texts, str):
        texts = [texts]
    pairs: list[tuple[str, Any]] = []
    for text in texts:
        text = str(text)
        pairs += config_file_pairs(text.strip()[1:]) if text.strip().startswith("@") else _text_pairs(text)
    return parse_partial(pairs)


def _text_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in _split_items(text):
        if "=" not in item:
            raise InputError("--config", f"{quote(item)} is not k=v",
                             "comma-separated lever=value pairs, e.g. tp=4,ep=4,kv_cache_dtype=fp8, or @FILE")
        name, _, value = item.partition("=")
        if not name.strip():
            raise InputError("--config", f"{quote(item)} has no lever name", "lever=value")
        earlier = [v for n, v in pairs if n == name.strip()]
        if earlier:   # one list is one intent (a YAML file refuses a repeated key too)
            raise InputError("--config", f"{quote(name.strip())} given twice ({quote(earlier[0])}, then "
                             f"{quote(value.strip())})", "each lever once per --config (a later --config "
                             "overrides an earlier one)")
        pairs.append((name.strip(), value.strip()))
    return pairs


def config_file_pairs(path: str) -> list[tuple[str, Any]]:
    """``--config @FILE``: a YAML/JSON mapping (``tp: 8``) or ``lever=value`` lines
    (``#`` starts a comment line), read through the input layer."""
    what = f"--config @{path}"
    text = read_text(path, "--config", expected=CONFIG_FILE_EXPECTED)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if lines and all("=" in line and ":" not in line.split("=", 1)[0] for line in lines):
        return _text_pairs(",".join(lines))
    data = parse_yaml(text, what, expected=CONFIG_FILE_EXPECTED)
    if not isinstance(data, dict):
        raise InputError(what, f"holds {'nothing' if data is None else 'a ' + type(data).__name__}, not a mapping",
                         CONFIG_FILE_EXPECTED)
    return [(str(name), value) for name, value in data.items()]


def _split_items(text: str) -> list[str]:
    return [item.strip() for item in str(text).split(",") if item.strip()]


def from_partial(partial: Mapping[str, Any]) -> Configuration:
    """The lever defaults with a user's partial configuration over them (``--config``, a
    plan-mix candidate, a harvest). A prompt chunk left unset follows a smaller step
    budget: an engine's chunk never exceeds its step's token budget, so
    ``max_batched_tokens=2048`` alone means 2,048-token chunks, not an illegal pair with
    the default 8,192-token chunk (a chunk given above the budget stays refused)."""
    changes = dict(partial)
    budget = changes.get("max_batched_tokens")
    if budget is not None and "chunked_prefill_size" not in changes:
        changes["chunked_prefill_size"] = min(DEFAULT_CHUNK_TOKENS, budget)
    return Configuration().with_changes(changes)


def configuration_from_dict(data: Mapping[str, Any]) -> Configuration:
    """A full configuration from JSON (a ledger or the LLM): unknown keys rejected."""
    return Configuration().with_changes(parse_partial(data))
