"""`python -m tessera.zoo NAME [BATCH] [--dynamic] [--samples DIR]`: export a bundled model
and print its path (with --dynamic, its batch and sequence are symbolic dimensions; with
--samples, 16 generated input samples are written to DIR as .npz files, for `--samples` of
`tessera compile` and `tessera bench`)."""

from __future__ import annotations

import sys
from pathlib import Path

from tessera.zoo import example_inputs, export, names

SAMPLES = 16


def main(argv: list[str]) -> int:
    dynamic = "--dynamic" in argv
    argv = [a for a in argv if a != "--dynamic"]
    samples = None
    if "--samples" in argv:
        at = argv.index("--samples")
        if at + 1 >= len(argv):
            return _usage()
        samples = Path(argv[at + 1])
        argv = argv[:at] + argv[at + 2:]
    if not argv or argv[0] not in names() or (len(argv) > 1 and not argv[1].isdigit()):
        return _usage()
    batch = int(argv[1]) if len(argv) > 1 else 1
    path = export(argv[0], batch, dynamic=dynamic)
    if samples is not None:
        write_samples(argv[0], batch, samples)
    print(path)
    return 0


def write_samples(name: str, batch: int, directory: Path, count: int = SAMPLES) -> None:
    """`count` generated samples of the model's inputs (`example_inputs`, one random state
    per sample), one .npz file each."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    for seed in range(count):
        np.savez(directory / f"sample-{seed:02d}.npz", **example_inputs(name, batch, seed))


def _usage() -> int:
    print(f"usage: python -m tessera.zoo NAME [BATCH] [--dynamic] [--samples DIR]; names: "
          f"{', '.join(names())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
