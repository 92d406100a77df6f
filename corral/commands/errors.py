"""Exit codes scripts can rely on, and how each failure maps to one.

====  =========================================================================
code  meaning
====  =========================================================================
0     done (``submit --wait``: the job SUCCEEDED)
1     refused or failed: the API said no (400, 404, 409, 422, 429...), or the job
      a command waited for ended FAILED or CANCELLED
2     usage: a wrong command line or an unreadable/invalid input file
4     authentication or permission: no token, a bad token (401), not allowed (403)
5     the server failed (5xx) or could not be reached
130   interrupted (Ctrl-C)
====  =========================================================================

A missing job, node or alert (404) is 1, not a code of its own: scripts and tests written
against the first ``corral`` commands already read a 404 as 1, and 3 stays unused so that
the other codes keep their meaning. The message says which (``corral show: 404: ...``).

The message goes to standard error as ``corral <command>: <what the API said>``;
standard output holds only the result, so ``--json`` output always parses.
"""

from __future__ import annotations

from corral.sdk import ApiError, ConfigurationError, ConnectionFailed, SpecError

OK = 0
FAILED = 1
USAGE = 2
AUTH = 4
UNAVAILABLE = 5
INTERRUPTED = 130


class UsageProblem(Exception):
    """A command-line value the command cannot use (exit 2), e.g. ``--quota H100``."""


class Refused(Exception):
    """What the command was asked cannot be done as things are (exit 1, as the API's own
    refusals), found before asking the API: e.g. a port-forward to a job not running."""


def exit_code(error: Exception) -> int:
    if isinstance(error, ApiError):
        if error.status in (401, 403):
            return AUTH
        return UNAVAILABLE if error.status >= 500 else FAILED
    if isinstance(error, ConnectionFailed):
        return UNAVAILABLE
    if isinstance(error, ConfigurationError):
        return AUTH
    if isinstance(error, SpecError | UsageProblem):
        return USAGE
    if isinstance(error, Refused):
        return FAILED
    return FAILED


def message(error: Exception) -> str:
    if isinstance(error, ConnectionFailed):
        return f"{error}; is it running? (make up)"
    return str(error)
