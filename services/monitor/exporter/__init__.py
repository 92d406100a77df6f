"""The GPU exporter: one per GPU machine, publishes heartbeats with GPU readings."""
