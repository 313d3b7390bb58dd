"""Tapes: immutable, content-addressed zstd JSONL files of events (the truth)."""

from engram.tape.reader import read_tape, tape_id_of
from engram.tape.writer import TapeRef, encode_events, write_tape

__all__ = ["TapeRef", "encode_events", "read_tape", "tape_id_of", "write_tape"]
