"""The session dev server answers with signoff's search attributes registered, and keeps its
state in a write-ahead-logged SQLite file (docs/temporal.md, "Dev server tuning")."""

import sqlite3

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

from signoff.devserver import SEARCH_ATTRIBUTES


async def test_search_attributes_registered(temporal_client):
    resp = await temporal_client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_client.namespace)
    )
    assert set(SEARCH_ATTRIBUTES) <= set(resp.custom_attributes)


async def test_its_database_file_is_write_ahead_logged(temporal_server, temporal_client):
    assert temporal_server.db_file is not None
    with sqlite3.connect(temporal_server.db_file) as db:  # the mode is a property of the file
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
