"""Flows from SIGNOFF_FLOWS_DIR: loaded at start and kept in sync (new files added, changed
files stored as a new version, removed files deleted). They are owned by the built-in user
``signoff`` and every user may run them. The flow id is the file name without extension."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from signoff.engine.access import PUBLIC_OWNER_NAME
from signoff.engine.errors import FlowInvalid
from signoff.engine.settings import Settings
from signoff.engine.store.base import Store

from signoff.api.errors import SignoffError
from signoff.api.flowspec import parse_body, validate_spec

log = logging.getLogger("signoff.api")

SUFFIXES = {".json": "application/json", ".yaml": "application/yaml", ".yml": "application/yaml"}


def flow_id_for(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", path.stem)[:200] or "flow"


async def public_owner_id(store: Store) -> str:
    user = await store.get_user_by_name(PUBLIC_OWNER_NAME)
    if user is None:
        try:
            user = await store.create_user(PUBLIC_OWNER_NAME)
        except Exception:  # another replica created it first
            user = await store.get_user_by_name(PUBLIC_OWNER_NAME)
            if user is None:
                raise
    return user.id


async def sync_flows_dir(store: Store, settings: Settings, owner_id: str) -> dict[str, list[str]]:
    """Returns {"added", "updated", "removed", "invalid"} flow ids."""
    report: dict[str, list[str]] = {"added": [], "updated": [], "removed": [], "invalid": []}
    folder = settings.flows_dir
    if folder is None or not Path(folder).is_dir():
        return report
    seen: set[str] = set()
    for path in sorted(Path(folder).iterdir()):
        if path.suffix.lower() not in SUFFIXES or not path.is_file():
            continue
        fid = flow_id_for(path)
        seen.add(fid)
        try:
            spec = validate_spec(parse_body(path.read_bytes(), SUFFIXES[path.suffix.lower()]), settings)
        except (FlowInvalid, SignoffError) as e:
            problems = getattr(e, "problems", None) or e.message
            log.warning("flow %s is not valid, skipped: %s", path, problems)
            report["invalid"].append(fid)
            continue
        existing = await store.get_flow(fid)
        if existing is not None and existing.owner_id != owner_id:
            log.warning("flow id %s from %s is taken by an uploaded flow; skipped", fid, path)
            report["invalid"].append(fid)
            continue
        if existing is not None and existing.spec == spec:
            continue
        await store.save_flow(owner_id, spec["name"], spec, flow_id=fid)
        report["updated" if existing else "added"].append(fid)
    for flow in await store.list_flows(owner_id):
        if flow.owner_id == owner_id and flow.id not in seen:
            await store.delete_flow(flow.id)
            report["removed"].append(flow.id)
    if any(report.values()):
        log.info("flows from %s: %s", folder, report)
    return report
