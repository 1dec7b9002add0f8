"""Opening what lies in a broker's log.dir without following links: the one way the agent does it.

The agent reads only the broker's own files (``local_segments`` module doc, "Symlinks are refused").
A check (``Path.is_symlink``) followed by an open by path is a race: the name can become a link
between the two. So every open here *is* the check (issue 36):

* a partition directory is opened with ``O_DIRECTORY | O_NOFOLLOW`` (``open_partition_dir``) and
  its files are opened relative to that descriptor (``dir_fd``) with ``O_NOFOLLOW``: a directory
  replaced by a link after it was listed fails its own open (``ELOOP``/``ENOTDIR``), never reads
  through the link;
* a checkpoint file of log.dir (``replication-offset-checkpoint``, ``log-start-offset-checkpoint``:
  ``read_log_dir_file``) is opened relative to a descriptor of the log.dir, with ``O_NOFOLLOW`` and
  ``O_NONBLOCK`` (a FIFO does not block the open), must be a regular file (``fstat``: not
  ``/dev/zero``, a FIFO, a socket), and is read up to :data:`MAX_CHECKPOINT_BYTES` only (a larger
  one is refused, not read on). The configured log.dir itself may be a link (a mount point's alias).

A checkpoint refused raises ``CorruptCheckpointError`` (the readers already skip an unreadable
checkpoint, logged) whose message names the path and why, never the file's contents.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from tiered_kafka.errors import CorruptCheckpointError

#: the most bytes a checkpoint file of log.dir may hold: a line per partition (topic of at most 249
#: characters, two numbers) for 100,000 partitions fits in 27 MB
MAX_CHECKPOINT_BYTES = 32 * 2**20

_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_partition_dir(directory: Path) -> int:
    """A descriptor of the partition directory ``directory``, opened without following a link as its
    last component (module doc); the caller closes it. ``OSError`` as ``os.open`` raises it:
    ``ENOENT`` gone, ``ELOOP`` a symbolic link, ``ENOTDIR`` not a directory."""
    return os.open(directory, _NOFOLLOW_DIR)


def open_in_dir(dir_fd: int, name: str) -> int:
    """``name`` opened read-only relative to ``dir_fd``, without following a link (``ELOOP``) and
    without blocking on a FIFO; the caller closes it."""
    return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)


def read_log_dir_file(log_dir: Path, name: str, limit: int = MAX_CHECKPOINT_BYTES) -> bytes | None:
    """The bytes of ``log_dir/name``, None when it is absent (module doc: no link followed, a regular
    file only, at most ``limit`` bytes)."""
    shown = log_dir / name
    try:
        dir_fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # log.dir itself may be a link
    except FileNotFoundError:
        return None
    try:
        fd = open_in_dir(dir_fd, name)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CorruptCheckpointError(f"{shown} is a symbolic link: refused (the agent reads only the broker's own files)") from None
        raise
    finally:
        os.close(dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CorruptCheckpointError(f"{shown} is not a regular file: refused")
        if info.st_size > limit:
            raise CorruptCheckpointError(f"{shown} holds {info.st_size} bytes, more than the {limit} a checkpoint may: refused")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while read: a checkpoint is replaced whole (by a rename), never appended to
                raise CorruptCheckpointError(f"{shown} holds more than the {limit} bytes a checkpoint may: refused")
        return b"".join(chunks)
    finally:
        os.close(fd)
