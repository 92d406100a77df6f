"""A chaos run anyone can repeat (``python -m bench.chaos``): real crashes, one verdict.

It starts a private stack as ``make up`` does, with two simulated nodes (so a frozen
node's tasks have somewhere to move) and short loops, and drives a bounded run:
``--jobs`` small jobs submitted over the run while processes are killed at seeded
random moments. One ``--seed`` fixes everything the harness chooses (the jobs, the order
of the faults, the gaps between them, which node is hit), and is printed first, so a
failing run can be run again. What the stack does in between is not deterministic;
the seed makes a run repeatable in what it does, not in what Corral answers.

The parts, each in its own module:

- ``jobs``: what is submitted and what each job deserves (most succeed, some exit 3
  with no retries and deserve FAILED, some are gangs of two). Each task is a shell loop
  that appends ``start``, a heartbeat every 0.2 s and ``end`` to a ledger in its working
  directory. The submitter paces the jobs over the run with an ``Idempotency-Key`` each
  and retries every error, so a submit whose answer was lost is never doubled.
- ``faults``: a shuffled schedule that cycles through every kind of fault (each
  service, an agent, an agent frozen past its lease, NATS, NATS right after a burst of
  submits, the postmaster), and the hands that carry each one out.
- ``observers``: an SSE subscriber that reconnects with ``Last-Event-ID`` on any error,
  and a webhook receiver behind a subscription made through the API; both record each
  job's terminal event.
- ``ledger``: what the tasks themselves wrote: every live copy of every task, and when.
- ``verdict``: the judgement, one JSON line; ``drive`` ties the parts together.

Why the tasks keep their own ledger: Corral's records are what is being tested. A
double launch that Corral never noticed shows only in what the processes did, and a
job reported SUCCEEDED whose task never reached its end shows only there too.
"""
