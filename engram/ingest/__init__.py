"""Harness logs → tapes → index: the ``Ingestor`` (``ingestor.py``), the parse worker process
(``worker.py``), the file watcher behind ``engram watch`` (``watcher.py``) and ``engram record``
(``record.py``)."""
