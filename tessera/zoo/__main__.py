"""`python -m tessera.zoo NAME [BATCH] [--dynamic]`: export a bundled model and print its
path (with --dynamic, its batch and sequence are symbolic dimensions)."""

from __future__ import annotations

import sys

from tessera.zoo import export, names


def main(argv: list[str]) -> int:
    dynamic = "--dynamic" in argv
    argv = [a for a in argv if a != "--dynamic"]
    if not argv or argv[0] not in names() or (len(argv) > 1 and not argv[1].isdigit()):
        print(f"usage: python -m tessera.zoo NAME [BATCH] [--dynamic]; names: "
              f"{', '.join(names())}", file=sys.stderr)
        return 2
    print(export(argv[0], int(argv[1]) if len(argv) > 1 else 1, dynamic=dynamic))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
