"""A bounded schemathesis run over the OpenAPI schema against a real `signoff api` process, with
the response conformance checks on: whatever it sends (schemathesis's coverage and fuzzing phases,
valid and invalid data), the answer is never a 5xx, its status is one the document declares for
the route, its content type is declared for that status, its body fits the declared schema
(signoff's error body for every error), and every error has a code and a message.

Every operation gets its coverage cases plus ``max_examples`` fuzzed ones (about 1,000 requests,
~10 s). The success paths with real ids (jobs, pending requests, traces, SSE) are driven, and
checked the same way, in tests/integration/api/test_openapi_conformance.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from signoff.api.app import create_app
from signoff.engine.settings import Settings
from signoff.devserver import free_port

ROOT = Path(__file__).resolve().parents[2]
schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())


@pytest.fixture(scope="module")
def live_api(tmp_path_factory, temporal_server):
    tmp = tmp_path_factory.mktemp("fuzz")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(SIGNOFF_HOME=str(tmp), SIGNOFF_DATABASE_URL=f"sqlite:///{tmp / 'f.db'}", SIGNOFF_API_PORT=str(port),
               SIGNOFF_TEMPORAL_ADDRESS=temporal_server.address, SIGNOFF_TASK_QUEUE=f"fuzz-{uuid.uuid4()}",
               SIGNOFF_SYNC_TIMEOUT_SECONDS="1")
    made = subprocess.run([sys.executable, "-m", "signoff.cli", "users", "create", "fuzzer"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    proc = subprocess.Popen([sys.executable, "-m", "signoff.cli", "api", "--log-level", "warning"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)  # polling a subprocess's readiness
    with httpx.Client(base_url=base, headers={"x-api-key": key}) as c:
        flow = c.post("/api/v1/flows", content=(ROOT / "examples/flows/refund.json").read_bytes(),
                      headers={"content-type": "application/json"})
        assert flow.status_code == 201
    try:
        yield base, key
    finally:
        proc.terminate()
        proc.wait(timeout=20)


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_answers_conform_to_the_document(case, live_api) -> None:
    base, key = live_api
    response = case.call_and_validate(base_url=base, headers={"x-api-key": key}, timeout=30, checks=CHECKS)
    if response.status_code >= 400:
        detail = response.json()["detail"]
        assert detail["code"] and detail["message"]
