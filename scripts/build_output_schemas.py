"""Write agent/cli/schemas/COMMAND.schema.json from agent.cli.output_schemas (the one
vocabulary of quantities; trial records from ledgers/ledger.schema.json).
tests/agent/cli/test_output_schemas.py fails when a file is out of date.

    python scripts/build_output_schemas.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.cli.output_schemas import SCHEMA_DIR, build, schema_text  # noqa: E402


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, schema in build().items():
        path = SCHEMA_DIR / f"{name}.schema.json"
        path.write_text(schema_text(schema), encoding="utf-8")
        print(path)


if __name__ == "__main__":
    main()
