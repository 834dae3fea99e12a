"""Atomic single-file writes, safetensors/JSON reading, and the pid checks scratch names use.

Single files (``config.toml``, ``control``, exported ``.safetensors``) are written to a
temporary ``.NAME.PID-XXXX.tmp`` beside them, fsynced and moved into place with ``os.replace``;
``export`` removes stale ones (their process gone) of the file it writes. Every file and
directory is created with the user's umask (no 0600 temporaries). A write that fails (ENOSPC,
a read-only or missing path) raises ``WriteError``: one line with the path and the OS reason,
and the previous file is untouched. Loading never unpickles: weights come from safetensors,
everything else from JSON.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attnlab.errors import AttnlabError
from attnlab.regular_files import check_regular, read_bounded

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    from torch import Tensor


class WriteError(AttnlabError):
    """A file could not be written (no space, read-only, missing path): path + OS reason."""


def _write_error(path: Path, err: OSError) -> WriteError:
    reason = err.strerror or str(err)
    return WriteError(f"{path}: cannot write ({reason}); nothing was replaced")


def _scratch_suffix() -> str:
    """PID (to tell a live writer's temporaries from a dead one's) + randomness."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def _owner_alive(name: str) -> bool:
    """Whether another process whose PID is in a scratch name still runs (unparseable: no)."""
    match = re.search(r"(\d+)-[0-9a-f]{8}$", name)
    if match is None:
        return False
    pid = int(match.group(1))
    return pid != os.getpid() and pid_alive(pid)


def _write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` (tests replace this to simulate ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (must not exist) with the umask's mode, write, fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        _write_fd(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with suppress(OSError):  # not every platform/file system can fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def atomic_open(path: Path) -> Iterator[BinaryIO]:
    """Open a temp file beside ``path``; on success fsync + ``os.replace`` it into place.

    If the block raises, the temp file is removed and ``path`` is untouched. The file gets
    the user's umask (``0o666 & ~umask``), like any other file. An OSError -> WriteError.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{_scratch_suffix()}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        raise _write_error(path, err) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _write_error(path, err) from None
        raise


def remove_stale_temps(directory: Path, name: str) -> int:
    """Remove ``.NAME.*.tmp`` left in ``directory`` by writers that died; returns the count."""
    removed = 0
    with suppress(OSError):
        for entry in Path(directory).iterdir():
            ours = entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp")
            if ours and not _owner_alive(entry.name[: -len(".tmp")]):
                with suppress(OSError):
                    entry.unlink()
                    removed += 1
    return removed


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_open(path) as handle:
        _write_fd(handle.fileno(), data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, _json_text(obj))


def _json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def _tensor_bytes(tensors: dict[str, Tensor], metadata: dict[str, str] | None) -> bytes:
    from safetensors.torch import save as safetensors_bytes

    cpu: dict[str, Tensor] = {}
    storages: set[int] = set()
    for key, value in tensors.items():
        tensor = value.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages:  # a tied weight (embeddings = output layer): its own copy,
            tensor = tensor.clone()  # as safetensors refuses shared memory
        storages.add(storage)
        cpu[key] = tensor
    return safetensors_bytes(cpu, metadata=metadata)


def save_tensors(
    path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None
) -> None:
    """safetensors file, atomically (tensors are made contiguous CPU copies)."""
    atomic_write_bytes(path, _tensor_bytes(tensors, metadata))


def read_tensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors and string metadata of a safetensors file (never unpickles)."""
    from safetensors import safe_open

    try:
        check_regular(path)  # safetensors opens it itself: a FIFO would block that open
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except AttnlabError:
        raise
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise AttnlabError(f"{path}: not a readable safetensors file ({err})") from None
    return tensors, metadata


# The largest JSON file a run directory holds (meta.json carries the vocabularies and the
# tokenizers: a few MB for a 32k subword vocabulary); larger is not one attnlab wrote.
JSON_MAX_BYTES = 256 << 20


def read_json(path: Path) -> Any:
    """A JSON file of a run directory: a regular file (never a FIFO's blocking open) of at most
    JSON_MAX_BYTES; nesting too deep or a number of more than 4,300 digits is one error."""
    try:
        return json.loads(read_bounded(path, JSON_MAX_BYTES, "JSON file").decode("utf-8"))
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except json.JSONDecodeError as err:
        raise AttnlabError(f"{path}: invalid JSON ({err})") from None
    except UnicodeDecodeError as err:  # JSON is UTF-8: a damaged or foreign file
        raise AttnlabError(f"{path}: invalid JSON (not UTF-8 at byte {err.start})") from None
    except RecursionError:
        raise AttnlabError(f"{path}: invalid JSON (nested too deeply)") from None
    except ValueError as err:  # e.g. "Exceeds the limit (4300 digits) for integer string ..."
        raise AttnlabError(f"{path}: invalid JSON ({str(err).split(';')[0]})") from None
    except OSError as err:  # no permission
        raise AttnlabError(f"{path}: cannot read ({err.strerror})") from None


def jsonable(obj: Any) -> Any:
    """Metrics as plain JSON (non-finite floats become null)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def pid_alive(pid: int) -> bool:
    """Whether a process with this (logged, untrusted) pid runs on this host."""
    if not 0 < pid < 2**31:  # a logged pid is data: never signal a group or overflow
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True
    return True


# Files whose presence marks a run or study directory: an output is never written over a file
# inside one (``eval --refs RUN/events.jsonl`` would destroy the run's log).
RUN_MARKERS = ("events.jsonl", "study.json", "outcomes.json")
_SPECIAL_WRITE_LIMIT = 1 << 30  # what one write-through to a device or pipe may send


def _run_dir_holding(path: Path) -> Path | None:
    for folder in path.parents:
        if any((folder / marker).exists() for marker in RUN_MARKERS):
            return folder
        if (folder / "config.toml").is_file() and (folder / "checkpoints").is_dir():
            return folder
        if (folder / "meta.json").is_file() and (folder / "model.safetensors").is_file():
            return folder  # a checkpoint folder (RUN/checkpoints/best), also one copied out
    return None


def write_output(path: Path, data: bytes, flag: str = "--out") -> None:
    """Write a user-named output file, as coreutils would: a regular file or a new path is
    replaced atomically; a device, FIFO or socket is written through (no rename: the node
    stays); a symlink writes its target; a folder, and a file inside a run or study
    directory, are refused in one line. A failed write (ENOSPC, EPIPE) is a WriteError."""
    import stat

    given = Path(path)
    target = given.resolve() if given.is_symlink() else given
    try:
        info = os.stat(target)
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise _write_error(given, err) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise WriteError(f"{flag} {given}: is a folder; give a file name")
    if info is None or stat.S_ISREG(info.st_mode):
        holder = _run_dir_holding(target.absolute()) if info is not None else None
        if holder is not None:
            raise WriteError(
                f"{flag} {given}: is a file of the run or study directory {holder}; "
                "attnlab never writes an output over it — give another path"
            )
        atomic_write_bytes(target, data)
        return
    if len(data) > _SPECIAL_WRITE_LIMIT:
        raise WriteError(f"{flag} {given}: more than {_SPECIAL_WRITE_LIMIT:,} bytes to a device")
    try:  # a FIFO without a reader: ENXIO at once, never a hang
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
    except OSError as err:
        raise _write_error(given, err) from None
    try:
        os.set_blocking(fd, True)
        _write_fd(fd, data)
    except OSError as err:
        raise _write_error(given, err) from None
    finally:
        os.close(fd)


def write_output_text(path: Path, text: str, flag: str = "--out") -> None:
    write_output(path, text.encode("utf-8"), flag)


def save_output_tensors(
    path: Path, tensors: dict[str, Tensor], metadata: dict[str, str], flag: str = "--out"
) -> None:
    """A user-named .safetensors bundle (``export``, ``average``), written as ``write_output``
    writes any output: a symlink at its target, never over a file of a run directory
    (``--out RUN/checkpoints/best/model.safetensors --force`` replaced the run's weights)."""
    write_output(path, _tensor_bytes(tensors, metadata), flag)
