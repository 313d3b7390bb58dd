"""The retrieval loop: named scoring signals (``signals``), the retrieval log (``log``), feedback
that moves confidence (``feedback``), salience from use (``salience``) and the usage report
(``report``). Sits beside ``lineage`` (layer 3): queries rank with it; it imports only the index,
tapes, fingerprints and the leaves. See ``docs/retrieval.md``."""
