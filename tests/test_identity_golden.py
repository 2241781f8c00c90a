"""Every trial the repository defines keeps its identity: tests/fixtures/identity_golden.json holds, as the
code resolved them before the config's shape changed (tests/fixtures/write_identity_golden.py), the
config_sha256 of every trial of every suite in suites/ and examples/ and of every committed trial of
reports/*/raw*.tar.gz. Each is re-resolved here and compared, so a change of one default or of the stored
form fails on the first trial it moves."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.dicts import to_dict
from harness.config.expand import load_suite_trials
from harness.store import trialdir
from harness.store.archive import committed_results

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "identity_golden.json").read_text())


@pytest.mark.parametrize("suite", sorted(GOLDEN["suites"]))
def test_every_suite_trial_resolves_to_its_recorded_identity(suite):
    _, trials = load_suite_trials(ROOT / suite)
    now = {t.trial_id: trialdir.config_sha256(to_dict(t.config)) for t in trials}
    assert sorted(now) == sorted(GOLDEN["suites"][suite])
    for trial_id, sha in GOLDEN["suites"][suite].items():
        assert now[trial_id] == sha, f"{suite} {trial_id}"


@pytest.mark.parametrize("report", sorted(GOLDEN["committed"]))
def test_every_committed_trial_resolves_to_its_stored_identity(report):
    """The stored config.yaml's hash is the one recorded, and the report's stored suite, re-resolved now,
    gives each committed trial that hash under the same trial id."""
    recorded = GOLDEN["committed"][report]
    with committed_results(ROOT / report) as committed:
        _, trials = load_suite_trials(committed / trialdir.SUITE_FILE, stored=True)
        by_id = {t.trial_id: t for t in trials}
        for trial_id, sha in recorded.items():
            assert trialdir.config_sha256(trialdir.read_config(committed / trial_id)) == sha, trial_id
            assert trialdir.config_sha256(to_dict(by_id[trial_id].config)) == sha, f"{report} {trial_id}"


def test_the_golden_file_covers_every_suite_and_report():
    suites = {str(p.relative_to(ROOT)) for p in [*(ROOT / "suites").glob("*.yaml"), *(ROOT / "examples").rglob("*.yaml")]}
    assert suites == set(GOLDEN["suites"]) | set(GOLDEN["skipped"]), (
        "a new suite or report: add its identities with tests/fixtures/write_identity_golden.py --add PATH "
        "(a report: and the count of committed trials below)")
    assert set(GOLDEN["skipped"]) == {"examples/stalebench-plugin-example/quickstart-seq_tis.yaml"}   # its estimator
    reports = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "reports").glob("*/raw*.tar.gz")}  # is a plugin's
    assert reports == set(GOLDEN["committed"]) and sum(map(len, GOLDEN["committed"].values())) == 988
