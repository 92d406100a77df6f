"""The launcher: turns placements into task attempts, and attempts' exits into job outcomes.

Two kinds of process: the launcher service (``python -m services.launcher``) owns the
job-level view; a node agent per machine (``python -m services.launcher.agent``) runs the
processes of the attempts assigned to its node.
"""
