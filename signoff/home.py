"""SIGNOFF_HOME is private: the state folder and everything in it (the SQLite database, the
embedded Temporal server's database, which holds every run's inputs in plain text, the dev API
key, the secrets key) are readable by the user running signoff only."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

PRIVATE_UMASK = 0o077


def prepare_home(home: Path) -> Path:
    """Make ``home`` (0700) and tighten what an earlier, laxer version left in it (files 0600,
    folders 0700); from now on this process creates files for its user only (umask 077), the
    Temporal dev server it starts included."""
    os.umask(PRIVATE_UMASK)
    home.mkdir(parents=True, exist_ok=True)
    for path in [home, *home.rglob("*")]:
        try:
            info = path.lstat()
        except FileNotFoundError:  # gone meanwhile (a SQLite journal)
            continue
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
            continue
        wanted = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if stat.S_IMODE(info.st_mode) & ~wanted:
            path.chmod(stat.S_IMODE(info.st_mode) & wanted)
    return home


# ``signoff dev`` writes where it serves into its home while it runs, so that the client commands
# (and ``signoff users``) run from the same folder find it without exports.
DEV_RECORD = "dev.json"


def record_dev(home: Path, *, api_url: str, database_url: str, user: str) -> None:
    """Say that a ``signoff dev`` of this process serves ``api_url`` on ``database_url``."""
    path = home / DEV_RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "api_url": api_url, "database_url": database_url, "user": user}))
    tmp.replace(path)


def forget_dev(home: Path) -> None:
    """Take this process's record away (a record of another process is left alone)."""
    found = running_dev(home)
    if found is not None and found.get("pid") == os.getpid():
        (home / DEV_RECORD).unlink(missing_ok=True)


def running_dev(home: Path) -> dict[str, Any] | None:
    """The record of the ``signoff dev`` running on ``home``, or None (none there, or its process
    is gone: a killed ``signoff dev`` leaves its record behind)."""
    path = home / DEV_RECORD
    try:
        if path.stat().st_uid != os.getuid():  # only a record this user's signoff dev wrote
            return None
        found = json.loads(path.read_text())
        pid = int(found["pid"])
        str(found["api_url"]), str(found["database_url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if process_alive(pid) else None


def process_alive(pid: object) -> bool:
    """Whether ``pid`` names a running process (another user's counts; a zombie, an exited child
    not yet reaped, does not; 0 and negative pids, which name process groups, never do)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True
