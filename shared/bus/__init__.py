"""The event bus: a small protocol, its NATS JetStream implementation, an in-memory one
for unit tests, and the consumer loop that turns handler outcomes into acks."""

from shared.bus.consumer import ConsumerSpec, DeadLetterSink, run_consumer
from shared.bus.protocol import Bus, ConsumerConfig, Delivery
from shared.bus.streams import STREAMS, StreamSpec

__all__ = [
    "STREAMS",
    "Bus",
    "ConsumerConfig",
    "ConsumerSpec",
    "DeadLetterSink",
    "Delivery",
    "StreamSpec",
    "run_consumer",
]
