"""What every `rankscope logs` verb shares: the input option, the reading with its progress line and
its stop signals, and the ``rankscope.logs.*`` JSON document printed on every exit."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any, Optional

import click

from rankscope.cli.progress import tty_progress
from rankscope.errors import RankscopeError
from rankscope.logs.reading import LogsDocument, Reading, document_data, stoppable_reading

HOST_FROM_FILENAME = click.option(
    "--host-from-filename",
    is_flag=True,
    help="Per-node log files (node7.log, node8.log): ranks without a host in their prefix "
    "get the file name up to its first dot as host.",
)

#: Keys of click's context meta: the signal that ended reading, whether the verb printed its JSON,
#: the reading under way (for the error document).
INTERRUPTED = "rankscope.logs.interrupted"
EMITTED = "rankscope.logs.json_written"
READING = "rankscope.logs.reading"


@contextlib.contextmanager
def reading_of(
    inputs: tuple[str, ...], host_from_filename: bool, show_progress: bool = True
) -> Iterator[Reading]:
    """The inputs to read, with a progress line on a terminal, erased when reading ends (or fails).

    Ctrl-C or SIGTERM while reading ends it at the next block: the verb reports what was read
    (a note says so) and exits 130 or 143 (the group's result callback).
    """
    progress = tty_progress(min_interval=0.25) if show_progress else None
    try:
        with stoppable_reading(inputs, host_from_filename, progress) as reading:
            click.get_current_context().meta[READING] = reading
            yield reading
            stop = reading.stop
            if stop is not None and stop.signum:
                click.get_current_context().meta[INTERRUPTED] = (stop.signum, stop.name)
    finally:
        if progress is not None:
            progress.clear()


def emit_json(document: LogsDocument, reading: Reading, error: Optional[RankscopeError] = None) -> None:
    """Print a ``rankscope.logs.*`` document with what was read, and the error the verb ends with,
    if any (its exit code is the command's)."""
    click.echo(json.dumps(document_data(document, reading, error), indent=2))
    click.get_current_context().meta[EMITTED] = True


def json_on_every_exit(verb: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """With ``--json``, a verb that ends in an error (nothing found, bad input) still prints one
    ``rankscope.logs.<verb>/1`` document: ``{"schema", "error": {"message", "hint", "exit_code"},
    "read"}`` (``read`` is null when reading never started), then exits with the error's code."""

    def wrap(command: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return command(*args, **kwargs)
            except RankscopeError as error:
                meta = click.get_current_context().meta
                if kwargs.get("as_json") and not meta.get(EMITTED):
                    from rankscope.logs.reading import failed_data

                    click.echo(json.dumps(failed_data(verb, error, meta.get(READING)), indent=2))
                raise

        return run

    return wrap
