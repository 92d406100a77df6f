"""Opening a stream to the node that runs the task.

The API asks the node on ``corral.interactive.<node>.open`` (core NATS request/reply,
answered by its agent, or by the launcher for a node it runs through Kubernetes); the
node checks the request against its own attempts, opens its end and answers. The API's
end subscribes first, so nothing the node sends right after answering is lost.

The stream's id is derived from the session's id by a hash, never the id itself: the
session id is what lets its creator connect, and the stream's subjects are seen by the
node and the bus.
"""

from __future__ import annotations

import hashlib

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import ValidationError

from shared.errors import Conflict, CorralError, Forbidden, NotFound, TransientError
from shared.interactive.protocol import (
    OpenAnswer,
    OpenRequest,
    from_node_subject,
    open_subject,
    to_node_subject,
)
from shared.interactive.stream import StreamEnd


class NodeNotAnswering(TransientError):
    problem_type = "node-not-answering"
    title = "Node not answering"


class NodeRefused(CorralError):
    """The node answered, but could not open the stream; its log says more."""

    problem_type = "node-refused"
    status = 502
    title = "The node did not open the session"


def stream_id_of(session_id: str) -> str:
    return hashlib.sha256(b"corral interactive stream " + session_id.encode()).hexdigest()[:32]


async def open_stream(nc: Client, node_id: str, request: OpenRequest, timeout_s: float) -> StreamEnd:
    """The API's end of a stream the node has opened; raises what the node said otherwise
    (409 not running, 404 no such port, 403 refused, 502 failed, 503 not answering)."""
    end = StreamEnd(
        nc,
        send_subject=to_node_subject(node_id, request.stream_id),
        recv_subject=from_node_subject(node_id, request.stream_id),
    )
    await end.open()
    try:
        reply = await nc.request(open_subject(node_id), request.model_dump_json().encode(), timeout=timeout_s)
        answer = OpenAnswer.model_validate_json(reply.data)
    except (NatsTimeout, NoRespondersError, TimeoutError):
        await end.close("no answer")
        raise NodeNotAnswering(
            f"node {node_id} did not answer within {timeout_s:g} s: its agent is stopped, restarting or"
            " unreachable; try again in a moment"
        ) from None
    except ValidationError:
        await end.close("a malformed answer")
        raise NodeRefused(f"node {node_id} answered with something that is not an open answer") from None
    except BaseException:
        await end.close("the API gave up")
        raise
    if answer.ok:
        return end
    await end.close("refused")
    said = answer.error or "no reason given"
    match answer.reason:
        case "not_running":
            raise Conflict(f"node {node_id}: {said}")
        case "no_such_port":
            raise NotFound(f"node {node_id}: {said}")
        case "refused":
            raise Forbidden(f"node {node_id} refused: {said}")
        case _:
            raise NodeRefused(f"node {node_id} could not open the session: {said}")
