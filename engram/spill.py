"""``PickledParts``: objects pickled one after another into a private temp file, read back in
order, then removed — how a streamed session's parts travel between the parse worker and the
ingest without either process holding the whole session. ``SpillFile``: bytes kept in a private
temp file instead of memory, read back by offset (the ingest cache's lines and fingerprints past
what it holds in memory)."""

from __future__ import annotations

import os
import pickle
import tempfile


class PickledParts:
    """A file created private (0600) and exclusive by ``create``; ``write(obj)`` appends one
    pickled object, ``parts()`` reads them back in order, ``discard()`` closes and removes it."""

    def __init__(self, path: str):
        self.path = path
        self._f = None

    @classmethod
    def create(cls, directory, name: str):
        path = os.path.join(str(directory), name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made = cls(path)
        made._f = os.fdopen(fd, "wb")
        return made

    def write(self, obj) -> None:
        pickle.dump(obj, self._f, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def parts(self):
        with open(self.path, "rb") as f:
            while True:
                try:
                    yield pickle.load(f)
                except EOFError:
                    return

    def discard(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class SpillFile:
    """Bytes appended to a private temp file and read back by place (``append`` → its offset,
    ``read``/``read_into``): for what one run would otherwise hold in memory however big its input.
    The file is ``tempfile.TemporaryFile`` of ``directory`` (0600, created exclusively, without a
    name where the system allows it — on Linux it never has one — else unlinked at once): nothing
    is left behind, even by a kill. Closed when ``close`` is called or when it is collected."""

    def __init__(self, directory) -> None:
        self._f = tempfile.TemporaryFile(dir=str(directory))
        self._fd = self._f.fileno()
        self.size = 0

    def append(self, *buffers) -> int:
        """Write ``buffers`` (bytes, or C-contiguous numpy arrays) one after another at the end;
        the offset of the first."""
        pos = self.size
        for b in buffers:
            view = memoryview(b).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(self._fd, view[done:], self.size + done)
            self.size += done
        return pos

    def read(self, pos: int, n: int) -> bytes:
        """The ``n`` bytes at ``pos``."""
        out = os.pread(self._fd, n, pos)
        while len(out) < n:
            more = os.pread(self._fd, n - len(out), pos + len(out))
            if not more:
                raise OSError(f"spill file: {n} bytes at {pos} not there")
            out += more
        return out

    def read_into(self, pos: int, buffer) -> None:
        """Fill ``buffer`` (a writable C-contiguous array) with the bytes at ``pos``."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view):   # read straight into it: no copy of its size
            n = os.preadv(self._fd, [view[done:]], pos + done)
            if not n:
                raise OSError(f"spill file: {len(view)} bytes at {pos} not there")
            done += n

    def close(self) -> None:
        self._f.close()
