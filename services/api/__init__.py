"""The HTTP gateway: the public REST API (``/api/v1``)."""
