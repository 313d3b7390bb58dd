"""Git-native provenance: which sessions are behind a commit, a branch or a pull request.

``git`` runs the user's own ``git`` (read-only, except the hook and trailers the user asked
for); ``diff`` turns first-parent patches into added lines; ``attribute`` gives those lines to
sessions with ``engram blame``'s rules, cached per commit in the index (``cache``); ``log``,
``review``, ``stats``, ``graph`` and ``agent_trace`` build the commands' results; ``hooks`` installs
the ``prepare-commit-msg`` hook that writes ``Engram-Session:`` trailers; ``prices`` and ``usage``
give tokens and their cost.
"""
