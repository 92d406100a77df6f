"""The launcher's side of artifacts: answering nodes' uploads and downloads over the bus
(``server.py``, assembling uploads in ``staging.py``) and turning a succeeded job's task
outputs into its artifacts (``commit.py``)."""
