"""Export: one checkpoint as one ``.safetensors`` file.

Its metadata holds JSON strings under ``attnlab.config``, ``attnlab.dataset``,
``attnlab.metrics`` (+ ``attnlab.step``, ``attnlab.version``, ``attnlab.params``,
``attnlab.format``).
"""

from __future__ import annotations

import json
from pathlib import Path

from attnlab import __version__
from attnlab.errors import AttnlabError
from attnlab.runs.atomic import remove_stale_temps, save_output_tensors
from attnlab.runs.checkpoints import EXPORT_FORMAT, META_FILE, checkpoint_dir, resolve_or_none
from attnlab.runs.loading import check_weights_fit, model_from_meta, read_checkpoint


def default_export_path(run_dir: Path, which: str) -> Path:
    """Where ``export`` writes when no ``--out`` is given (the lab's default too)."""
    return Path("exports") / f"{Path(run_dir).name}-{which}.safetensors"


def export_source(run_dir: Path, which: str) -> tuple[Path, str]:
    """The checkpoint directory an export of ``which`` reads, and what it is: ``best``,
    ``last`` (also when ``best`` was asked for but the run has none yet) or ``checkpoint``
    (``run_dir`` is itself a checkpoint directory)."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise AttnlabError(
            f"{run_dir}: is a file; export takes a run directory or a checkpoint directory "
            "(an exported .safetensors file is already self-contained)"
        )
    directory = checkpoint_dir(run_dir, which)
    if resolve_or_none(directory) is not None:
        return directory, which
    if which == "best" and resolve_or_none(checkpoint_dir(run_dir, "last")) is not None:
        return checkpoint_dir(run_dir, "last"), "last"
    if (run_dir / META_FILE).exists():  # a FIFO there is named by the reader
        return run_dir, "checkpoint"
    raise AttnlabError(f"{run_dir}: no {which} checkpoint to export")


def export_checkpoint(
    run_dir: Path, out_file: Path, which: str = "best", force: bool = False
) -> Path:
    """One self-contained ``.safetensors`` file: weights + JSON metadata (config, vocabularies,
    tokenizers, metrics). ``which`` = best | last; ``best`` falls back to ``last`` if absent.
    An existing ``out_file`` is replaced only with ``force``; the file appears whole or not
    at all, and stale temporaries of earlier killed exports to it are removed."""
    run_dir = Path(run_dir)
    out_file = Path(out_file)
    if out_file.suffix != ".safetensors":
        raise AttnlabError(f"{out_file}: the export file name must end in .safetensors")
    if out_file.is_dir():
        raise AttnlabError(f"{out_file}: is a directory; give a .safetensors file name")
    if out_file.exists() and not force:
        raise AttnlabError(f"{out_file}: already exists; pass --force to replace it")
    directory, _tag = export_source(run_dir, which)
    tensors, meta = read_checkpoint(directory)
    # Refuse weights the model does not take: eval would refuse the exported file.
    check_weights_fit(*model_from_meta(meta, directory), tensors, directory)
    metadata = {
        "format": "pt",  # the convention other safetensors loaders check
        "attnlab.format": EXPORT_FORMAT,
        "attnlab.version": str(meta.get("attnlab_version", __version__)),
        "attnlab.config": json.dumps(meta["config"], ensure_ascii=False),
        "attnlab.dataset": json.dumps(meta["dataset"], ensure_ascii=False),
        "attnlab.metrics": json.dumps(meta.get("metrics", {}), ensure_ascii=False),
        "attnlab.step": str(meta.get("step", 0)),
        "attnlab.params": str(meta.get("params", 0)),
    }
    remove_stale_temps(out_file.parent, out_file.name)
    save_output_tensors(out_file, tensors, metadata)
    return out_file
