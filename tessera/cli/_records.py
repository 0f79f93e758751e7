"""`tessera records`: the cost database, exported and imported as JSON lines so a team can
share measurements the way tuning logs are shared."""

from __future__ import annotations

import click

from tessera.cli._app import cli


@cli.group("records")
def records_group() -> None:
    """Share measured costs (the cost database)."""


@records_group.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
def records_export(path: str) -> None:
    """Write every cost record to PATH (JSON lines)."""
    from tessera.placement import CostDB

    db = CostDB()
    count = db.export(path)
    click.echo(f"exported {count} record(s) from {db.path} to {path}")


@records_group.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
def records_import(path: str) -> None:
    """Read cost records from PATH; a record never replaces a newer one."""
    from tessera.placement import CostDB

    db = CostDB()
    count = db.import_(path)
    click.echo(f"imported {count} new or newer record(s) into {db.path}")


@records_group.command("show")
def records_show() -> None:
    """Where the cost database is, and how many records it holds."""
    from tessera.placement import CostDB

    info = CostDB().describe()
    click.echo(f"{info['path']}: {info['records']} record(s), {info['plans']} searched plan(s)")
