"""The node's side of interactive access: exec into a task, port-forward to a task.

The API opens a stream on this node's subjects (``shared/interactive``); ``server.py``
checks it against the agent's own running attempts and starts a session:
``exec_session.py`` runs a command inside the task (``commands.py`` says how: the
sandbox helper's join mode, or the agent's own user on an unsandboxed node) on a pty or
pipes; ``forward_session.py`` connects to one of the task's ports on this machine.
``fds.py`` is the non-blocking reading and writing both share.
"""
