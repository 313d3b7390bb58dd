"""``PickledParts``: objects pickled one after another into a private temp file, read back in
order, then removed — how a streamed session's parts travel between the parse worker and the
ingest without either process holding the whole session. ``SpillFile``: bytes kept in a private
temp file instead of memory, read back by offset (the ingest cache's lines and fingerprints past
what it holds in memory). ``LinesFile``: a tape's lines by offset in a file, written by the parse
worker and read by the ingest."""

from __future__ import annotations

import array
import bisect
import os
import pickle
import tempfile
from collections.abc import Mapping


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
        view[:] = self.read(pos, len(view))

    def close(self) -> None:
        self._f.close()


class LinesFile(Mapping):
    """Lines by offset (``{offset: line}`` as a read-only mapping), the lines kept in a file rather
    than in memory, handed from the process that writes them to one that reads them: in the parse
    worker a streamed session's lines that the lineage pass reads (``create``, ``add``, ``finish``),
    in the ingest the ingest cache's lines of that tape. The file is private (0600) and created
    exclusively in ``directory``; what is held is where each line lies (three int64 a line). It
    pickles as its path and that index; ``adopt`` (in the reader) opens it and removes its name —
    the open file then holds it, and nothing is left behind — and ``discard`` removes it unread."""

    def __init__(self, path: str, offs=None, pos=None, lens=None):
        self.path = path
        self.offs = array.array("q", offs or ())
        self.pos = array.array("q", pos or ())
        self.lens = array.array("q", lens or ())
        self.size = sum(self.lens)
        self._w = self._r = None
        self._order: list[int] | None = None   # index order by offset (``finish``)

    @classmethod
    def create(cls, directory, name: str) -> LinesFile:
        made = cls(os.path.join(str(directory), name))
        fd = os.open(made.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made._w = os.fdopen(fd, "wb")
        return made

    def add(self, ofs: int, line: bytes) -> None:
        """Append the line at ``ofs`` (offsets in any order, each once)."""
        self._w.write(line)
        self.offs.append(ofs)
        self.pos.append(self.size)
        self.lens.append(len(line))
        self.size += len(line)

    def finish(self) -> LinesFile:
        """The lines are all written: the file closed, the index sorted by offset."""
        if self._w is not None:
            self._w.close()
            self._w = None
        order = sorted(range(len(self.offs)), key=self.offs.__getitem__)
        self.offs = array.array("q", (self.offs[i] for i in order))
        self.pos = array.array("q", (self.pos[i] for i in order))
        self.lens = array.array("q", (self.lens[i] for i in order))
        return self

    def __getstate__(self) -> dict:
        return {"path": self.path, "offs": self.offs, "pos": self.pos, "lens": self.lens}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["offs"], state["pos"], state["lens"])

    def adopt(self) -> LinesFile:
        """Open the file to read it and remove its name (``OSError`` if it cannot be read)."""
        if self._r is None:
            self._r = open(self.path, "rb")
            try:
                os.unlink(self.path)
            except OSError:
                pass   # (closed by ``discard``, which removes it then)
        return self

    def _find(self, ofs) -> int:
        if not isinstance(ofs, int):
            return -1
        i = bisect.bisect_left(self.offs, ofs)
        return i if i < len(self.offs) and self.offs[i] == ofs else -1

    def __contains__(self, ofs) -> bool:
        return self._find(ofs) >= 0

    def __getitem__(self, ofs) -> bytes:
        i = self._find(ofs)
        if i < 0:
            raise KeyError(ofs)
        self.adopt()
        n = self.lens[i]
        out = os.pread(self._r.fileno(), n, self.pos[i])
        if len(out) != n:
            raise OSError(f"{self.path}: line at offset {ofs} not there")
        return out

    def __iter__(self):
        return iter(self.offs)

    def __len__(self) -> int:
        return len(self.offs)

    def discard(self) -> None:
        """Close the file and remove it (if its name is still there)."""
        for f in (self._w, self._r):
            if f is not None:
                f.close()
        self._w = self._r = None
        try:
            os.unlink(self.path)
        except OSError:
            pass
