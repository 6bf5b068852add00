"""Print the table of a benchmark run again, from its JSON: ``python -m bench.report [results/latest.json]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.harness import from_dict, table


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "latest.json")
    data = json.loads(path.read_text())
    print(table([from_dict(row) for row in data["rows"]]))


if __name__ == "__main__":
    main()
