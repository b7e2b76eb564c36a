"""The harvester (METHOD §4): measure an anchor on a real engine and write it into the
anchor cache.

- `adapters`: per-engine launch argument lists and request details (vllm, sglang, atom,
  trtllm via --endpoint, llamacpp), a registry keyed by `levers.catalog.Engine`;
- `process`: the engine process group, readiness wait, always stopped (and, through
  `watchdog`, stopped even when the harvester is killed with SIGKILL);
- `client`: streaming OpenAI-compatible client timestamping every token, every wait
  bounded (the harvest's `Deadline`), every reply validated (`replies`); `prompts`:
  unique prompts of a known token length;
- `sweeps`: decode single waves, prefill TTFT sweep and fit, packed-prefill probe, host
  time; `checks`: what refuses or flags;
- `plan`: validate a request and decide the launch and sweep plan (`--dry-run`);
  `harvester`: run it and write the anchor; `validate`: check the anchor at an unseen
  prompt length;
- `gguf`: a model card from a GGUF header; `cpu`: the `cpu` hardware profile.

The CLI is `agent/cli/harvest.py` (`inferasim harvest`).
"""
