"""Engram: provenance for agent-written code.

The core library. It never imports pygls, lsprotocol, torch or transformers at module load.
"""

__version__ = "0.1.0"
