"""Interactive access to running tasks: exec, port-forward and the HTTP proxy."""
