"""The user-facing side of Corral: the ``corral`` command and the local stack it runs."""
