"""The progress line of the commands that place a model (`compile`, `explain`, `bench`):
the phase, the units done of all, what it is on, the time spent and the time left, drawn
on stderr while stderr is a terminal, and nothing otherwise (pipes, logs, tests). And the
line an interrupted command ends with."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from tessera.cli._app import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from tessera.placement import ProgressEvent
    from tessera.placement.record import InterruptRecord



def progress_display() -> tuple[contextlib.AbstractContextManager[Any],
                                Callable[[ProgressEvent], None] | None]:
    """A live progress line on stderr and the callback that drives it; on anything but a
    terminal, an empty context and no callback."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    stderr = Console(stderr=True, highlight=False)
    if not stderr.is_terminal or stderr.is_dumb_terminal:
        return contextlib.nullcontext(), None
    bar = Progress(TextColumn("{task.fields[phase]:<9}"), BarColumn(bar_width=30),
                   TextColumn("{task.fields[count]:>9}"), TextColumn("{task.fields[times]}"),
                   TextColumn("{task.fields[detail]}"), console=stderr, transient=True)
    task = bar.add_task("placing", total=None, phase="", count="", times="", detail="")

    def update(event: ProgressEvent) -> None:
        bar.update(task, completed=event.done, total=event.total, phase=event.phase,
                   count=f"{event.done}/{event.total}" if event.total is not None else
                   (str(event.done) if event.done else ""),
                   times=_times(event.elapsed_s, event.left_s), detail=event.detail[:60])

    return bar, update


def interrupted_exit(ctx: click.Context, record: InterruptRecord, kept: str) -> None:
    """End a command whose search an interrupt stopped, after it showed the plan kept: one
    line on stderr, and the shell's status for Ctrl-C."""
    click.echo(f"interrupted during {record.phase.words}: {kept}; "
               "the search is not remembered, so the next compile searches again", err=True)
    ctx.exit(EXIT_INTERRUPTED)


def _times(elapsed: float, left: float | None) -> str:
    spent = _clock(elapsed)
    return f"{spent}, {_clock(left)} left" if left is not None else spent


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"
