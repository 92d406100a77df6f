"""Interactive streams between the API and a node: exec and port-forward over core NATS."""
