"""Events: the lifecycle streams as server-sent events (one tail per API process, fanned
out in memory: ``hub.py``), and who may see which event (``scope.py``, which webhooks
share)."""
