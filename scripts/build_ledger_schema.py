"""Write ledgers/ledger.schema.json from the pydantic Ledger model (PRODUCT.md §5).

Run after changing ledgers/model.py: `python scripts/build_ledger_schema.py`.
tests/ledgers/test_schema.py fails when the shipped schema is out of date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ledgers.model import Ledger  # noqa: E402

SCHEMA_PATH = ROOT / "ledgers" / "ledger.schema.json"


def ledger_schema() -> dict:
    schema = Ledger.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render() -> str:
    return json.dumps(ledger_schema(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    SCHEMA_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
