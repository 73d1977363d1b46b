"""`signoff contacts [--email ADDR] [--slack UID] | contacts confirm email|slack` (over HTTP, as the
key's user): your own contacts and their state. One you set here is pending until you confirm it
(the link mailed to the address, the "This is me" button DMed to the Slack id): nothing is sent
to it before (docs/channels.md, "Verified contacts"). ``confirm`` asks for a new confirmation
(at most SIGNOFF_VERIFY_MAX_PER_HOUR an hour). The operator's ``signoff users set`` sets one
verified."""

from __future__ import annotations

import argparse

from signoff.commands._client import add_client_options, emit, request, run_handler


def _shown(me: dict) -> str:
    lines = [f"{k}: {me[k]} ({me.get(k + '_state')})" if me.get(k) else f"{k}: -" for k in ("email", "slack")]
    for k, outcome in (me.get("verification") or {}).items():
        lines.append({"sent": f"a confirmation was sent to your {k}: follow it to verify it",
                      "limited": f"no confirmation was sent to your {k}: too many this hour (try later: "
                                 f"signoff contacts confirm {k})",
                      "unconfigured": f"no confirmation was sent to your {k}: this signoff does not send {k}"}
                     .get(outcome, f"{k}: {outcome}"))
    return "\n".join(lines)


def _contacts(args: argparse.Namespace) -> int:
    changes = {k: getattr(args, k) for k in ("email", "slack") if getattr(args, k) is not None}
    me = request(args, "PATCH", "/api/v1/users/me", json=changes) if changes else \
        request(args, "GET", "/api/v1/users/me")
    emit(args, me, _shown(me))
    return 0


def _confirm(args: argparse.Namespace) -> int:
    sent = request(args, "POST", "/api/v1/users/me/verify", json={"contact": args.contact})
    emit(args, sent, f"a confirmation was sent to your {args.contact}" if sent["verification"] == "sent" else
         f"this signoff does not send {args.contact}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("contacts", help="your email and Slack id (each verified or pending); set them")
    parser.add_argument("--email", help="your address (pending until you follow its confirmation; '' clears it)")
    parser.add_argument("--slack", help="your Slack member id (pending until you press \"This is me\"; '' clears it)")
    parser.set_defaults(handler=run_handler(_contacts))
    add_client_options(parser)
    sub = parser.add_subparsers(dest="contacts_command", metavar="SUBCOMMAND")
    confirm = sub.add_parser("confirm", help="send a new confirmation of a pending contact")
    confirm.add_argument("contact", choices=("email", "slack"))
    confirm.set_defaults(handler=run_handler(_confirm))
    add_client_options(confirm)
