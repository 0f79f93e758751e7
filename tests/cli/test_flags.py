"""Every command spells its flags the same way: a short flag means one long option everywhere
(`-o` is --output, `-O` is --option), shared options read the same, the help texts are
golden, and what the help promises for NAME=VALUE arguments is what the parsers accept."""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.cli import cli
from tessera.cli._common import cli_pins, parse_pairs, parse_shapes
from tessera.errors import ConfigError
from tessera.ir import load_model

from ..ir.models import mlp
from .test_cli import check_golden, run


def commands(ctx: click.Context | None = None, path: tuple[str, ...] = ()
             ) -> Iterator[tuple[tuple[str, ...], click.Context]]:
    """Every command below the group, each with a context under its parent's (so that the
    group's settings, such as -h for help, reach it)."""
    ctx = ctx or click.Context(cli, info_name="tessera", **cli.context_settings)
    assert isinstance(ctx.command, click.Group)
    for name in ctx.command.list_commands(ctx):
        command = ctx.command.get_command(ctx, name)
        assert command is not None
        child = click.Context(command, info_name=name, parent=ctx)
        yield (*path, name), child
        if isinstance(command, click.Group):
            yield from commands(child, (*path, name))


def options(ctx: click.Context) -> list[click.Option]:
    return [p for p in ctx.command.get_params(ctx) if isinstance(p, click.Option)]


ALL = [(" ".join(path), ctx) for path, ctx in commands()]


def test_every_command_is_walked() -> None:
    names = [name for name, _ in ALL]
    for expected in ("compile", "run", "bench", "explain", "targets", "target show",
                     "config show", "records export", "records import", "records show"):
        assert expected in names


def test_a_short_flag_means_one_long_option_everywhere() -> None:
    meaning: dict[str, set[str]] = {}
    root = click.Context(cli, info_name="tessera", **cli.context_settings)
    for _, ctx in [("tessera", root), *ALL]:
        for option in options(ctx):
            longs = [o for o in option.opts if o.startswith("--")]
            shorts = [o for o in option.opts if not o.startswith("--")]
            assert len(longs) == 1 and len(shorts) <= 1, option.opts
            for short in shorts:
                meaning.setdefault(short, set()).add(longs[0])
    assert {short: sorted(longs) for short, longs in meaning.items()} == {
        "-h": ["--help"], "-i": ["--input"], "-o": ["--output"], "-O": ["--option"],
        "-t": ["--target"], "-v": ["--verbose"]}


@pytest.mark.parametrize("long", ["--target", "--option", "--pin", "--input-shape",
                                  "--shape-profile", "--executor"])
def test_shared_options_read_the_same_in_every_command(long: str) -> None:
    forms = {}
    for name, ctx in ALL:
        for option in options(ctx):
            if long in option.opts:
                text = re.sub(r"e\.g\. -O \S+", "e.g. -O ...", option.help or "")
                text = text.replace(" (not for a .tess artifact)", "")
                forms[name] = (tuple(option.opts), option.metavar, option.multiple, text)
    assert len(forms) >= 2
    assert len(set(forms.values())) == 1, forms


def test_every_option_has_help() -> None:
    for name, ctx in ALL:
        assert ctx.command.help, name
        for option in options(ctx):
            assert option.help, (name, option.opts)


def test_help_texts_are_golden() -> None:
    parts = []
    for path in [(), *(p for p, _ in commands())]:
        code, out, err = run(*path, "--help")
        assert code == 0, err
        parts.append(f"$ {' '.join(('tessera', *path))} --help\n{out}")
    check_golden("help.txt", "\n".join(parts))


@pytest.mark.parametrize("command", [["config", "show"], ["explain", "m.onnx"]])
def test_lowercase_o_for_an_option_points_to_capital_o(command: list[str]) -> None:
    code, _, err = run(*command, "-t", "cpu", "-o", "fallback=off")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: unexpected argument '-o': flow options go as -O NAME=VALUE")


# -- NAME=VALUE arguments ------------------------------------------------------------------
names = st.text(string.ascii_letters + string.digits + "/._-:[]*+?()", min_size=1)
values = st.text(string.printable.replace("\n", "").replace("\r", ""))


@given(names, values)
def test_pairs_split_at_the_first_equals(key: str, value: str) -> None:
    assert parse_pairs((f"{key}={value}",), "--pin") == {key: value}


@given(st.text(string.printable.replace("=", "")))
def test_a_pair_without_equals_or_name_is_a_config_error(item: str) -> None:
    for bad in (item, f"={item}"):
        with pytest.raises(ConfigError, match=r"--pin expects NAME=VALUE, got"):
            parse_pairs((bad,), "--pin")


@given(st.dictionaries(names, st.lists(st.integers(0, 2**40), min_size=1, max_size=6),
                       max_size=4))
def test_input_shapes_round_trip(shapes: dict[str, list[int]]) -> None:
    items = tuple(f"{k}={','.join(map(str, dims))}" for k, dims in shapes.items())
    assert parse_shapes(items) == (shapes or None)


@given(names, st.text(string.ascii_letters + ", .", min_size=1).filter(
    lambda s: not re.fullmatch(r"[\d, ]*", s)))
def test_non_integer_dimensions_are_a_config_error(name: str, dims: str) -> None:
    with pytest.raises(ConfigError, match="dimensions must be integers"):
        parse_shapes((f"{name}={dims}",))


MLP = load_model(mlp())


@given(st.one_of(st.sampled_from(MLP.dataflow.names), names))
def test_pin_is_a_node_name_else_a_regex(key: str) -> None:
    pins = cli_pins(MLP, (f"{key}=onnxruntime -opt-level=basic",))
    if key in MLP.dataflow.names or key.startswith("re:"):
        assert pins == {key: "onnxruntime -opt-level=basic"}
    else:
        assert pins == {f"re:{key}": "onnxruntime -opt-level=basic"}


def _model(tmp_path: Path) -> str:
    import onnx

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    return str(path)


@pytest.mark.parametrize("command", ["compile", "explain"])
@pytest.mark.parametrize("pin", ["relu", "re:re.u", "re.u", "relu|softmax"])
def test_every_pin_form_works_in_every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               command: str, pin: str) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    out = ["-o", str(tmp_path / "m.tess")] if command == "compile" else []
    code, stdout, err = run(command, _model(tmp_path), "-t", "onnxruntime", "-O",
                            "partitioner=greedy", "--pin", f"{pin}=reference", *out)
    assert code == 0, err
    if command == "explain":
        assert re.search(r"relu \(Relu\) -> reference", stdout)


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_a_broken_pin_regex_is_one_clear_line(tmp_path: Path, command: str) -> None:
    code, _, err = run(command, _model(tmp_path), "-t", "onnxruntime", "--pin", "re:[=reference")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: pin 're:[': '[' is not a regular expression")


def test_the_examples_in_the_help_texts_are_accepted() -> None:
    helps = " ".join(option.help or "" for _, ctx in ALL for option in options(ctx))
    examples = sorted(set(re.findall(r"-O (\S+=\S+)", helps)))
    assert len(examples) >= 3
    compile_command = cli.get_command(click.Context(cli), "compile")
    assert compile_command is not None
    flag = re.search(r"--target-onnxruntime-\S+=\d+", str(compile_command.epilog))
    assert flag is not None
    for example in examples:
        code, out, err = run("config", "show", "-t", "onnxruntime", "-O", example, flag.group())
        assert code == 0, err
        name, value = example.split("=")
        assert f"  {name} = {value}" in out.replace("true", "on").replace("false", "off")
