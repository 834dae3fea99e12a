"""torchrun as ``attnlab train --nproc N`` starts it: ``python -m attnlab.train.torchrun_entry
--standalone --nproc_per_node N -m attnlab train ...`` (torchrun's own arguments).

The same agent as ``python -m torch.distributed.run``, with one difference: when a rank
fails, torchrun raises ``ChildFailedError`` and Python prints it as a traceback plus a
table. Here a rank killed by a signal (``kill -9``, the OOM killer) is named in one
``error:`` line instead; a rank that exited with a code has said why itself (its own
``error:`` line), so nothing more is printed.
"""

from __future__ import annotations

import signal
import sys

# Exit code when a rank failed (the launcher passes on rank 0's own code when it has one).
FAILED_EXIT_CODE = 1


def describe_failure(rank: int, exitcode: int, pid: int, signal_name: str) -> str | None:
    """The ``error:`` line for a rank that ended the job, or None when it said why itself."""
    if exitcode >= 0:
        return None
    return (
        f"error: rank {rank} (pid {pid}) died of {signal_name}; the other ranks were stopped"
        " (resume from checkpoints/last with --resume)"
    )


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(sys.argv[1:] if argv is None else argv))
    except SignalException as err:  # e.g. its launcher died (PR_SET_PDEATHSIG): ranks stopped
        name = signal.Signals(err.sigval).name
        print(f"error: torchrun got {name}; its ranks were stopped", file=sys.stderr, flush=True)
        return 128 + int(err.sigval)
    except ChildFailedError as err:
        # A rank killed by a signal is the cause even when another rank, which lost it in a
        # collective, exited first: name the earliest signal death, if any.
        failures = sorted(err.failures.items(), key=lambda item: item[1].timestamp)
        for rank, failure in sorted(failures, key=lambda item: item[1].exitcode >= 0):
            line = describe_failure(rank, failure.exitcode, failure.pid, failure.signal_name())
            if line:
                print(line, file=sys.stderr, flush=True)
                break
        return FAILED_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
