"""``PickledParts``: objects pickled one after another into a private temp file, read back in
order, then removed — how a streamed session's parts travel between the parse worker and the
ingest without either process holding the whole session."""

from __future__ import annotations

import os
import pickle


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
