"""The dev server signoff starts (`signoff dev`, the tests' server, the benches) runs without the
per-task dispatch throttle (docs/temporal.md, "Dev server tuning")."""

from signoff.devserver import TUNING, DevServer


def _values(cmd: list[str]) -> set[str]:
    return {v for k, v in zip(cmd, cmd[1:]) if k == "--dynamic-config-value"}


def test_tuned_by_default():
    values = _values(DevServer(port=7233, ui_port=None, db_file=None).command())
    assert "history.transferProcessorMaxPollRPS=100000" in values
    assert "system.enableEagerWorkflowStart=true" in values
    assert {f"{k}={v}" for k, v in TUNING.items()} <= values


def test_untuned_keeps_the_defaults():
    values = _values(DevServer(port=7233, ui_port=None, db_file=None, tuned=False).command())
    assert not any(v.split("=", 1)[0] in TUNING for v in values)
    assert "system.forceSearchAttributesCacheRefreshOnRead=true" in values
