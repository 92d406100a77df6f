"""The scheduler: decides where pending jobs run (placements) and records why not."""
