"""`tessera targets`, `tessera target show` and `tessera config show`."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from tessera.cli._app import cli, console
from tessera.cli._common import (
    TARGET_FLAGS,
    TARGET_FLAGS_HELP,
    config_from_cli,
    executor_option,
    expand_targets,
    option_option,
    target_option,
)
from tessera.config import CompilationConfig, option_infos
from tessera.target import KINDS, TAGS, Target


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@cli.command("targets")
@click.option("--json", "as_json", is_flag=True, help="Print kinds and tags as JSON.")
def targets_command(as_json: bool) -> None:
    """List target kinds (with availability and attributes) and tags."""
    kinds = [kind for _, kind in KINDS.items()]
    if as_json:
        payload = {
            "kinds": [
                {
                    "name": k.name,
                    "aliases": KINDS.aliases_of(k.name),
                    "device_types": list(k.device_types),
                    "external_codegen": k.is_external_codegen,
                    "available": k.is_available().ok,
                    "availability": k.is_available().reason,
                    "attrs": {
                        s.name: {"type": s.type.value, "default": _json(s.default),
                                 "doc": s.doc, "tuning": s.tuning,
                                 "choices": list(s.choices) if s.choices else None}
                        for s in k.attrs
                    },
                }
                for k in kinds
            ],
            "tags": {name: str(Target(name)) for name in TAGS.names()},
        }
        click.echo(json.dumps(payload, indent=2))
        return
    out = console()
    table = Table(title="Target kinds")
    for column in ("kind", "aliases", "runs on", "available"):
        table.add_column(column, overflow="fold")
    for kind in kinds:
        role = ("backend for " if kind.is_external_codegen else "device ") + ", ".join(
            kind.device_types
        )
        avail = kind.is_available()
        reason = escape(avail.reason)
        mark = f"[green]yes[/] ({reason})" if avail.ok else f"[red]no[/] ({reason})"
        table.add_row(kind.name, ", ".join(KINDS.aliases_of(kind.name)), role, mark)
    out.print(table)
    for kind in kinds:
        attrs = Table(title=escape(f"{kind.name}: {kind.doc}"), title_justify="left")
        for column in ("option", "type", "default", "tuning key", "doc"):
            attrs.add_column(column, overflow="fold")
        for spec in kind.attrs:
            kind_text = spec.type.value + (f" {{{'|'.join(spec.choices)}}}" if spec.choices else "")
            default = "" if spec.default is None else _show(spec.default)
            attrs.add_row(f"-{spec.name}", escape(kind_text), escape(default),
                          "yes" if spec.tuning else "no", escape(spec.doc))
        out.print(attrs)
    tags = Table(title="Tags")
    tags.add_column("tag")
    tags.add_column("expands to", overflow="fold")
    for name in TAGS.names():
        tags.add_row(name, escape(str(Target(name))))
    out.print(tags)


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@cli.group("target")
def target_group() -> None:
    """Inspect targets."""


@target_group.command("show")
@click.argument("target")
@click.option("--host", help="Host target for a device target.")
def target_show(target: str, host: str | None) -> None:
    """Print a target's canonical string, JSON and tuning key."""
    parsed = Target(target, host=host)
    out = console()
    click.echo(f"canonical:   {parsed}")
    click.echo(f"kind:        {parsed.kind.name}")
    click.echo(f"device:      {parsed.device_type}")
    role = "external codegen (backend)" if parsed.is_external_codegen else "device target"
    click.echo(f"role:        {role}")
    click.echo(f"keys:        {', '.join(parsed.keys)}")
    click.echo(f"tuning key:  {parsed.tuning_key()}")
    click.echo(f"code key:    {parsed.codegen_key()}")
    out.print("json:")
    click.echo(json.dumps(parsed.to_dict(include_defaults=True), indent=2))


@cli.group("config")
def config_group() -> None:
    """Inspect compilation configs."""


@config_group.command("show", epilog=TARGET_FLAGS_HELP, context_settings=TARGET_FLAGS)
@target_option()
@click.option("--host", help="Host target shared by all targets.")
@executor_option()
@click.option("--runtime", help="Runtime (default python).")
@option_option("fallback=off")
@click.option("--json", "as_json", is_flag=True, help="Print the config as JSON.")
@click.pass_context
def config_show(
    ctx: click.Context, targets: str, host: str | None, executor: str | None,
    runtime: str | None, options: tuple[str, ...], as_json: bool,
) -> None:
    """Print the canonical config."""
    config = config_from_cli(expand_targets(targets), host, executor, runtime, options, ctx.args)
    if as_json:
        click.echo(config.to_json(indent=2))
        return
    if not config.executors:
        _show_config(config, "")
        return
    click.echo(f"executors:   {', '.join(config.executor_names)}")
    click.echo(f"cache key:   {config.cache_key()}")
    click.echo("targets:")
    width = max(len(name) for name in config.named_targets) + 1
    for name, target in config.named_targets.items():
        click.echo(f"  {name + ':':<{width}} {target}")
    for spec in config.executors:
        click.echo(f"executor {spec.name}:")
        _show_config(config.executor_config(spec.name), "  ", host_name=spec.host.name)


def _show_config(config: CompilationConfig, indent: str, host_name: str | None = None) -> None:
    def line(text: str) -> None:
        click.echo(indent + text)

    named = {e.target: e.name for e in config.entries} if host_name is not None else {}

    def label(target: Target) -> str:
        name = named.get(target, str(target))
        return str(target) if name == str(target) else f"{target}  ({name})"

    line(f"targets:     {config}")
    line(f"host:        {config.host}" + (f"  ({host_name})" if host_name else ""))
    line(f"executor:    {config.executor}")
    line(f"runtime:     {config.runtime}")
    line(f"partitioner: {config.partitioner}")
    line(f"cache key:   {config.cache_key()}")
    for device in config.devices:
        line(f"device {device}:")
        line(f"  target:    {label(config.target_for_device(device))}")
        for rank, backend in enumerate(config.backends_for_device(device), start=1):
            line(f"  backend {rank}: {label(backend)}  (tuning key {backend.tuning_key()})")
        for special in config.specialized_targets_for_device(device):
            line(f"  specialised: {label(special)}")
    console().print(f"{indent}options:")
    infos = {i.name.replace("_", "-"): i for i in option_infos()}
    for name, value in config.options.to_dict().items():
        marker = "cache key" if infos[name].cache_key else "deployment only"
        line(f"  {name} = {_show(value)}  ({marker})")
