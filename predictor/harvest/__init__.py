"""The harvester (METHOD §4): measure an anchor on a real engine and write it into the
anchor cache.

- `adapters`: per-engine launch argument lists and request details (vllm, sglang, atom,
  llamacpp; trtllm in `trtllm`, vLLM's online quantization in `quantization`), a
  registry keyed by `levers.catalog.Engine`; `launch`: what they share;
- `process`: the engine process group, readiness wait, always stopped (and, through
  `watchdog`, stopped even when the harvester is killed with SIGKILL);
- `client`: streaming OpenAI-compatible client timestamping every token, every wait
  bounded (the harvest's `Deadline`), every reply validated (`replies`); `prompts`:
  unique prompts of a known token length;
- `sweeps`: decode single waves, prefill TTFT sweep and fit, packed-prefill probe, host
  time; `checks`: what refuses or flags;
- `plan`: validate a request and decide the launch and sweep plan (`--dry-run`);
  `harvester`: run it and write the anchor; `validate`: check the anchor at an unseen
  prompt length; `loop`: the closed loop (predict an unmeasured configuration, run it,
  compare);
- `reduce`, `layouts`: the anchor layouts a deployment needs (METHOD §3.14) and the
  checked harvest command of each (the agent's harvest hints);
- `gguf`: a model card from a GGUF header; `cpu`: the `cpu` hardware profile.

The CLI is `agent/cli/harvest.py` (`inferasim harvest`).
"""
