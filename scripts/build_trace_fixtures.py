"""Copy small public trace fixtures into predictor/data/traces/ (tests, benchmarks, demos).

Nothing under ../shared is read at run time; this script records where each fixture
came from in predictor/data/traces/SOURCES.json:
- 3 agentic coding sessions (two with subagent groups), Apache-2.0, WEKA /
  callanjfox/kv-cache-tester;
- the first 2,000 records of the Mooncake conversation trace, Apache-2.0,
  kvcache-ai/Mooncake (FAST'25 release);
- Vidur's processed Splitwise conversation trace (MIT, microsoft/vidur; Azure LLM
  inference traces, CC-BY).

Run: python scripts/build_trace_fixtures.py [--shared ../shared/data/traces]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "predictor" / "data" / "traces"
AGENTIC_SESSIONS = ("trace_0277.json", "trace_0291.json", "trace_0538.json")
MOONCAKE_RECORDS = 2000
SOURCES = {
    "agentic": "github.com/callanjfox/kv-cache-tester traces/ (WEKA, Apache-2.0), via shared/data/traces/agentic-coding",
    "mooncake": "github.com/kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl (Apache-2.0)",
    "vidur": "github.com/microsoft/vidur data/processed_traces/splitwise_conv.csv (MIT; Azure traces CC-BY)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("INFERASIM_SHARED_TRACES", str(SHARED_DATA / "traces")))
    shared = Path(parser.parse_args().shared)
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name in AGENTIC_SESSIONS:
        shutil.copyfile(shared / "agentic-coding" / name, OUT / f"agentic_{name}")
        manifest[f"agentic_{name}"] = SOURCES["agentic"]
    lines = (shared / "mooncake" / "conversation_trace.jsonl").read_text().splitlines()[:MOONCAKE_RECORDS]
    (OUT / "mooncake_conversation_2000.jsonl").write_text("\n".join(lines) + "\n")
    manifest["mooncake_conversation_2000.jsonl"] = SOURCES["mooncake"] + f", first {MOONCAKE_RECORDS} records"
    shutil.copyfile(shared / "vidur" / "splitwise_conv.csv", OUT / "splitwise_conv.csv")
    manifest["splitwise_conv.csv"] = SOURCES["vidur"]
    (OUT / "SOURCES.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(manifest)} fixtures to {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
