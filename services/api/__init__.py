"""The HTTP gateway: the public REST API (``/api/v1``)."""

# The CloudEvents ``source`` of every event the API records (a submit, a cancel, a request
# for the service that owns an entity); the outbox partitions and relays by it.
SOURCE = "corral/api"
