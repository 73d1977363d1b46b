"""The canonical JSON of the oversight record (docs/audit.md, "Canonical form"): keys sorted (by
code point), no whitespace, UTF-8, non-ASCII as is, i.e. ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)``. RFC 8785 in style; it differs from RFC 8785 only
in how floats are written and how keys outside the BMP sort, which a verifier reproduces
exactly by using this same function (``signoff audit verify``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical", "sha256_hex"]


def canonical(value: Any) -> bytes:
    """The canonical JSON of ``value``, as UTF-8 bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def sha256_hex(value: Any) -> str:
    """sha256 (hex) of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical(value)).hexdigest()
