"""Models and artifacts: what jobs leave behind, named and versioned, and what jobs take in.

``routes.py`` serves ``/api/v1/models`` (list, read, register a version, a version's
lineage), ``/api/v1/jobs/{id}/artifacts`` and ``/api/v1/artifacts/{id}``; ``inputs.py``
pins a job's inputs at submit (the jobs slice's submission path calls it);
``registration.py`` decides a register; ``access.py`` who may read and register.
"""
