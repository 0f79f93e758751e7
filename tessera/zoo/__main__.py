"""`python -m tessera.zoo NAME [BATCH]`: export a bundled model and print its path."""

from __future__ import annotations

import sys

from tessera.zoo import export, names


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in names():
        print(f"usage: python -m tessera.zoo NAME [BATCH]; names: {', '.join(names())}",
              file=sys.stderr)
        return 2
    print(export(argv[0], int(argv[1]) if len(argv) > 1 else 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
