"""Reading a file a graph names (the graph itself, templates, examples): regular files only, bounded.

Pure apart from reading the one file asked for; no network.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NotRegularFile", "TooLargeFile", "read_regular_file"]


class NotRegularFile(OSError):
    """A path that names a directory, a FIFO, a device or a socket (str(): what it is)."""


class TooLargeFile(OSError):
    """A regular file larger than the limit it was read with."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, refusing anything else at once.

    Opened without blocking (a FIFO would otherwise wait for a writer forever) and checked on the
    open descriptor, so a file swapped after a first look cannot slip through.

    Raises:
        FileNotFoundError: nothing at `path`.
        OSError: not a regular file (``NotRegularFile``), larger than `limit` (``TooLargeFile``), unreadable.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise NotRegularFile("a directory") from None
    except NotADirectoryError:
        raise FileNotFoundError(str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(next((name for test, name in _KINDS if test(info.st_mode)), "a special file"))
        if info.st_size > limit:
            raise TooLargeFile(info.st_size)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:  # grew while being read
        raise TooLargeFile(len(raw))
    return raw
