"""The ``corral`` command's user-facing commands, one module per area, each a thin layer
over the SDK (``corral.sdk``): parse the arguments, make one or two SDK calls, render the
answer as a table for people or JSON for scripts (``output.py``). Exit codes: ``errors.py``."""
