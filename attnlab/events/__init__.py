"""The run directory's append-only event log (``events.jsonl``): the contract between a
training process and anything that watches it (the CLI progress bar, the TUI, other tools).

One JSON object per line. Every event has ``type``, ``time`` (unix seconds) and ``step``.
In Python each type is a small dataclass (``Start``, ``Step``, ``Eval``, ``Sample``,
``Checkpoint``, ``Error``, ``Done``, ``Control``, ``Note``; ``Unknown`` for a type this
version does not know): ``EventLog.emit`` writes one, ``Event.from_json`` reads one back
(tolerantly: mistyped fields get their default, unknown fields are kept in ``extra`` and
written back after the known ones), ``to_json`` gives the object written to disk. Control
words are ``ControlCommand``, done reasons ``DoneReason``; ``run_status`` is the one
mapping from a done reason to a run's status.

| type / class       | fields (besides type/time/step), in the order written                  |
|--------------------|-------------------------------------------------------------------------|
| start  Start       | run_dir, name, config (TOML-shaped dict), params, device, resumed,      |
|                    | max_steps, roles (attention role -> variant as built), pid, host,       |
|                    | dropped_pairs, world_size (data-parallel processes)                     |
| step   Step        | loss (per target token), lr, tokens_per_s, tf_ratio, grad_norm,         |
|                    | elapsed_s, tokens, padding (mean padding fraction since the last step   |
|                    | event), world_size; under DDP loss and tokens_per_s are global          |
| eval   Eval        | split, n, loss, ppl, bleu, chrf, bleu_signature, chrf_signature,        |
|                    | bleu_lc, bleu_lc_signature, exact_match, alignment_accuracy (null if    |
|                    | no gold), bleu_by_length [{bucket, n, bleu}], best (bool), elapsed_s    |
| sample Sample      | index, src, ref, hyp (tokens), attention (hyp_len x src_len floats),    |
|                    | normalisation (optional; absent = softmax), attention_file (optional:   |
|                    | a long map's file under RUN/samples/, attention null; runs.sample_maps) |
| checkpoint         | tag ("best" | "last"), path                                             |
|   Checkpoint       |                                                                         |
| error  Error       | message, kind ("nan" | "exception" | "oom" | "io")                      |
| done   Done        | reason (DoneReason), best (metrics), elapsed_s, tokens_per_s            |
| control Control    | command (ControlCommand "pause" | "resume"): the trainer acknowledged   |
| note   Note        | message: a one-line notice (torch.compile failed: training goes on)     |

Fields are additive: a field this version does not know is kept in the event's ``extra``
and written back after the known ones; a known field missing from an older line reads as its
default. ``eval``'s interpretability fields are optional (written only when the writer gave
them, so older lines write back unchanged): aer (null if no gold; after
alignment_accuracy), attention_entropy ({role: [[mean entropy in nats per head] per
layer]}) and, with gold, alignment_accuracy_by_layer (both after bleu_by_length).

Writers append whole lines and flush, so a reader that sees a partial last line can wait for
the newline. ``EventReader`` is the one reader (the CLI's ``attnlab runs``, the run list and the
lab all use it): it reads from a byte offset, leaves a last line without its newline for the next
read, skips and counts malformed lines (invalid UTF-8, not JSON, not an object, no string
``type``, no integer ``step``), drops fields of the wrong type, and never raises on file content.
It returns the checked JSON objects (dicts: ``read_events``, ``read_event_log``, ``iter_events``);
``typed``, ``read_typed_log`` and ``iter_typed_events`` give the typed events built from them.

Modules: ``fields`` (the table of field types and its checker), ``words`` (control commands,
done reasons, run statuses), ``typed_events`` (the event dataclasses), ``log`` (writer and reader).
A new event field goes in its dataclass (``typed_events``) and in ``fields.FIELD_TYPES``.
"""

from attnlab.events.fields import FIELD_TYPES, MAX_STEP, FieldType, check_event, parse_event_line
from attnlab.events.log import (
    EVENTS_FILE,
    MAX_PROBLEMS,
    EventLog,
    EventReader,
    NullEventLog,
    iter_events,
    iter_typed_events,
    read_event_log,
    read_events,
    read_typed_log,
    typed,
)
from attnlab.events.typed_events import (
    EVENT_CLASSES,
    EVENT_TYPES,
    OPTIONAL,
    Checkpoint,
    Control,
    Done,
    Error,
    Eval,
    Event,
    Note,
    Sample,
    Start,
    Step,
    Unknown,
    as_event,
    make_event,
)
from attnlab.events.words import (
    DONE_EXIT_CODES,
    DONE_STATUS,
    INTERRUPT_WORD,
    ControlCommand,
    DoneReason,
    RunStatus,
    UnknownControlCommand,
    exit_code,
    run_status,
)

__all__ = [
    "Checkpoint",
    "Control",
    "ControlCommand",
    "DONE_EXIT_CODES",
    "DONE_STATUS",
    "Done",
    "DoneReason",
    "EVENTS_FILE",
    "EVENT_CLASSES",
    "EVENT_TYPES",
    "Error",
    "Eval",
    "Event",
    "EventLog",
    "EventReader",
    "FIELD_TYPES",
    "FieldType",
    "INTERRUPT_WORD",
    "MAX_PROBLEMS",
    "MAX_STEP",
    "Note",
    "NullEventLog",
    "OPTIONAL",
    "RunStatus",
    "Sample",
    "Start",
    "Step",
    "Unknown",
    "UnknownControlCommand",
    "as_event",
    "check_event",
    "exit_code",
    "iter_events",
    "iter_typed_events",
    "make_event",
    "parse_event_line",
    "read_event_log",
    "read_events",
    "read_typed_log",
    "run_status",
    "typed",
]
