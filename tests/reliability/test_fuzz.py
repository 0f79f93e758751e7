"""Fuzzing every parser with hypothesis: target strings, target and config JSON, config
objects, and the CLI. Whatever the input, only a TesseraError may escape (or, for the CLI, a
clean non-zero exit): never a KeyError, IndexError, RecursionError or the like.

CI runs each property 400 times; the slow variants run 10,000 each:
`python -m pytest -m slow tests/reliability/test_fuzz.py`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.cli import cli
from tessera.config import CompilationConfig
from tessera.errors import TesseraError
from tessera.target import Target

SLOW = settings(max_examples=10_000, deadline=None)
CI = settings(max_examples=400, deadline=None)

# Pieces that reach deep into the grammar: kinds, aliases, tags, options, quotes, escapes,
# nesting and list separators, glued together at random.
_PIECES = ["cpu", "cuda", "llvm", "onnxruntime", "ort", "openvino", "torch", "iree", "tvm",
           "reference", "composite", "nvidia/a100", "nvidia/", "-", "--", "-mcpu", "=", " ",
           "-host", "-devices", "-arch=sm_80", "-num-threads", "-keys", "-mattr=+avx2,+fma",
           "\"", "'", "\\", ",", ";", "{", "}", "[", "]", ":", "-spinning", "=true", "=1e9",
           "-opt-level=", "all", "-device=cuda", "\x00", "é", "\n", "-compile", "99999999999"]
target_texts = st.one_of(st.text(max_size=80),
                         st.lists(st.sampled_from(_PIECES), max_size=14).map("".join))

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                       st.text(max_size=12), st.sampled_from(_PIECES))
json_values = st.recursive(
    _json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(["kind", "tag", "host", "targets", "keys", "arch",
                                         "devices", "mcpu", "options", "executor", "runtime",
                                         "num-threads", "fallback", "partitioner", "x",
                                         "executors", "target_host", "accelerators",
                                         "flow-config", "enable-byoc", "link-params"]),
                        children, max_size=5)),
    max_leaves=20)


def only_tessera_errors(parse: Callable[[Any], object], value: Any) -> None:
    with contextlib.suppress(TesseraError):
        parse(value)


def target_string(text: str) -> None:
    only_tessera_errors(Target, text)


def target_json(value: Any) -> None:
    only_tessera_errors(Target.from_json, json.dumps(value))


def config_json(value: Any) -> None:
    only_tessera_errors(CompilationConfig.from_json, json.dumps(value))


def config_object(value: Any) -> None:
    only_tessera_errors(CompilationConfig.create, value)


def cli_args(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, result.exception)
    if result.exit_code:
        assert "Traceback" not in result.output, (args, result.output)


_COMMANDS = [["target", "show"], ["config", "show", "-t"], ["explain", "-t"]]
cli_inputs = st.tuples(st.sampled_from(_COMMANDS), target_texts,
                       st.lists(st.sampled_from(["-o", "fallback=off", "--host", "cpu",
                                                 "-O", "x=y", "--json", "--target-ort-x=1",
                                                 "--executor", "aot"]), max_size=4))


def _cli(case: tuple[list[str], str, list[str]]) -> None:
    command, text, extra = case
    args = [*command, text, *extra]
    if command[0] == "explain":  # explain needs a model before its options
        args = ["explain", "missing-model.onnx", "-t", text, *extra]
    cli_args(args)


PROPERTIES: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "target strings": (target_texts, target_string),
    "target json": (json_values, target_json),
    "config json": (json_values, config_json),
    "config objects": (json_values, config_object),
    "cli": (cli_inputs, _cli),
}


@pytest.mark.parametrize("name", PROPERTIES)
@CI
@given(data=st.data())
def test_fuzz(name: str, data: st.DataObject) -> None:
    strategy, check = PROPERTIES[name]
    check(data.draw(strategy))


@pytest.mark.slow
@pytest.mark.parametrize("name", PROPERTIES)
@SLOW
@given(data=st.data())
def test_fuzz_10k(name: str, data: st.DataObject) -> None:
    strategy, check = PROPERTIES[name]
    check(data.draw(strategy))
