"""The click group, error handling and shared console for every `tessera` command."""

from __future__ import annotations

import os
import shutil
import sys
import traceback
from typing import Any

import click
from rich.console import Console

from tessera.errors import InterruptedCompile, TesseraError

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


def console() -> Console:
    """A console at least 110 columns wide, so tables stay readable in pipes and CI logs."""
    width = max(shutil.get_terminal_size((110, 24)).columns, 110)
    return Console(highlight=False, width=width)


class TesseraGroup(click.Group):
    """Turns tessera errors into one clear line and exit code 2, and an interrupt (Ctrl-C)
    into one line and exit code 130; `--verbose` keeps the trace."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InterruptedCompile as err:
            _report(ctx, str(err), err)
            ctx.exit(EXIT_INTERRUPTED)
        except KeyboardInterrupt as err:
            _report(ctx, "interrupted: stopped before any plan was kept", err)
            ctx.exit(EXIT_INTERRUPTED)
        except TesseraError as err:
            _report(ctx, f"error: {err}", err)
            ctx.exit(EXIT_BAD_INPUT)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # e.g. `tessera targets | head`: the reader left, not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as err:  # a bug in tessera or a backend: still one line by default
            _report(ctx, f"internal error: {type(err).__name__}: {err} (rerun with --verbose)", err)
            ctx.exit(EXIT_INTERNAL)


def _report(ctx: click.Context, line: str, err: BaseException) -> None:
    if (ctx.obj or {}).get("verbose"):
        traceback.print_exception(err, file=sys.stderr)
    click.echo(" ".join(line.splitlines()), err=True)


@click.group(cls=TesseraGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--verbose", "-v", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="tessera")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """tessera: compile one ONNX model across several inference backends."""
    ctx.obj = {"verbose": verbose}
