"""Follow a run directory's ``events.jsonl`` and keep what the Train and Compare views draw.

Pure logic (no textual, no torch): a ``RunFollower`` is fed the events that
``attnlab.events.EventReader`` returns and accumulates the curves (train / dev loss,
dev BLEU / chrF / exact match against step), the latest step figures, the last eval's
samples, the log lines and the run's state. The Train view polls it on a timer; the tests
feed it a hand-written ``events.jsonl``. Malformed lines are skipped and reported in the log;
a run directory deleted (or replaced) while followed ends the following, as a failure.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.attention_map import NORM_SOFTMAX, NORMALISATIONS
from attnlab.errors import AttnlabError
from attnlab.events import EventReader
from attnlab.events.fields import parse_event_line
from attnlab.events.log import EVENTS_FILE, RESTART_NOTE
from attnlab.regular_files import read_prefix
from attnlab.train import events as ev

# States shown in the Train view's status line.
STARTING, RUNNING, PAUSED, FINISHED, STOPPED, FAILED = (
    "starting",
    "running",
    "paused",
    "finished",
    "stopped",
    "failed",
)


@dataclass
class Sample:
    """One logged sample translation with its cross-attention [hyp_len x src_len]."""

    index: int
    src: list[str]
    ref: list[str]
    hyp: list[str]
    attention: list[list[float]] | None = None
    normalisation: str = "softmax"  # how the map's rows are normalised (attnlab.attention_map)
    # A long map lives beside the events (attnlab.runs.sample_maps), read when it is shown.
    attention_file: str | None = None
    run_dir: Path | None = None

    @property
    def correct(self) -> bool:
        return self.hyp == self.ref

    def weights(self) -> Any:
        """The [T, S] map, inline or read from its file (AttnlabError for a damaged one)."""
        if self.attention is None and self.attention_file and self.run_dir is not None:
            from attnlab.runs.sample_maps import read_sample_map

            name, index = self.attention_file, self.index
            return read_sample_map(self.run_dir, name, index, self.hyp, self.src)
        return self.attention


@dataclass
class Curves:
    """Metric series against step; eval metrics are on a 0-100 scale like sacrebleu's BLEU."""

    train_step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    dev_loss: list[float] = field(default_factory=list)
    bleu: list[float] = field(default_factory=list)
    chrf: list[float] = field(default_factory=list)
    exact_match: list[float] = field(default_factory=list)  # percent
    bleu_by_length: list[dict[str, Any]] = field(default_factory=list)  # from the last eval
    # Mean attention entropy (nats, over layers × heads) per role, one value per eval step
    # (NaN where an eval carries no attention_entropy: runs written before it existed).
    entropy: dict[str, list[float]] = field(default_factory=dict)
    # role -> normalisation of the roles that are not softmax (the eval's
    # attention_normalisation): a sub-stochastic role's entropy counts ∅ as an outcome; a
    # signed role has none
    entropy_kind: dict[str, str] = field(default_factory=dict)
    # The dev metrics the run's task declares (attnlab.data.task_registry.task_metrics; an
    # LM: loss, perplexity, bits_per_token), name -> one value per eval step; empty for the
    # sentence-pair tasks, whose BLEU / chrF / exact match are the series above.
    task: dict[str, list[float]] = field(default_factory=dict)

    def entropy_label(self, role: str) -> str:
        """The entropy plot's label of ``role``: ``cross (∅ counted)`` when sub-stochastic."""
        extra = " (∅ counted)" if self.entropy_kind.get(role) == "sub-stochastic" else ""
        return ENTROPY_LABELS[role] + extra

    def no_entropy(self) -> list[str]:
        """Roles without an entropy curve because their weights are signed, e.g. ``cross``."""
        return [ENTROPY_LABELS[r] for r in ENTROPY_ROLES if self.entropy_kind.get(r) == "signed"]


# Steps timed after the first step event before an ETA is given.
MIN_TIMED_STEPS = 5

ENTROPY_ROLES = ("cross", "enc_self", "dec_self")
ENTROPY_TITLE = "attention entropy (nats)"
ENTROPY_LABELS = {"cross": "cross", "enc_self": "enc self", "dec_self": "dec self"}


def mean_entropy(layers: Any) -> float:
    """Mean of a role's [[entropy per head] per layer] (NaN if nothing finite)."""
    values = [
        float(v)
        for heads in (layers if isinstance(layers, list) else [])
        for v in (heads if isinstance(heads, list) else [])
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]
    return sum(values) / len(values) if values else float("nan")


SENTENCE_METRICS_TITLE = "dev metrics (0-100)"


def metric_panel(c: Curves) -> tuple[str, tuple[float, float] | None, list[Any]]:
    """The Train view's metric plot: (title, bounds, series). A task that declares its
    metrics (an LM) plots them, less the loss (the loss plot has it), on their own scale;
    the sentence-pair tasks plot BLEU, chrF and exact match on 0-100."""
    if c.task:
        names = [n for n in c.task if n != "loss"] or list(c.task)
        labels = [metric_label(n) for n in names]
        series = [(label, c.eval_step, c.task[n]) for label, n in zip(labels, names, strict=True)]
        return "dev " + " / ".join(labels), None, series
    series = [
        ("BLEU", c.eval_step, c.bleu),
        ("chrF", c.eval_step, c.chrf),
        ("exact %", c.eval_step, c.exact_match),
    ]
    return SENTENCE_METRICS_TITLE, (0.0, 100.0), series


def metric_label(name: str) -> str:
    """A task-declared metric's short label (attnlab.study.metrics), e.g. ``bits/token``."""
    from attnlab.study.metrics import metric

    return metric(name).label


def _kind(value: Any) -> str:
    """A logged normalisation word; absent or unknown (a newer writer's) reads as softmax."""
    return value if value in NORMALISATIONS else NORM_SOFTMAX


def _num(value: Any, default: float = float("nan")) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _count(value: Any) -> int:
    """A non-negative int from a logged value (0 for anything that is not a finite number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0


def exact_match_percent(value: Any) -> float:
    """Exact match is logged as a fraction in [0, 1]; plots share BLEU's 0-100 scale."""
    number = _num(value)
    return number * 100.0 if number <= 1.0 else number


@dataclass
class RunFollower:
    """Incremental reader of one run's event log."""

    run_dir: Path
    offset: int = 0
    state: str = STARTING
    name: str = ""
    max_steps: int = 0
    params: int = 0
    device: str = ""
    world_size: int = 1  # data-parallel processes (attnlab train --nproc N)
    step: int = 0
    loss: float = float("nan")
    lr: float = float("nan")
    tokens_per_s: float = float("nan")
    elapsed_s: float = 0.0
    last_eval: ev.Eval | None = None  # the last dev eval
    best: dict[str, Any] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    checkpoints: dict[str, str] = field(default_factory=dict)  # tag -> path
    error: str = ""
    done_reason: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    curves: Curves = field(default_factory=Curves)
    log: list[str] = field(default_factory=list)
    deleted: bool = False  # the run directory vanished (or was replaced) while followed
    _pending_samples: list[Sample] = field(default_factory=list)
    _samples_step: int = -1
    # Clock anchors (event "time" is the child's time.time()): elapsed ticks from the start
    # event, and the step rate is measured from the session's first step.
    _anchor_time: float | None = None  # wall time of the last start/step event
    _anchor_elapsed: float = 0.0  # the run's elapsed seconds at that event
    _start_step: int = 0
    _start_elapsed: float = 0.0
    # The step rate is timed from the session's first step event (start-up and the first
    # step's warm-up are not a rate) to its last: (step, elapsed) of each end, and the
    # (step, seconds) of each dev evaluation seen (kept in the ETA).
    _timed_from: tuple[int, float] | None = None
    _timed_to: tuple[int, float] | None = None
    _evals_timed: list[tuple[int, float]] = field(default_factory=list)
    _reader: EventReader | None = None
    _dir_id: tuple[int, int] | None = None  # (device, inode) of the run directory once seen
    _warned: tuple[int, int, str] = (0, 0, "")  # (skipped, dropped, io error) last reported

    @property
    def skipped(self) -> int:
        """Malformed lines of events.jsonl skipped so far."""
        return self._reader.skipped if self._reader is not None else 0

    def warning(self) -> str:
        """The reader's warning (skipped lines, mistyped fields), or ""."""
        return self._reader.warning() if self._reader is not None else ""

    def poll(self) -> list[ev.Event]:
        """Read new events from disk and apply them; returns what was read (typed)."""
        if self.deleted:
            return []
        if self._reader is None:
            self._reader = EventReader(Path(self.run_dir), self.offset)
        events = ev.typed(self._reader.read())
        self.offset = self._reader.offset
        self.apply(events)
        self._report_bad_lines()
        self._check_directory()
        return events

    def _report_bad_lines(self) -> None:
        reader = self._reader
        assert reader is not None
        seen = (reader.skipped, reader.dropped, reader.io_error)
        if seen != self._warned and (reader.skipped or reader.dropped or reader.io_error):
            self.log.append(f"warning: {reader.warning()}")
        self._warned = seen

    def _check_directory(self) -> None:
        """Once seen, the run directory must stay the same directory: if it is deleted (or
        deleted and re-created, or events.jsonl is replaced by a shorter file) stop following."""
        try:
            st = os.stat(self.run_dir)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            now = None
        shrunk = self._reader is not None and self._reader.shrunk
        if self._dir_id is None and now is not None and not shrunk:
            self._dir_id = now  # first sight (a new run's child creates it after the lab starts)
            return
        if self._dir_id is None or (now == self._dir_id and not shrunk):
            return
        if now == self._dir_id and self._log_started_again():
            # The trainer noticed its log deleted and began a new one: follow that from its start.
            self._reader = EventReader(Path(self.run_dir), 0)
            self.offset = 0
            self.log.append(
                f"step {self.step:>6}  {EVENTS_FILE} was deleted while the run wrote it; "
                "following the new log the trainer started"
            )
            return
        self.deleted = True
        # (A directory re-created at once may get the same inode back: then the shorter log
        # is what tells.)
        what = "was deleted" if now is None else "was replaced (or its events.jsonl truncated)"
        message = f"run directory {self.run_dir} {what}; no longer following it"
        if not self.finished:  # a run that ended keeps its outcome
            self.error, self.state = message, FAILED
        self.log.append(f"step {self.step:>6}  {message}")

    def _log_started_again(self) -> bool:
        """Whether events.jsonl now opens with the trainer's restart note."""
        try:
            head = read_prefix(Path(self.run_dir) / EVENTS_FILE, 4096)
        except (OSError, AttnlabError):
            return False
        event, _why, _dropped = parse_event_line(head.split(b"\n", 1)[0])
        return (
            event is not None
            and event.get("type") == "note"
            and str(event.get("message", "")).startswith(RESTART_NOTE)
        )

    @property
    def finished(self) -> bool:
        return self.state in (FINISHED, STOPPED, FAILED)

    @property
    def progress(self) -> float:
        return min(self.step / self.max_steps, 1.0) if self.max_steps else 0.0

    def live_elapsed_s(self, now: float | None = None) -> float:
        """The run's elapsed seconds, ticking from the start event while it runs (frozen when
        paused or ended, or with no clock given)."""
        if self._anchor_time is None or self.finished:
            return self.elapsed_s
        if now is None or self.state == PAUSED:
            return self._anchor_elapsed
        return self._anchor_elapsed + max(now - self._anchor_time, 0.0)

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left: the remaining steps at this session's training rate plus the
        remaining dev evaluations at their mean duration; with ``now``, counted down from the
        last step event. None until a few steps were timed (``MIN_TIMED_STEPS`` after the
        first step event: one early step's rate said 1:13:02 for a five-minute run)."""
        if self._timed_from is None or self._timed_to is None or not self.max_steps:
            return None
        (s0, t0), (s1, t1) = self._timed_from, self._timed_to
        steps, seconds = s1 - s0, t1 - t0
        if steps < MIN_TIMED_STEPS or seconds <= 0:
            return None
        evals = [d for at, d in self._evals_timed if s0 <= at < s1]  # run between s0 and s1
        per_step = max(seconds - sum(evals), 0.0) / steps
        eta = max(self.max_steps - self.step, 0) * per_step
        every = self._eval_every()
        durations = [d for _, d in self._evals_timed]
        if every and durations:
            left = self.max_steps // every - self.step // every
            eta += max(left, 0) * sum(durations) / len(durations)
        if (
            now is not None
            and self._anchor_time is not None
            and not self.finished
            and self.state != PAUSED
        ):
            eta -= max(now - self._anchor_time, 0.0)
        return max(eta, 0.0)

    def _eval_every(self) -> int:
        train = self.config.get("train") if isinstance(self.config, dict) else None
        return _count(train.get("eval_every")) if isinstance(train, dict) else 0

    def apply(self, events: Sequence[ev.Event | dict[str, Any]]) -> None:
        for raw in events:
            event = ev.as_event(raw)  # hand-fed dicts get the reader's shape checks too
            if event is None or self.deleted:
                continue
            handler = getattr(self, f"_on_{event.type}", None)
            if handler is not None:
                handler(event)

    # -- one handler per event type (attnlab.events) --------------------------------------

    def _on_start(self, e: ev.Start) -> None:
        self.name = e.name or Path(e.run_dir or self.run_dir).name
        self.config = e.config
        for name in e.metrics or ():  # the metrics the run's task declares (an LM's)
            self.curves.task.setdefault(name, [])
        train = self.config.get("train")
        self.max_steps = _count(e.max_steps) or _count(
            train.get("max_steps") if isinstance(train, dict) else 0
        )
        self.params = _count(e.params)
        self.device = e.device
        self.world_size = max(1, _count(e.world_size))
        self.state = RUNNING
        self.step = self._start_step = e.step
        self._start_elapsed = self.elapsed_s  # a resumed run continues its clock
        self._timed_from = self._timed_to = None  # a resumed session is timed afresh
        self._set_anchor(e, self.elapsed_s)
        resumed = " (resumed)" if e.resumed else ""
        processes = f" × {self.world_size} processes" if self.world_size > 1 else ""
        self._log(
            e, f"start {self.name}{resumed}: {self.params:,} parameters on {self.device}{processes}"
        )

    def _on_step(self, e: ev.Step) -> None:
        self.step = e.step
        elapsed = _num(e.elapsed_s, float("nan"))
        if elapsed == elapsed:  # timed: the rate's window grows to this step
            if self._timed_from is None:
                self._timed_from = (e.step, elapsed)
            self._timed_to = (e.step, elapsed)
        self.loss = _num(e.loss)
        self.lr = _num(e.lr)
        # The run's mean over its training time (#44), the window's figure in older logs.
        self.tokens_per_s = _num(
            e.tokens_per_s if e.mean_tokens_per_s is None else e.mean_tokens_per_s
        )
        self.elapsed_s = _num(e.elapsed_s, self.elapsed_s)
        self._set_anchor(e, self.elapsed_s)
        if self.state == STARTING:
            self.state = RUNNING
        c = self.curves
        c.train_step.append(self.step)
        c.train_loss.append(self.loss)
        c.lr.append(self.lr)

    def _on_eval(self, e: ev.Eval) -> None:
        c = self.curves
        if e.split not in ("dev", "val", "valid"):
            figure = f"loss {_num(e.loss):.3f}" if c.task else f"BLEU {_num(e.bleu):.2f}"
            self._log(e, f"eval {e.split}: {figure}")
            return
        self.last_eval = e
        if self._timed_to is not None:  # how long it took since the step event before it
            took = _num(e.elapsed_s, float("nan")) - self._timed_to[1]
            if took == took and took >= 0:
                self._evals_timed.append((e.step, took))
        c.eval_step.append(e.step)
        c.dev_loss.append(_num(e.loss))
        for name, values in c.task.items():
            values.append(_num(e.metric(name)))
        c.bleu.append(_num(e.bleu))
        c.chrf.append(_num(e.chrf))
        c.exact_match.append(exact_match_percent(e.exact_match))
        c.bleu_by_length = list(e.bleu_by_length)
        grids = e.attention_entropy or {}
        kinds = e.attention_normalisation or {}
        c.entropy_kind.update({r: _kind(k) for r, k in kinds.items() if r in ENTROPY_ROLES})
        for role in ENTROPY_ROLES:
            if role in grids and role not in c.entropy:  # a role first seen: NaN before it
                c.entropy[role] = [float("nan")] * (len(c.eval_step) - 1)
            if role in c.entropy:
                c.entropy[role].append(mean_entropy(grids.get(role)))
        if e.best:
            self.best = {
                "step": e.step,
                "bleu": e.bleu,
                "chrf": e.chrf,
                "exact_match": e.exact_match,
                "loss": e.loss,
                **{name: e.metric(name) for name in c.task},
            }
        mark = " *best*" if e.best else ""
        if c.task:  # the task's own metrics, e.g. loss 1.234  perplexity 3.43  bits/token 1.78
            figures = "  ".join(f"{metric_label(n)} {_num(e.metric(n)):.3f}" for n in c.task)
            self._log(e, f"eval dev: {figures}{mark}")
            return
        self._log(
            e,
            f"eval dev: loss {_num(e.loss):.3f}  BLEU {_num(e.bleu):.2f}  "
            f"chrF {_num(e.chrf):.2f}  exact {exact_match_percent(e.exact_match):.1f}%{mark}",
        )

    def _on_sample(self, e: ev.Sample) -> None:
        sample = Sample(
            index=e.index,
            src=list(e.src),
            ref=list(e.ref),
            hyp=list(e.hyp),
            attention=e.attention,
            normalisation=_kind(e.normalisation),
            attention_file=e.attention_file,
            run_dir=Path(self.run_dir),
        )
        # Samples of one eval share its step: a new step starts a new table.
        if e.step != self._samples_step:
            self._samples_step = e.step
            self.samples = []
        self.samples.append(sample)

    def _on_control(self, e: ev.Control) -> None:
        # The step the trainer acknowledged at: newer than the last logged step (paused,
        # the header said 25/200 while the log said 46).
        self.step = max(self.step, e.step)
        if e.command == ev.ControlCommand.PAUSE:
            self._anchor_elapsed = self.live_elapsed_s(e.time)  # the clock stops
            self.state = PAUSED
        elif e.command == ev.ControlCommand.RESUME and self.state == PAUSED:
            self.state = RUNNING
            self._set_anchor(e, self._anchor_elapsed)  # ... and restarts here
        self._log(e, f"{e.command} acknowledged")

    def _on_checkpoint(self, e: ev.Checkpoint) -> None:
        self.step = e.step  # a stop saves at the step it reached
        self.checkpoints[e.tag] = e.path
        self._log(e, f"checkpoint {e.tag} saved")

    def _on_error(self, e: ev.Error) -> None:
        self.error = e.message or "training failed"
        self.state = FAILED
        self._log(e, f"ERROR ({e.kind}): {self.error}")

    def _on_done(self, e: ev.Done) -> None:
        reason = e.reason if e.reason is not None else ev.DoneReason.FINISHED
        self.done_reason = str(reason)
        self.step = e.step  # the final step, not the last logged one
        self.elapsed_s = _num(e.elapsed_s, self.elapsed_s)
        status = ev.run_status(reason)
        self.state = FAILED if self.error else _STATE_OF_STATUS.get(status, FINISHED)
        if e.best:
            self.best = dict(e.best)
        self._log(e, f"done: {self.done_reason}")

    def _set_anchor(self, e: ev.Event, elapsed: float) -> None:
        if e.time is not None:  # events written by the trainer carry their wall time
            self._anchor_time, self._anchor_elapsed = e.time, elapsed

    def _log(self, e: ev.Event, text: str) -> None:
        # Step, not wall-clock time: the log reads the same wherever and whenever it is replayed.
        self.log.append(f"step {e.step:>6}  {text}")


# The Train view's final state for a run status (a status this version does not know: FINISHED).
_STATE_OF_STATUS: dict[Any, str] = {
    ev.RunStatus.FINISHED: FINISHED,
    ev.RunStatus.STOPPED: STOPPED,
    ev.RunStatus.INTERRUPTED: STOPPED,
    ev.RunStatus.ERROR: FAILED,
}


def format_duration(seconds: float | None) -> str:
    """``75`` -> ``1:15``; ``3700`` -> ``1:01:40``; None -> ``--:--``."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "--:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
