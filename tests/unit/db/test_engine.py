"""The database URL's file, as the lab reads it before SQLite opens it."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.engine import sqlite_path


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:////srv/lab/lab.db", Path("/srv/lab/lab.db")),
        ("sqlite:///data/lab.db", Path("data/lab.db")),
        # SQLite's URI filenames: the file is the URI's path, never a folder named "file:".
        ("sqlite:///file:/srv/lab/lab.db?mode=ro&uri=true", Path("/srv/lab/lab.db")),
        ("sqlite:///file:/srv/my%20lab/lab.db?uri=true", Path("/srv/my lab/lab.db")),
        ("sqlite:///file:shared?mode=memory&uri=true", None),
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("postgresql+psycopg://lab@localhost/lab", None),
    ],
)
def test_the_file_of_a_sqlite_url(url: str, path: Path | None) -> None:
    assert sqlite_path(url) == path
