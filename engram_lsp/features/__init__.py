"""One LSP feature per module; each has ``register(server)`` and names its LSP method(s)."""
