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
    for name in ("temporal-schema", "temporal", "api", "worker"):
        assert services[name]["depends_on"]["postgresql"]["condition"] == "service_healthy", name
    assert services["api"]["command"] == ["signoff", "api"]
    assert services["worker"]["command"] == ["signoff", "worker"]
    assert "/health/ready" in " ".join(services["api"]["healthcheck"]["test"])


def test_temporal_runs_on_the_supported_images_with_its_schema_set_up_first() -> None:
    services = _compose()["services"]
    temporal, schema = services["temporal"], services["temporal-schema"]
    assert temporal["image"].startswith("temporalio/server:")  # not the deprecated auto-setup
    assert not any(s.get("image", "").startswith("temporalio/auto-setup") for s in services.values())
    assert schema["image"].startswith("temporalio/admin-tools:")
    assert schema["image"].split(":")[1] == temporal["image"].split(":")[1]  # the schema of that server
    assert temporal["depends_on"]["temporal-schema"]["condition"] == "service_completed_successfully"
    assert services["temporal-setup"]["depends_on"]["temporal"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["temporal-setup"]["condition"] == "service_completed_successfully"
    assert temporal["environment"]["DB"] == schema["environment"]["DB"] == "postgres12"
    # the files they mount are in the repository, and the script sets up both databases
    script = (ROOT / "deploy/temporal/setup-schema.sh").read_text()
    assert schema["command"] == ["/deploy/setup-schema.sh"] and "./deploy/temporal:/deploy:ro" in schema["volumes"]
    for db in ("temporal", "temporal_visibility"):
        assert f"--db {db} update-schema" in script
    mounted = temporal["volumes"][0].split(":")
    config = yaml.safe_load((ROOT / mounted[0]).read_text())
    assert mounted[1].endswith(temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"].removeprefix("config/"))
    assert config["history.transferProcessorMaxPollRPS"][0]["value"] >= 1000  # the throttle lifted
    # the search attributes signoff writes, registered on the namespace
    from signoff.devserver import SEARCH_ATTRIBUTES

    command = " ".join(services["temporal-setup"]["command"])
    assert all(name in command for name in SEARCH_ATTRIBUTES) and "namespace create" in command


def test_workers_scale_out_and_share_the_key_of_stored_secrets() -> None:
    services = _compose()["services"]
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["api"]["volumes"] == services["worker"]["volumes"]  # one SIGNOFF_HOME, one secret.key
    home = services["api"]["volumes"][0].split(":")[1]
    assert home == "/data" and "SIGNOFF_HOME=/data" in (ROOT / "Dockerfile").read_text()
    assert "SIGNOFF_METRICS_PORT" in services["worker"]["environment"]


def test_dockerfile_installs_every_package() -> None:
    """Every folder pyproject.toml installs is copied into the image."""
    import tomllib

    text = (ROOT / "Dockerfile").read_text()
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    for folder in dirs:
        assert f"COPY {folder} ./{folder}" in text, folder


def test_the_compose_temporal_server_is_tuned_as_signoff_dev_tunes_its_own() -> None:
    """Every dynamic config key `signoff dev` sets (signoff/devserver.py: TUNING: the poll rate,
    eager start, task-queue fairness by user) is in the file the compose file's Temporal server
    mounts, with the same value: a deployment from the compose file hands out runs by user in turn
    as the dev server does (it lacked the fairness keys)."""
    from signoff.devserver import TUNING

    config = yaml.safe_load((ROOT / "deploy/temporal/dynamicconfig.yaml").read_text())
    mounted = {key: str(entries[0]["value"]).lower() for key, entries in config.items()}
    assert {key: value.lower() for key, value in TUNING.items()}.items() <= mounted.items(), mounted
