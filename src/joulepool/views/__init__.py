"""What the CLI, the HTTP API and the dashboard show of a pool: one read side for all
surfaces, so they give the same figures for the same state (DESIGN.md §5)."""
