"""What portal routes ask FastAPI for: the signed-in user (``SignedIn``), the same user
with a checked CSRF token for a mutating request (``SignedInForm``), and the sessions.

The other slices' repositories and the event hub come through their own slices'
aliases (``JobsRepo``, ``ClusterRepo``, ``MaybeHub``...): the portal is a view over the
API's slices and reads them the way their routes do.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Form, Request

from services.api.portal.session import CSRF_FIELD, PortalUser, Sessions, check_csrf


async def sessions(request: Request) -> Sessions:
    found: Sessions = request.app.state.portal_sessions
    return found


PortalSessions = Annotated[Sessions, Depends(sessions)]


async def signed_in(request: Request, sessions: PortalSessions) -> PortalUser:
    return await sessions.user(request)


SignedIn = Annotated[PortalUser, Depends(signed_in)]


async def signed_in_form(
    request: Request, user: SignedIn, csrf_token: Annotated[str | None, Form(alias=CSRF_FIELD)] = None
) -> PortalUser:
    check_csrf(request, user, csrf_token)
    return user


SignedInForm = Annotated[PortalUser, Depends(signed_in_form)]
