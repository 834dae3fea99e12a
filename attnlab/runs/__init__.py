"""Run directories: one module per concern, re-exported here so callers read
``from attnlab.runs import load_checkpoint`` whatever module holds it.

Layout of a run directory (and the module that owns each file)::

    RUN/config.toml                       the experiment (rundir; attnlab.config.dumps_toml)
    RUN/.lock                             flock'ed by the one process training the run
                                          (holds its pid; released by the OS when it dies; rundir)
    RUN/events.jsonl                      append-only event log (attnlab.events)
    RUN/control                           optional: one word written by a controller
                                          (pause | resume | save | stop; rundir)
    RUN/checkpoints/{best,last}/          written as a whole (checkpoints), read back (loading)
        model.safetensors                 weights (+ the step in its metadata)
        trainer_state.safetensors         last only: optimiser tensors, torch RNG state (+ step)
        trainer_state.json                last only: step, schedules, early stopping, data
                                          position (state)
        meta.json                         config, dataset meta (vocabularies, tokenizers), step,
                                          metrics, params, attnlab version
    RUN/checkpoints/step-<N>/             with train.keep_last = K > 0: model.safetensors +
                                          meta.json of the last save at step N, the K newest
                                          (``keep_step_checkpoint``; ``attnlab average``)
    RUN/attention_history/                with train.attention_history > 0: index.json and
                                          step-<8 digits>.safetensors maps (history)
    RUN/samples/step-<8 digits>.safetensors   sample maps too long for their event line, float16
                                          ``map.<sample index>`` (sample_maps)

Modules, lowest first (each imports only those above it):

- ``atomic``: atomic single-file writes, safetensors/JSON reading, pid checks.
- ``rundir``: creating and locking a run directory, its config and control files.
- ``checkpoints``: saving a checkpoint directory as a whole; the step copies.
- ``loading``: resolving, verifying and loading a checkpoint (no pickle).
- ``state``: trainer state for resume, and its checks against weights and config.
- ``export``: one checkpoint as one ``.safetensors`` file.
- ``listing``: the list of runs and each run's summary (never loads torch).
- ``history``: the attention history, written at each evaluation and read back (no torch).
- ``sample_maps``: long sample maps beside the events that name them (no torch).

A new file in the run directory goes in the module of its concern (a new per-run file:
``rundir``; a new file in a checkpoint: ``checkpoints`` to write it, ``loading`` to read it).
"""

from attnlab.events import EVENTS_FILE
from attnlab.runs.atomic import (
    WriteError,
    atomic_open,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    jsonable,
    pid_alive,
    read_json,
    read_tensors,
    remove_stale_temps,
    save_output_tensors,
    save_tensors,
    write_output,
    write_output_text,
)
from attnlab.runs.checkpoints import (
    CHECKPOINT_TAGS,
    CHECKPOINTS,
    EXPORT_FORMAT,
    FAULT_DELAY_ENV,
    META_FILE,
    MODEL_FILE,
    STATE_JSON,
    STATE_TENSORS,
    STEP_PREFIX,
    checkpoint_dir,
    keep_step_checkpoint,
    prepare_checkpoints,
    resolve_or_none,
    save_checkpoint,
    step_checkpoints,
)
from attnlab.runs.export import default_export_path, export_checkpoint, export_source
from attnlab.runs.listing import RunSummary, list_runs, summarize_run
from attnlab.runs.loading import (
    RUN_OR_CHECKPOINT,
    LoadedModel,
    check_single_step,
    check_weights_fit,
    load_checkpoint,
    load_checkpoint_data,
    model_from_meta,
    read_checkpoint,
    read_meta,
    resolve_checkpoint,
)
from attnlab.runs.rundir import (
    CONFIG_FILE,
    CONTROL_COMMANDS,
    CONTROL_FILE,
    LOCK_FILE,
    LOCK_WAIT_S,
    RunLock,
    check_new_run_dir,
    check_run_dir_free,
    lock_run_dir,
    new_run_dir,
    read_config,
    remove_unstarted_run,
    require_run_dir,
    run_dir_locked,
    write_config,
    write_control,
)
from attnlab.runs.state import (
    check_optimizer_state,
    check_resume_weights,
    has_resumable_checkpoint,
    keep_checkpoint_vocabularies,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_trainer_state,
)

__all__ = [
    "CHECKPOINTS",
    "CHECKPOINT_TAGS",
    "CONFIG_FILE",
    "CONTROL_COMMANDS",
    "CONTROL_FILE",
    "EVENTS_FILE",
    "EXPORT_FORMAT",
    "FAULT_DELAY_ENV",
    "LOCK_FILE",
    "LOCK_WAIT_S",
    "LoadedModel",
    "META_FILE",
    "MODEL_FILE",
    "RUN_OR_CHECKPOINT",
    "RunLock",
    "RunSummary",
    "STATE_JSON",
    "STATE_TENSORS",
    "STEP_PREFIX",
    "WriteError",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "write_output",
    "write_output_text",
    "check_new_run_dir",
    "check_optimizer_state",
    "check_resume_weights",
    "keep_checkpoint_vocabularies",
    "check_run_dir_free",
    "check_single_step",
    "check_weights_fit",
    "load_checkpoint_data",
    "checkpoint_dir",
    "default_export_path",
    "export_checkpoint",
    "export_source",
    "has_resumable_checkpoint",
    "jsonable",
    "keep_step_checkpoint",
    "list_runs",
    "load_checkpoint",
    "lock_run_dir",
    "model_from_meta",
    "new_run_dir",
    "optimizer_from_tensors",
    "optimizer_to_tensors",
    "pid_alive",
    "prepare_checkpoints",
    "read_checkpoint",
    "read_config",
    "read_json",
    "read_meta",
    "read_tensors",
    "read_trainer_state",
    "remove_stale_temps",
    "remove_unstarted_run",
    "require_run_dir",
    "resolve_checkpoint",
    "resolve_or_none",
    "run_dir_locked",
    "save_checkpoint",
    "save_output_tensors",
    "save_tensors",
    "step_checkpoints",
    "summarize_run",
    "write_config",
    "write_control",
]
