"""GPU sharing on the node: reading each shared GPU's processes, and checking sharers."""
