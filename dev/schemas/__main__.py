"""`python -m dev.schemas [--check]`: write the shipped JSON Schemas (see dev/schemas)."""

from __future__ import annotations

import sys

from dev.schemas import ROOT, stale, write


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        differ = stale()
        for path in differ:
            print(f"{path.relative_to(ROOT)}: out of date (run `make schemas`)", file=sys.stderr)
        return 1 if differ else 0
    if argv:
        print("usage: python -m dev.schemas [--check]", file=sys.stderr)
        return 2
    for path in write():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
