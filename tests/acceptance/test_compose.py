"""docker-compose.yml parses, and its SIGNOFF_ variables and ports agree with Settings."""

from __future__ import annotations

from pathlib import Path

import yaml

from signoff.engine.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _ports(service: dict) -> dict[int, int]:
    out = {}
    for p in service.get("ports", []):
        host, container = str(p).rsplit(":", 1)[-2:] if str(p).count(":") else (p, p)
        out[int(container)] = int(host)
    return out


def test_every_signoff_variable_is_a_settings_field() -> None:
    fields = set(Settings.model_fields)
    services = _compose()["services"]
    seen = set()
    for name in ("api", "worker"):
        env = services[name]["environment"]
        for key in env:
            assert key.startswith("SIGNOFF_"), f"{name}: {key} is not a signoff setting"
            field = key.removeprefix("SIGNOFF_").lower()
            assert field in fields, f"{name}: {key} matches no Settings field"
            seen.add(field)
        settings = Settings(**{k.removeprefix("SIGNOFF_").lower(): v for k, v in env.items()})
        assert settings.database_url and settings.database_url.startswith("postgresql://")
        assert settings.temporal_address == "temporal:7233"
    assert {"database_url", "temporal_address", "api_host", "api_port"} <= seen


def test_ports_match_the_defaults() -> None:
    services = _compose()["services"]
    defaults = Settings()
    api_env = services["api"]["environment"]
    assert int(api_env["SIGNOFF_API_PORT"]) == defaults.api_port
    assert _ports(services["api"]) == {defaults.api_port: defaults.api_port}
    assert _ports(services["temporal"]) == {defaults.dev_temporal_port: defaults.dev_temporal_port}
    assert _ports(services["temporal-ui"]) == {defaults.dev_ui_port: defaults.dev_ui_port}
    assert services["temporal-ui"]["environment"]["TEMPORAL_UI_PORT"] == str(defaults.dev_ui_port)
    assert services["api"]["environment"]["SIGNOFF_TEMPORAL_ADDRESS"].endswith(f":{defaults.dev_temporal_port}")


def test_services_gate_on_postgres_health() -> None:
    services = _compose()["services"]
    pg = services["postgresql"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    for name in ("temporal", "api", "worker"):
        assert services[name]["depends_on"]["postgresql"]["condition"] == "service_healthy", name
    assert services["temporal"]["environment"]["DB"].startswith("postgres")
    assert services["api"]["command"] == ["signoff", "api"]
    assert services["worker"]["command"] == ["signoff", "worker"]


def test_dockerfile_installs_every_package() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for pkg in ("engine", "activities", "workflows", "api", "signoff"):
        assert f"COPY {pkg} ./{pkg}" in text
