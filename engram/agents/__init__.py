"""What agents use beside explain: notes tied to code (``notes``), the briefing before work
(``brief``), the harnesses' hook configuration (``hooks``), the agent-instruction section of
``AGENTS.md`` (``agents_md``) and archival of old sessions (``archive``)."""
