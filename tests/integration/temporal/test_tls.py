"""Temporal over TLS and mutual TLS, as a production cluster is reached (issue 17): the settings
(SIGNOFF_TEMPORAL_TLS_CA, _CERT, _KEY, _SERVER_NAME) drive ``connect_client``, which the API, the
worker and ``signoff temporal setup`` use; tested through a TLS-terminating proxy in front of the
session's dev server (tests/fixtures/tls_proxy.py), with a run paused and decided through it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from signoff.engine.errors import Unavailable
from signoff.engine.models import Decision, JobStatus
from signoff.engine.settings import Settings
from signoff.service import RunService, connect_client
from signoff.worker import build_worker
from tests.fixtures.tls_proxy import TLSProxy, make_pki
from tests.helpers import REPO, wait_status

SERVER_NAME = "temporal.test"


def tls_settings(settings: Settings, proxy: TLSProxy, **kw) -> Settings:
    return settings.model_copy(update={"temporal_address": proxy.address, "temporal_tls_server_name": SERVER_NAME,
                                       **kw})


async def test_a_run_pauses_and_is_decided_over_mutual_tls(tmp_path, temporal_server, temporal_client, settings,
                                                           store, user, make_flow):
    pki = make_pki(tmp_path / "pki", SERVER_NAME)
    async with TLSProxy(pki, temporal_server.address, mutual=True) as proxy:
        mtls = tls_settings(settings, proxy, temporal_tls_ca=pki.ca, temporal_tls_cert=pki.client_cert,
                            temporal_tls_key=pki.client_key)
        client = await connect_client(mtls)
        service = RunService(mtls, store, client)
        async with build_worker(client, store, mtls):
            job, _ = await service.submit(user, await make_flow(), input_value="over TLS", session_id=None,
                                          tweaks=None, idempotency_key=None, mode="background")
            job = await wait_status(store, job.job_id, JobStatus.suspended)
            await service.resume(user, job.job_id, job.pending.request_id, Decision(action_id="approve"))
            await wait_status(store, job.job_id, JobStatus.completed)
        assert proxy.handshakes >= 1  # every byte went through the TLS proxy

        # no client certificate: the frontend (the proxy) refuses the handshake
        with pytest.raises(Unavailable, match="over TLS"):
            await connect_client(tls_settings(settings, proxy, temporal_tls_ca=pki.ca))


async def test_tls_checks_the_servers_certificate_and_name(tmp_path, temporal_server, temporal_client, settings):
    pki = make_pki(tmp_path / "pki", SERVER_NAME)
    async with TLSProxy(pki, temporal_server.address, mutual=False) as proxy:
        client = await connect_client(tls_settings(settings, proxy, temporal_tls_ca=pki.ca))
        assert await client.service_client.check_health()
        with pytest.raises(Unavailable):  # a CA that did not sign the server's certificate
            await connect_client(tls_settings(settings, proxy, temporal_tls_ca=pki.other_ca))
        with pytest.raises(Unavailable):  # the certificate is for another name
            await connect_client(tls_settings(settings, proxy, temporal_tls_ca=pki.ca,
                                              temporal_tls_server_name="elsewhere.test"))


def test_settings_refuse_half_a_client_certificate_and_missing_files(tmp_path) -> None:
    pem = tmp_path / "client.pem"
    pem.write_text("x")
    with pytest.raises(ValueError, match="go together"):
        Settings(temporal_tls_cert=pem)
    with pytest.raises(ValueError, match="no such file"):
        Settings(temporal_tls_ca=tmp_path / "missing.pem")
    assert Settings(temporal_api_key="k").temporal_tls_enabled  # Temporal Cloud's key implies TLS
    assert Settings(temporal_tls_server_name="temporal.internal").temporal_tls_enabled  # a name to check: TLS
    assert not Settings().temporal_tls_enabled


def test_a_bad_setting_never_echoes_the_other_settings_values(tmp_path) -> None:
    with pytest.raises(ValueError) as bad:
        Settings(temporal_tls_cert=tmp_path / "c.pem", temporal_api_key="tcld-secret-key",
                 database_url="postgresql://u:db-password@h/db")
    assert "tcld-secret-key" not in str(bad.value) and "db-password" not in str(bad.value)


async def test_temporal_setup_over_tls_checks_the_search_attributes(tmp_path, temporal_server, temporal_client):
    pki = make_pki(tmp_path / "pki", SERVER_NAME)
    async with TLSProxy(pki, temporal_server.address, mutual=True) as proxy:
        env = {**os.environ, "SIGNOFF_TEMPORAL_TLS_CA": str(pki.ca), "SIGNOFF_TEMPORAL_TLS_CERT": str(pki.client_cert),
               "SIGNOFF_TEMPORAL_TLS_KEY": str(pki.client_key), "SIGNOFF_TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
               "SIGNOFF_HOME": str(tmp_path)}
        import asyncio

        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "signoff.cli", "temporal", "setup",
                                                        "--address", proxy.address],
                                       env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "already registered" in done.stdout and "SignoffStatus" in done.stdout
