"""Each task of a node in a sandbox of its own (README: "Security model").

``sandbox.py`` is the front: ``open_sandbox`` checks the machine once, ``Sandbox.prepare``
readies a task (``identities``: its uid; ``cpus``: its cores; ``gpus``: its devices;
``cgroups``: its limits) for the helper (``corral_sandbox.c``, built by ``helper``),
``Sandbox.take_down`` and ``forget`` undo it. ``Sandbox.join_argv`` runs one more command
inside a running task (an exec), with what ``joining`` reads of the task's processes.
"""
