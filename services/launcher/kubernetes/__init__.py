"""The Kubernetes launch driver: one Pod per task attempt, a headless Service per job.

- ``names``: object names, labels, pod DNS names, the rendezvous environment rewrite
- ``manifests``: Pod and Service manifests as plain dicts (pure, schema-validated in tests)
- ``mpi``: an MPI job generation's ssh Secret and what its pods mount and are told
- ``mpi_files``: the text of the hostfile, ssh and sshd configs (pure, driver-neutral)
- ``status``: what a pod's status means for its attempt (``TaskEnded`` for the exit-code table)
- ``tracking``: report each change once across watch reconnects and re-lists
- ``api``: the few API calls made, over kubernetes-asyncio, on plain JSON
- ``driver``: ``KubernetesDriver``, the ``LaunchDriver`` protocol
- ``settings``: ``CORRAL_KUBERNETES_*``

Only this package (inside the launcher) imports ``kubernetes_asyncio``.
"""
