"""Kubernetes manifests around a deployment's launch commands, for a split or for colocated
replicas behind a router:

- a Dynamo graph (`DynamoGraphDeployment`, nvidia.com/v1alpha1, the shape of Dynamo's
  own `examples/backends/*/deploy/disagg.yaml` and `agg.yaml`): a frontend whose router
  follows the `router` lever, and one worker service per pool (`subComponentType`
  prefill/decode, `replicas` and GPUs per replica from the pool) running
  `python3 -m dynamo.<engine>` with the pool's engine arguments and, in a split,
  `--disaggregation-mode` (a colocated deployment of several replicas is one worker
  service of that many replicas: the lever `router` is priced, so its replicas need the
  frontend in front of them);
- llm-d (splits only): one `Deployment` per pool labelled as llm-d's inference scheduler selects them
  (`llm-d.ai/role`), the engine command as the container's command and arguments, the
  decode engine 200 above the serving port (`deploy --port`, 8000) behind llm-d's routing
  sidecar on it (`--kv-connector` nixlv2 for vLLM, sglang for SGLang's bootstrap protocol:
  llm-d-router `pkg/sidecar/proxy/connector_sglang.go`), as llm-d's P/D guides lay the pods out.

Dynamo runs vLLM, SGLang and TensorRT-LLM workers; llm-d's P/D path runs vLLM and SGLang;
the others are refused with the reason. Image names are the public images of the
releases the flags were checked against (`tests/fixtures/engine_flags`): check the tag
for your platform, or pass `--image`.
"""

from __future__ import annotations

from typing import Any

import yaml

from agent.deploy.plan import DeployPlan, PoolLaunch
from levers.catalog import Engine
from levers.errors import InputError

DYNAMO_VERSION = "1.6.1"
DYNAMO_IMAGES = {Engine.VLLM: "vllm-runtime", Engine.SGLANG: "sglang-runtime", Engine.TRTLLM: "tensorrtllm-runtime"}
DYNAMO_MODULES = {Engine.VLLM: "dynamo.vllm", Engine.SGLANG: "dynamo.sglang", Engine.TRTLLM: "dynamo.trtllm"}
ROUTER_MODES = {"least_loaded": "least-loaded", "kv_aware": "kv", "prefix_hash": "kv", "round_robin": "round-robin",
                "random": "random"}
ENGINE_IMAGES = {Engine.VLLM: "vllm/vllm-openai:v0.33.0", Engine.SGLANG: "lmsysorg/sglang:v0.5.23"}
SIDECAR_IMAGE = "ghcr.io/llm-d/llm-d-routing-sidecar:latest"
LLMD_BACKENDS = ("nixl", "mori")   # what llm-d's routing sidecar speaks (nixlv2; MoRI-IO write mode)
LLMD_ENGINE_PORT_OFFSET = 200   # a decode pod: the routing sidecar takes the serving port (--port),
#   the engine moves this far behind it; a prefill pod serves on --port itself
SIDECAR_CONNECTORS = {Engine.VLLM: "nixlv2", Engine.SGLANG: "sglang"}   # the sidecar's --kv-connector
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
CONFIG_MOUNT = "/config"
FRONTEND_ARGS = ("--host", "--port")   # vLLM frontend options a Dynamo worker does not take


def _one_node_pools(plan: DeployPlan, kind: str) -> None:
    """A pool whose replica spans nodes needs a multi-node worker (a LeaderWorkerSet, a
    Dynamo multinode service) these manifests do not write: refused, not written as one pod
    of more GPUs than a node holds (it would never be scheduled)."""
    wide = [pool for pool in plan.pools if pool.nodes]
    if wide:
        pool = wide[0]
        raise InputError(kind, f"the {pool.role} pool's replica of {pool.gpus_per_replica} GPUs spans "
                         f"{len(pool.nodes)} nodes: multi-node workers are not written here",
                         "pools within one node, or the per-node commands (deploy.json)")


def slug(plan: DeployPlan) -> str:
    return "".join(c if c.isalnum() else "-" for c in plan.target.card.name.lower()).strip("-")


def _dump(documents: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in documents)


# -- Dynamo -------------------------------------------------------------------------


def dynamo_graph(plan: DeployPlan, image: str | None = None) -> str:
    """The DynamoGraphDeployment (and a ConfigMap for engine option files) of a split, or
    of colocated replicas."""
    engine = plan.target.engine
    if engine not in DYNAMO_MODULES:
        raise InputError("dynamo", f"Dynamo has no {engine} worker", "vllm, sglang or trtllm for a Dynamo graph")
    _one_node_pools(plan, "dynamo")
    name = f"{slug(plan)}-{'disagg' if plan.is_disaggregated else 'agg'}"
    image = image or f"nvcr.io/nvidia/ai-dynamo/{DYNAMO_IMAGES[engine]}:{DYNAMO_VERSION}"
    frontend = {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
        "image": image, "command": ["python3", "-m", "dynamo.frontend"],
        "args": ["--http-port", str(serve_port(plan)), "--router-mode", ROUTER_MODES[plan.config.router]]}}}
    services: dict[str, Any] = {"Frontend": frontend}
    files: dict[str, str] = {}
    for pool in plan.pools:
        services[f"{pool.role.capitalize()}Worker"] = _worker(plan, pool, image, name, files)
    documents = [{"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                  "metadata": {"name": name}, "spec": {"services": services}}]
    if files:
        documents.insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                             "data": files})
    return _dump(documents)


#: dynamo.trtllm's flag for each of trtllm-serve's
TRTLLM_WORKER_FLAGS = (("--tensor-parallel-size", "--tp_size"), ("--pipeline-parallel-size", "--pp_size"),
                       ("--expert-parallel-size", "--ep_size"), ("--max-batch-size", "--max_batch_size"),
                       ("--max-num-tokens", "--max_num_tokens"), ("--max-seq-len", "--max_seq_len"),
                       ("--free-gpu-memory-fraction", "--kv_cache_free_gpu_memory_fraction"))


def dynamo_worker_argv(plan: DeployPlan, pool: PoolLaunch) -> list[str]:
    """``python3 -m dynamo.<engine> ...`` for one pool (module docstring)."""
    engine, argv = plan.target.engine, list(pool.command.argv)
    head = ["python3", "-m", DYNAMO_MODULES[engine]]
    mode = ["--disaggregation-mode", pool.role] if plan.is_disaggregated else []
    if engine is Engine.VLLM:
        return [*head, "--model", argv[2], *_without(argv[3:], FRONTEND_ARGS), *mode]
    if engine is Engine.SGLANG:
        return [*head, *argv[3:]]
    request = pool.request
    ((path, _),) = pool.command.files
    # the values trtllm-serve's command got (a Helix decode pool's TP is tp / dcp)
    flags = [(name, argv[argv.index(serve) + 1]) for name, serve in TRTLLM_WORKER_FLAGS]
    return [*head, "--model", request.model_path, "--served-model-name", request.served_name,
            *(item for pair in flags for item in pair),
            "--extra-engine-args", f"{CONFIG_MOUNT}/{path.rsplit('/', 1)[-1]}", *mode]


def _worker(plan: DeployPlan, pool: PoolLaunch, image: str, name: str, files: dict[str, str]) -> dict[str, Any]:
    container: dict[str, Any] = {"image": image, "command": dynamo_worker_argv(plan, pool)[:3],
                                 "args": dynamo_worker_argv(plan, pool)[3:]}
    if pool.command.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(pool.command.env.items())]
    spec: dict[str, Any] = {"mainContainer": container}
    if pool.command.files:
        files.update({path.rsplit("/", 1)[-1]: text for path, text in pool.command.files})
        container["volumeMounts"] = [{"name": "engine-config", "mountPath": CONFIG_MOUNT}]
        spec["volumes"] = [{"name": "engine-config", "configMap": {"name": f"{name}-config"}}]
    role = {"subComponentType": pool.role} if plan.is_disaggregated else {}
    return {"envFromSecret": "hf-token-secret", "componentType": "worker", **role,
            "replicas": pool.replicas, "resources": {"limits": {"gpu": str(pool.gpus_per_replica)}},
            "extraPodSpec": spec}


def _without(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` without each of ``options`` and the value that follows it."""
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        if token in options:
            skip = True
            continue
        kept.append(token)
    return kept


# -- llm-d --------------------------------------------------------------------------


def llmd_manifests(plan: DeployPlan, image: str | None = None) -> dict[str, str]:
    """One Deployment per pool, by role."""
    engine = plan.target.engine
    if engine not in ENGINE_IMAGES:
        raise InputError("llm-d", f"llm-d's prefill/decode path has no {engine} model server",
                         "vllm or sglang for llm-d manifests")
    _one_node_pools(plan, "llm-d")
    if plan.kv_transfer_backend not in LLMD_BACKENDS:
        raise InputError("llm-d", f"llm-d's routing sidecar does not speak {plan.kv_transfer_backend}",
                         "kv_transfer_backend nixl or mori for llm-d manifests")
    return {pool.role: _dump([_deployment(plan, pool, image or ENGINE_IMAGES[engine])]) for pool in plan.pools}


def _deployment(plan: DeployPlan, pool: PoolLaunch, image: str) -> dict[str, Any]:
    labels = {"llm-d.ai/inference-serving": "true", "llm-d.ai/model": slug(plan),
              "llm-d.ai/engine-type": str(plan.target.engine), "llm-d.ai/role": pool.role}
    is_vllm = plan.target.engine is Engine.VLLM
    proxied = pool.role == "decode"                     # llm-d's routing sidecar in front (`_sidecar_args`)
    port = serve_port(plan) + (LLMD_ENGINE_PORT_OFFSET if proxied else 0)
    argv = _with_port(list(pool.command.argv), port)   # every pod of a pool on one port: its own pod
    command_length = 2 if is_vllm else 3
    resource = GPU_RESOURCE.get(plan.target.cluster.gpu.vendor, "nvidia.com/gpu")
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(pool.command.env.items())]
    if is_vllm:
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    container = {"name": "modelserver", "image": image, "command": argv[:command_length], "args": argv[command_length:],
                 "env": env, "ports": [{"name": "modelserver", "containerPort": port}],
                 "resources": {"limits": {resource: str(pool.gpus_per_replica)},
                               "requests": {resource: str(pool.gpus_per_replica)}}}
    spec: dict[str, Any] = {"containers": [container]}
    if proxied:
        spec["initContainers"] = [{"name": "routing-proxy", "image": SIDECAR_IMAGE, "restartPolicy": "Always",
                                   "args": _sidecar_args(plan),
                                   "ports": [{"name": "sidecar", "containerPort": serve_port(plan)}]}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"{slug(plan)}-{pool.role}", "labels": dict(labels)},
            "spec": {"replicas": pool.replicas, "selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": spec}}}


def _sidecar_args(plan: DeployPlan) -> list[str]:
    """llm-d's routing sidecar in front of the decode engine (its ``--vllm-port`` names
    whichever engine sits behind it): vLLM over NIXL, or MoRI-IO in write mode with the
    prefill pool's TP (as llm-d's AMD guide sets it); SGLang over its bootstrap protocol."""
    port = serve_port(plan)
    engine = plan.target.engine
    args = [f"--port={port}", f"--vllm-port={port + LLMD_ENGINE_PORT_OFFSET}",
            f"--kv-connector={SIDECAR_CONNECTORS[engine]}"]
    if plan.kv_transfer_backend == "mori" and engine is Engine.VLLM:
        args += ["--moriio-write-mode", f"--moriio-tp-size={plan.pools[0].config.tp}"]
    return args


def serve_port(plan: DeployPlan) -> int:
    """The port clients reach (``deploy --port``): the first pool's; on the host, a split's
    later pools take the next ports (`plan._pool`), each pod of a manifest its own."""
    return plan.pools[0].request.port


def _with_port(argv: list[str], port: int) -> list[str]:
    position = argv.index("--port")
    return [*argv[:position + 1], str(port), *argv[position + 2:]]
