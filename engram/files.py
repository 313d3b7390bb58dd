"""The one way Engram reads a user's file: ``read_text_file(path)``.

A span, a blame or a hover names a path the user (or an editor, or an agent) chose; it may be
anything the file system holds. Reading it whole, as ``Path.read_text`` does, lets ``/dev/zero``
grow the process until the kernel kills it, keeps a 2 GiB log resident, and blocks forever on a
FIFO nobody writes to. So a file is read only when

* it is a **regular file**: ``os.stat`` before opening (opening some devices has side effects),
  then ``fstat`` on the open descriptor, which was opened with ``O_NONBLOCK`` — a FIFO swapped in
  between the two cannot hang the open, and is refused by the second check;
* it holds at most ``max_bytes`` (default ``MAX_FILE_BYTES``, 16 MiB, or ``$ENGRAM_MAX_FILE_BYTES``):
  source files are far smaller, and an explain/blame of more text is not useful. The size is
  checked before reading and again while reading (a file that grows, or a ``/proc`` file whose
  size says 0), so no more than ``max_bytes + 1`` bytes are ever held.

A missing file raises ``FileNotFoundError`` (callers differ on what that means); every other
refusal raises ``UnreadableFile`` (an ``EngramError``, code ``unreadable-file``): the CLI prints
``Error: <file>: <why>`` and exits 1, the language server answers a JSON-RPC error carrying the
code. Text is decoded as UTF-8, undecodable bytes replaced, and newlines translated as Python's
text mode does (``\r\n`` and ``\r`` become ``\n``), as ``Path.read_text`` did.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engram.errors import BadSpan

MAX_FILE_BYTES = 16 * 1024 * 1024
ENV_MAX_FILE_BYTES = "ENGRAM_MAX_FILE_BYTES"
_CHUNK = 1 << 20


class UnreadableFile(BadSpan):
    """A path that is not a regular file, is too large, or cannot be read."""

    code = "unreadable-file"


def max_file_bytes() -> int:
    """``$ENGRAM_MAX_FILE_BYTES`` when it is a positive integer, else ``MAX_FILE_BYTES``."""
    raw = os.environ.get(ENV_MAX_FILE_BYTES, "").strip()
    try:
        value = int(raw)
    except ValueError:
        return MAX_FILE_BYTES
    return value if value > 0 else MAX_FILE_BYTES


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return f"is {name}, not a regular file"
    return "not a regular file"


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def _too_large(size: int | None, limit: int, shown: str) -> UnreadableFile:
    what = f"{_mb(size)}, " if size is not None else ""
    return UnreadableFile(
        f"file too large ({what}the limit is {_mb(limit)}; set {ENV_MAX_FILE_BYTES} to change it)",
        path=shown,
    )


def read_bytes_file(path: str | os.PathLike, max_bytes: int | None = None, *,
                    shown: str | None = None) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``); see the module doc."""
    limit = max_file_bytes() if max_bytes is None else max_bytes
    shown = shown if shown is not None else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as e:  # ValueError: an embedded NUL byte
        raise UnreadableFile(f"cannot read: {getattr(e, 'strerror', None) or e}", path=shown) from None
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(_kind(st.st_mode), path=shown)
    if st.st_size > limit:
        raise _too_large(st.st_size, limit, shown)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise UnreadableFile(f"cannot read: {e.strerror or e}", path=shown) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between the stat and the open
            raise UnreadableFile(_kind(st.st_mode), path=shown)
        if st.st_size > limit:
            raise _too_large(st.st_size, limit, shown)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            except BlockingIOError:  # not on a regular file; refuse rather than spin
                raise UnreadableFile("cannot read: the file would block", path=shown) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_large(None, limit, shown)
        return b"".join(chunks)
    except OSError as e:
        raise UnreadableFile(f"cannot read: {e.strerror or e}", path=shown) from None
    finally:
        os.close(fd)


def read_text_file(path: str | os.PathLike, max_bytes: int | None = None, *,
                   shown: str | None = None) -> str:
    """The text of the regular file ``path`` (UTF-8, bad bytes replaced); see the module doc.

    ``shown``: how the path appears in an error (default: as given).
    Raises ``FileNotFoundError`` when it does not exist, ``UnreadableFile`` otherwise.
    """
    text = read_bytes_file(path, max_bytes, shown=shown).decode("utf-8", errors="replace")
    if "\r" in text:  # newlines as Python's text mode reads them (``Path.read_text``)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def count_lines(text: str) -> int:
    """Lines as ``for line in file`` counts them (a last line without a newline counts)."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


__all__ = ["MAX_FILE_BYTES", "UnreadableFile", "count_lines", "max_file_bytes",
           "read_bytes_file", "read_text_file"]


def replace_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temp file beside it, fsynced, renamed over it),
    keeping an existing file's mode (0644 for a new one: these are the user's files, such as
    ``AGENTS.md`` or a harness's settings); missing parent directories are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.engram-{os.getpid()}.tmp")
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def fsync_dir(directory: Path | str) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem allows it)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
