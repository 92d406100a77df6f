"""The node agent: runs the task attempts assigned to its node as OS processes."""
