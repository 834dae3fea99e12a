"""Reading files that come from outside (run directories, corpora) without hanging or
reading without bound.

A FIFO blocks ``open()`` until a writer appears; ``/dev/zero`` never ends; a sparse 3 GB file
costs 3 GB to read whole. Everything attnlab reads from a run directory or a corpus is opened
here: non-blocking (a FIFO's ``open`` returns at once), then ``fstat`` on the open descriptor
(no window between check and use), and anything but a regular file is one ``error:`` line.
Reads take bounded sizes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attnlab.errors import AttnlabError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(AttnlabError):
    """The path exists but is not a regular file (a FIFO, a device, a folder, a socket)."""


class LineTooLong(AttnlabError):
    """A line longer than a reader's limit."""


def kind_of(mode: int) -> str:
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a regular file"


def not_regular(path: Path | str, mode: int) -> NotRegularFile:
    return NotRegularFile(
        f"{path}: is {kind_of(mode)}, not a regular file; attnlab reads only regular files"
    )


def check_regular(path: Path | str) -> os.stat_result:
    """``stat`` of ``path`` (links followed), refusing anything but a regular file.
    For readers that open the path themselves (safetensors); others use ``open_regular``."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info.st_mode)
    return info


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file (checked on the open
    descriptor: a FIFO never blocks the open). OSError as ``open`` raises it."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_regular(path, info.st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_prefix(path: Path | str, limit: int) -> bytes:
    """At most the first ``limit`` bytes of a regular file."""
    with open_regular(path) as handle:
        return handle.read(limit)


def read_bounded(path: Path | str, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; a larger one is one error."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise AttnlabError(f"{path}: larger than {limit:,} bytes, the most a {what} may be")
    return data


def bounded_lines(handle: BinaryIO, max_line: int) -> Iterator[bytes]:
    """The lines of ``handle`` (with their endings), each read with at most ``max_line + 1``
    bytes in memory: a longer one raises LineTooLong naming its 1-based number."""
    number = 0
    while True:
        line = handle.readline(max_line + 1)
        if not line:
            return
        number += 1
        if len(line) > max_line and not (len(line) == max_line + 1 and line.endswith(b"\n")):
            raise LineTooLong(f"line {number} is longer than {max_line:,} bytes")
        yield line
