"""`GET /api/me`: who the caller is — its key's name and role, and the owner its runs
carry — so the page can say who is signed in and offer only what that role may do.

It only describes the caller; every other route still applies its own rule
(tunelab.server.roles), whatever a client makes of this answer.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab.keys import LOCAL_OWNER
from tunelab.server.roles import caller_of
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api", tags=["keys"], responses=error_responses(401))


class Me(BaseModel):
    name: str = Field(description=f"The key's name; {LOCAL_OWNER!r} for the server's own token.")
    role: str = Field(description="admin | member | viewer.")
    owner: str | None = Field(description="The `owner` a run this caller starts is given (the key's name); "
                                          "null for the server's own token, as for runs from `tunelab train`.")


@router.get("/me", response_model=Me)
def who_am_i(request: Request) -> Me:
    """The caller's key name, role and run owner."""
    caller = caller_of(request)
    return Me(name=caller.shown, role=caller.role, owner=caller.key_name)
