"""The list of runs and one run's summary, from its config and its events (tolerates a run
still being written; never loads torch)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.config import load_toml
from attnlab.errors import AttnlabError
from attnlab.events import (
    EVENTS_FILE,
    Done,
    Error,
    Eval,
    RunStatus,
    Start,
    Step,
    read_typed_log,
    run_status,
)
from attnlab.runs.atomic import pid_alive
from attnlab.runs.rundir import CONFIG_FILE, run_dir_locked


@dataclass
class RunSummary:
    path: Path
    name: str
    task: str
    arch: str
    attention: str
    params: int
    steps: int
    best_bleu: float | None
    best_chrf: float | None
    best_exact_match: float | None
    tokens_per_s: float | None  # mean over the run's training time (older runs: last step's)
    wall_s: float | None
    status: str  # running | finished | interrupted | stopped | error | incomplete
    best_loss: float | None = None  # the lowest dev loss (a language model's score)
    skipped_lines: int = 0  # malformed lines of events.jsonl that were skipped
    warnings: list[str] = field(default_factory=list)  # one line each, for the user
    # A study's run (attnlab.study.listing): the study's and the cell's name; "" otherwise.
    study: str = ""
    cell: str = ""

    @property
    def listed_name(self) -> str:
        """How the lab lists it: ``RUN``, or ``STUDY/CELL-sN`` under its study."""
        return f"{self.study}/{self.path.name}" if self.study else self.path.name


def summarize_run(run_dir: Path) -> RunSummary:
    """One run's summary from its config and events (tolerates a run still being written)."""
    run_dir = Path(run_dir)
    raw, config_warning = _read_run_config(run_dir)
    data, model = _section(raw, "data"), _section(raw, "model")
    arch = str(model.get("arch", "rnn"))
    attention = _attention_text(arch, model, None)
    summary = RunSummary(
        path=run_dir,
        name=str(raw.get("name", run_dir.name)),
        task=str(data.get("task", "")),
        arch=arch,
        attention=attention,
        params=0,
        steps=0,
        best_bleu=None,
        best_chrf=None,
        best_exact_match=None,
        tokens_per_s=None,
        wall_s=None,
        status="running",
    )
    if config_warning:
        summary.warnings.append(config_warning)
    done_reason, errored, pid, host, started = None, False, None, "", False
    events, reader = read_typed_log(run_dir)
    for event in events:  # well-shaped; a mistyped field has its default
        summary.steps = max(summary.steps, event.step)
        if isinstance(event, Start):
            summary.params = event.params
            if event.roles:  # the variants as built (dec-self resolved)
                summary.attention = _attention_text(arch, model, event.roles)
            pid, host, started = event.pid, event.host, True
            done_reason, errored = None, False  # a resumed run starts over
        elif isinstance(event, Step):
            # The mean over training time; runs from before it was logged: the window's figure.
            summary.tokens_per_s = _given(
                event.mean_tokens_per_s, _given(event.tokens_per_s, summary.tokens_per_s)
            )
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
        elif isinstance(event, Eval):
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
            summary.best_bleu = _larger(summary.best_bleu, event.bleu)
            summary.best_chrf = _larger(summary.best_chrf, event.chrf)
            summary.best_exact_match = _larger(summary.best_exact_match, event.exact_match)
            summary.best_loss = _smaller(summary.best_loss, event.loss)  # lower is better
        elif isinstance(event, Error):
            errored = True
        elif isinstance(event, Done):
            done_reason = event.reason
            summary.tokens_per_s = _given(event.tokens_per_s, summary.tokens_per_s)  # the mean
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
    locked = run_dir_locked(run_dir) if done_reason is None and not errored else None
    if done_reason is not None:
        summary.status = str(run_status(done_reason))
    elif errored:
        summary.status = RunStatus.ERROR.value
    elif locked is not None:
        # The trainer's lock is the truth: held while it lives, dropped by the OS when it dies
        # (also before a "start" event, e.g. a process killed during set-up).
        summary.status = (RunStatus.RUNNING if locked else RunStatus.ERROR).value
    elif pid is not None and host == _hostname() and not pid_alive(pid):
        summary.status = RunStatus.ERROR.value  # the process died without "done" (killed)
    elif not started:
        # No lock file and no start event: nothing shows a trainer at work here.
        summary.status = RunStatus.INCOMPLETE.value
    # A last line without its newline is being written while the run runs; after, it is lost.
    truncated = bool(reader.pending) and summary.status != "running"
    warning = reader.warning(include_pending=truncated)
    summary.skipped_lines = reader.skipped + int(truncated)
    if warning:
        summary.warnings.append(warning)
    return summary


def _given(value: Any, before: Any) -> Any:
    """A logged figure, or the earlier one where this event has none."""
    return before if value is None else value


def _smaller(best: float | None, value: float | None) -> float | None:
    return value if value is not None and (best is None or value < best) else best


def _larger(best: float | None, value: float | None) -> float | None:
    return value if value is not None and (best is None or value > best) else best


def _attention_text(arch: str, model: dict[str, Any], built: dict[str, Any] | None) -> str:
    """The model column: the variant in every attention slot of the architecture, in slot
    order, joined by "/" unless all agree (``attnlab.nn.archs.ArchSpec``).

    ``built`` is the trainer's record of the variants it built (slot name -> variant);
    without one (older runs, a run not started yet) empty slots are resolved by the
    architecture's rule, asking the attention registry only when it is already loaded,
    because listing runs must not import torch.
    """
    from attnlab.naming import roles_text
    from attnlab.nn.archs import arch_spec, roles_if_loaded

    spec = arch_spec(arch)
    if spec is None:
        return str((built or {}).get("cross") or model.get("attention", ""))
    resolved = spec.resolve(_model_defaults(model), roles_if_loaded)
    variants = [str((built or {}).get(s.name) or resolved[s.key]) for s in spec.slots]
    return roles_text(variants, "/")


def _model_defaults(model: dict[str, Any]) -> dict[str, Any]:
    """A run's [model] table over the defaults (a key an older version did not write)."""
    from attnlab.config import ModelConfig

    defaults = {
        f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name != "attn_params"
    }
    return {**defaults, **model}


def _read_run_config(run_dir: Path) -> tuple[dict[str, Any], str]:
    """config.toml as a dict (empty when absent or unreadable) and a warning, never raising."""
    path = run_dir / CONFIG_FILE
    if not path.exists():  # (a FIFO or folder in its place is read, and named in a warning)
        return {}, ""
    try:
        return load_toml(path), ""
    except AttnlabError as err:
        return {}, str(err)
    except ValueError as err:  # tomllib decodes UTF-8 itself: UnicodeDecodeError
        return {}, f"{path}: cannot read it ({err})"


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def list_runs(root: Path) -> list[RunSummary]:
    """Every run directory directly under ``root`` (newest first)."""
    root = Path(root)
    if not root.is_dir():
        return []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = [
        d
        for d in entries
        if d.is_dir() and ((d / CONFIG_FILE).is_file() or (d / EVENTS_FILE).is_file())
    ]
    found.sort(key=_events_mtime, reverse=True)
    return [summarize_run(d) for d in found]


def _events_mtime(run_dir: Path) -> float:
    try:  # a run directory may be deleted while the list is built
        return (run_dir / EVENTS_FILE).stat().st_mtime
    except OSError:
        return 0.0
