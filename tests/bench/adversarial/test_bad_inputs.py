"""Every bad-input probe is refused with a message that names the problem (bench/adversarial/bad_inputs)."""
from __future__ import annotations

import pytest

from bench.adversarial.bad_inputs import CATEGORIES, PROBES, Probe, ProbeResult, run_all, run_probe, unavailable_reason
from bench.adversarial.bad_inputs.commands import summarize


def test_catalog_covers_every_category_with_unique_names():
    assert {probe.category for probe in PROBES} == set(CATEGORIES)
    names = [probe.name for probe in PROBES]
    assert len(names) == len(set(names)) and len(names) >= 30
    assert all(probe.expected for probe in PROBES)


@pytest.mark.parametrize("probe", PROBES, ids=[probe.name for probe in PROBES])
@pytest.mark.slow
def test_probe_is_refused_with_a_message_naming_the_problem(probe, tmp_path):
    reason = unavailable_reason(probe)
    if reason:
        pytest.skip(f"{probe.name} needs {probe.needs}: {reason}")
    result = probe.run(tmp_path)
    assert result.message, probe.name
    assert probe.expected in result.message, result.message
    assert result.refused, result.message


def test_a_probe_that_is_accepted_or_raises_is_not_refused(tmp_path):
    accepted = Probe("accepted", "config", lambda _: ProbeResult(True, "fine"), expected="names the fix")
    assert run_probe(accepted, tmp_path) == ProbeResult(False, "fine")

    def explode(_):
        raise RuntimeError("boom")

    raised = run_probe(Probe("raises", "config", explode, expected="boom"), tmp_path)
    assert raised == ProbeResult(False, "raised RuntimeError: boom")
    with pytest.raises(ValueError, match="category 'disk'"):
        Probe("bad", "disk", explode, expected="x")


def test_summarize_collapses_repeated_lines():
    assert summarize("exit code: 0\ny\ny\ny\nEND") == "exit code: 0 | y [x3] | END"


def test_run_all_counts_tried_refused_and_skipped(tmp_path, monkeypatch):
    # A cheap subset, so the counts are checked without running the slow probes twice.
    by_name = {probe.name: probe for probe in PROBES}
    failing = Probe("accepted_on_purpose", "reply", lambda _: ProbeResult(False, "accepted"), expected="x")
    unavailable = Probe("needs_missing_bwrap", "command", lambda _: ProbeResult(True, "x"), expected="x", needs="bwrap")
    subset = [by_name["reply_no_command"], by_name["config_zero_engines"], by_name["task_rows_duplicate_id"],
              failing, unavailable]
    monkeypatch.setattr("bench.adversarial.bad_inputs.PROBES", subset)
    monkeypatch.setattr("bench.adversarial.bad_inputs.unavailable_reason",
                        lambda probe: "bubblewrap is not installed" if probe is unavailable else "")
    report = run_all(tmp_path)
    assert (report["bad_inputs_tried"], report["bad_inputs_refused"], report["bad_inputs_skipped"]) == (4, 3, 1)
    assert [entry["name"] for entry in report["probes"]] == [probe.name for probe in subset]
    entry = report["probes"][1]
    assert entry["category"] == "config" and entry["refused"] is True
    assert "'engine.num_engines' is 0" in entry["message"]
    assert report["probes"][3]["refused"] is False
    assert report["probes"][4]["skipped"] == "bubblewrap is not installed"
    assert report["probes"][4]["message"] == "skipped: bubblewrap is not installed"
