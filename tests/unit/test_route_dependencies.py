"""The API's decision routes resolve their dependencies on the event loop: FastAPI runs a plain
function dependency on its thread pool, a thread hop (and back) per dependency of every request,
which a decision paid for each of its settings, store and service (issue 33, api/deps.py)."""

from __future__ import annotations

import inspect

from fastapi.routing import APIRoute

from signoff.api.routes.workflows import router


def _sync_dependencies(dependant) -> list[str]:
    out = []
    for dep in dependant.dependencies:
        call = dep.call
        if not (inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(getattr(call, "__call__", None))):
            out.append(getattr(call, "__name__", repr(call)))
        out += _sync_dependencies(dep)
    return out


def test_the_decision_routes_have_no_dependency_run_on_a_thread() -> None:
    routes = {(m, r.path): r for r in router.routes if isinstance(r, APIRoute) for m in r.methods}
    for key in (("POST", "/api/v2/workflows/{job_id}/resume"), ("POST", "/api/v2/workflows/resume-batch"),
                ("GET", "/api/v2/workflows/{job_id}"), ("POST", "/api/v2/workflows")):
        assert key in routes, key
        assert _sync_dependencies(routes[key].dependant) == [], key
