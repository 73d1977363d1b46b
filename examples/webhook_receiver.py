"""A webhook receiver to try signoff's webhooks with: it checks each delivery's signature and
prints the event. Standard library only.

    python examples/webhook_receiver.py 9000 a-long-shared-secret

signoff dials webhooks through its egress policy, which keeps flows off this machine: start
signoff with ``SIGNOFF_EGRESS_ALLOW=127.0.0.1:9000 make dev`` to let them reach this receiver,
and register it with ``{"url": "http://127.0.0.1:9000/hook", "secret": "a-long-shared-secret"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20


def signature(secret: str, body: bytes) -> str:
    """What signoff sends in X-Signoff-Signature: an HMAC-SHA256 of the exact body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def make_handler(secret: str):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY:
                self.send_error(413)
                return
            body = self.rfile.read(length)
            if not hmac.compare_digest(self.headers.get("X-Signoff-Signature", ""), signature(secret, body)):
                print("refused a delivery with a wrong signature", flush=True)
                self.send_error(401)
                return
            event = json.loads(body)
            print(f"{self.headers.get('X-Signoff-Event')}: {json.dumps(event, sort_keys=True)}", flush=True)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:  # the events are the output
            pass

    return Handler


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    port, secret = int(argv[1]), argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(secret))
    print(f"listening on http://127.0.0.1:{port}/hook", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
