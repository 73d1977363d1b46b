"""The protocol tests' harness: the app with a worker and two users (tests/integration/api/
conftest.py: harness), per module, and that app behind a real uvicorn server (``base``): the
official A2A and MCP clients speak real HTTP, streams included. On SQLite; a test whose subject
differs between the stores (a revoke that reaches a stream through the store's tail, a race)
is marked ``both_stores``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.integration.api.conftest import Harness, harness, serving


@pytest_asyncio.fixture(scope="module")
async def h(request, store_backend, tmp_path_factory, temporal_client) -> AsyncIterator[Harness]:
    async with harness(store_backend, tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]),
                       temporal_client) as hx:
        yield hx


@pytest_asyncio.fixture(scope="module")
async def base(h: Harness) -> AsyncIterator[str]:
    async with serving(h.app, force_exit=True) as url:
        yield url
