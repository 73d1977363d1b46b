"""SIGNOFF_HOME is private: the state folder and everything in it (the SQLite database, the
embedded Temporal server's database, which holds every run's inputs in plain text, the dev API
key, the secrets key) are readable by the user running signoff only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
