"""The commands' own machinery: what runs before a command starts (``arguments``: its command
line in Hydra's shape; ``keys``: its overrides checked against its schema)."""
