"""A deployment folder on disk: its configuration, keys, witnesses, backups; opening,
initialising and verifying it (DESIGN.md §5, the shells above `Pool`)."""
