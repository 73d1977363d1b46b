"""tests/fixtures/routes_once.py: what one app built serves the next, and an app that overrides
a dependency still gets its own build (its override applies)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

from tests.fixtures import routes_once


def who() -> str:
    return "real"


router = APIRouter()


@router.get("/who")
def whoami(name: str = Depends(who)) -> dict[str, str]:
    return {"name": name}


def app() -> FastAPI:
    a = FastAPI()
    a.include_router(router)
    return a


def test_the_second_app_reuses_the_first_apps_routes_and_an_override_still_applies() -> None:
    assert routes_once.INSTALLED
    before = sum(len(v) for v in routes_once._built.values())
    first, second = app(), app()
    assert TestClient(first).get("/who").json() == {"name": "real"}
    built = sum(len(v) for v in routes_once._built.values())
    assert built == before + 1
    assert TestClient(second).get("/who").json() == {"name": "real"}
    assert sum(len(v) for v in routes_once._built.values()) == built  # nothing built again

    overridden = app()
    overridden.dependency_overrides[who] = lambda: "override"
    assert TestClient(overridden).get("/who").json() == {"name": "override"}
    assert TestClient(second).get("/who").json() == {"name": "real"}  # the memo did not take it
