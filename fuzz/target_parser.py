"""atheris (libFuzzer) harness for the target-string parser and the target JSON form: any
input may raise a TesseraError, nothing else.

    pip install atheris
    python fuzz/target_parser.py -runs=100000           # or -max_total_time=60
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from tessera.errors import TesseraError
    from tessera.target import Target


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    text = provider.ConsumeUnicodeNoSurrogates(256)
    for parse in (Target, Target.from_json):
        with contextlib.suppress(TesseraError):
            parse(text)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
