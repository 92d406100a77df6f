"""Artifacts: what jobs leave behind (their declared outputs) and what they read (their
inputs), as content-addressed blobs (``store.py``) described by manifests
(``manifest.py``), moved between nodes and the launcher over the bus (``transport.py``)."""
