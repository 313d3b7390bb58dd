"""Queries over the index: explain, lineage walks, search, windows."""
