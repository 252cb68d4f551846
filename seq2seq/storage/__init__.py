"""Files on disk: the run folder's names and lock, checksum manifests, a full disk in one line."""
