"""A contact's confirmation page (``/verify/{token}``; engine/verify.py, docs/channels.md,
"Verified contacts").

``GET`` and ``HEAD`` only show who asked for which address (a mail scanner or a link preview
opens links and must verify nothing); the page's ``POST``, with its form token (random per
confirmation) and the same-origin check of every form, verifies the address in one write
(Store.use_contact_token: unused, unexpired, and still the user's address). A token that is
malformed or no confirmation's is one 404: the store is asked by its SHA-256. It needs no
signing in (it is opened from the mailbox) and opens no session.
"""

from __future__ import annotations

import hmac
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from signoff.engine import verify
from signoff.engine.errors import JobNotFound
from signoff.engine.models import ContactToken, User, utcnow

from signoff.api.pages.page import page_router, text
from signoff.api.pages.render import render
from signoff.api.pages.session import CsrfRefused, check_same_origin
from signoff.api.ratelimit import check_write

router = page_router()
MAX_FORM_BYTES = 4096  # the form holds its token alone


async def _found(request: Request, token: str) -> tuple[ContactToken, User | None]:
    store = request.app.state.store
    digest = verify.token_hash(token) if verify.well_formed(token) else None
    row = await store.get_contact_token(digest) if digest else None
    if row is None or digest is None or row.channel != "email" or not hmac.compare_digest(row.token_hash, digest):
        raise JobNotFound("No such confirmation")
    return row, await store.get_user(row.user_id)


def _note(row: ContactToken, person: User | None) -> str | None:
    """Why the confirmation cannot be used (None: it can)."""
    if person is None or person.email != row.address:
        return "This address is no longer the one this signoff user gave; nothing was confirmed."
    if row.used_at is not None:
        return "This confirmation was used already." + (" The address is verified." if person.email_verified else "")
    if row.expires_at <= utcnow():
        return "This confirmation has expired; ask signoff for a new one (nothing was confirmed)."
    return None


def _page(request: Request, token: str, row: ContactToken, person: User | None, status: int = 200, *,
          done: bool = False) -> Response:
    note = None if done else _note(row, person)
    response = render(request, "verify.html", status, what="address", person=person.name if person else "?",
                      address=row.address, usable=note is None, note=note, done=done, csrf=row.csrf,
                      expires_at=row.expires_at, form_url=f"/verify/{quote(token, safe='')}")
    response.headers["X-Robots-Tag"] = "noindex, nofollow"
    response.headers["Cache-Control"] = "no-store"
    return response


@router.api_route("/verify/{token}", methods=["GET", "HEAD"])
async def show(request: Request, token: str) -> Response:
    """Who asked for which address, and the button. Never verifies."""
    row, person = await _found(request, token)
    if request.method == "HEAD":
        return Response(status_code=200, headers={"Cache-Control": "no-store"})
    return _page(request, token, row, person)


@router.post("/verify/{token}")
async def confirm(request: Request, token: str) -> Response:
    row, person = await _found(request, token)
    check_same_origin(request, request.app.state.settings.public_url)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise StarletteHTTPException(413, f"The form is larger than {MAX_FORM_BYTES} bytes")
    check_write(request.app.state.write_buckets, row.user_id)
    form = await request.form(max_files=0, max_fields=10, max_part_size=MAX_FORM_BYTES)
    sent = text(form.get("csrf"))
    if not sent or not hmac.compare_digest(row.csrf.encode(), sent.encode()):
        raise CsrfRefused("This confirmation was not sent from its page; open the link in the mail and confirm there")
    verified = await request.app.state.store.use_contact_token(row.token_hash, utcnow())
    if verified is None:  # used, expired, or the address changed: what became of it
        row, person = await _found(request, token)
        return _page(request, token, row, person, 409)
    return _page(request, token, row, verified, done=True)
