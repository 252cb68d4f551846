"""The commands' own machinery: what runs before a command starts (``keys``: its command line
checked against its schema)."""
