"""One npm build at a time in ``clients/vscode``: the extension's unit tests (``npm test``) and the
end-to-end test (``npm run package``) both write ``dist/extension.js`` (a development and a
production bundle), and with ``make test``'s workers (pytest-xdist) the two modules can run at once."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def npm_build_lock(client: Path):
    """Hold an exclusive lock for builds in ``client`` (a private file in the temp directory,
    named by the directory's path: two checkouts do not wait for each other)."""
    digest = hashlib.sha256(str(client.resolve()).encode()).hexdigest()[:16]
    fd = os.open(os.path.join(tempfile.gettempdir(), f"engram-npm-build-{digest}.lock"),
                 os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)
