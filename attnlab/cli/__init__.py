"""The ``attnlab`` command line (click). Every command has ``--help``.

One module per command group, each parsing its arguments and calling the engine:
``train`` (train), ``evaluate`` (eval, translate), ``generate`` (generate),
``inspect`` (heads, compare, average), ``data`` (data stats / show), ``runs`` (runs, export),
``study`` (study run / show), ``catalog`` (variants, decoders, presets), ``history``
(export-history, translate --at-step); ``common`` holds what they share, ``ct2`` the
CTranslate2 side of export and translate, ``significance`` compare's paired tests. A new
command goes into the module of its group, or into a new module with a ``COMMANDS`` tuple
listed in COMMAND_MODULES below.

Exit codes: 0 on success; 2 with one line ``error: ...`` on stderr for a user mistake
(AttnlabError, a bad flag or argument), never a traceback; 130 when training was
interrupted (Ctrl+C / SIGTERM; the ``last`` checkpoint is saved); 1 when training stopped on
an error (e.g. a non-finite loss). torch and the engine are imported inside the commands, so
``attnlab --help`` and the lab start quickly.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from attnlab import __version__
from attnlab.cli import catalog, data, evaluate, generate, history, inspect, runs, study, train
from attnlab.cli.common import one_line, say
from attnlab.errors import AttnlabError

# Each module's COMMANDS are added to the group (a click group such as ``data`` counts as one).
COMMAND_MODULES = (train, evaluate, generate, inspect, data, runs, study, catalog, history)


class AttnlabGroup(click.Group):
    """A click group whose ``main`` turns user mistakes into one line and exit code 2."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args, prog_name or "attnlab", complete_var, standalone_mode=False, **extra
            )
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.NoArgsIsHelpError as err:  # a group called bare: show its help
            click.echo(err.ctx.get_help() if err.ctx is not None else err.format_message())
            code = 0
        except click.UsageError as err:
            hint = f" (see {err.ctx.command_path} --help)" if err.ctx is not None else ""
            say(f"error: {one_line(err.format_message())}{hint}")
            code = 2
        except click.ClickException as err:
            say(f"error: {one_line(err.format_message())}")
            code = err.exit_code
        except AttnlabError as err:
            say(f"error: {one_line(str(err))}")
            code = 2
        except (click.Abort, KeyboardInterrupt):
            say("interrupted")
            code = 130
        if os.environ.get("WORLD_SIZE"):  # a data-parallel rank (torchrun)
            from attnlab.train.distributed import exit_worker, report_exit

            code = report_exit(code)
            if standalone_mode:
                exit_worker(code)
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(name="attnlab", cls=AttnlabGroup, invoke_without_command=True)
@click.version_option(__version__, prog_name="attnlab")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """attnlab: a terminal lab for attention in sequence-to-sequence models.

    With no command, opens the lab (the Textual app).
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        from attnlab.tui.app import run_app
    except ImportError as err:
        click.echo(
            f"the lab is not available in this installation ({err}); try attnlab --help", err=True
        )
        ctx.exit(1)
        return
    run_app()


for _module in COMMAND_MODULES:
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (also ``python -m attnlab``, how the lab starts training)."""
    from attnlab.allocator import retain_freed_memory

    retain_freed_memory()  # this process owns its allocator: decode/train steps reuse pages
    cli.main(args=argv, prog_name="attnlab")
