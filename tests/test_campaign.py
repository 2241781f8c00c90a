"""A campaign suite (`campaign: true`): each finished trial is committed to campaigns/<suite>/ as it lands, and a
new machine (results/ gone) restores them, so it loses at most the trials in flight and runs nothing twice."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.config.expand import expand, load_suite_file
from harness.store import campaign
from harness.errors import ConfigError
from harness.store.archive import ArchiveError, pack_suite
from harness.store.trialdir import SUITE_FILE


def rows(trial_dir: Path) -> list[dict]:
    """metrics.jsonl without its timings (perf/...), which differ between runs of the same trial."""
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("perf/")}
            for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "clone"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "ci@example.invalid")
    git(root, "config", "user.name", "ci")
    (root / "README").write_text("x\n")
    git(root, "add", "README")
    git(root, "commit", "-q", "-m", "init")
    monkeypatch.chdir(root)                     # campaigns/ is relative to where the run starts, as results/ is
    return root


def fake_trial(suite_dir: Path, trial_id: str, status: str) -> Path:
    d = suite_dir / trial_id
    d.mkdir(parents=True)
    for name, text in (("config.yaml", "algorithm: grpo\n"), ("params.json", "{}"), ("provenance.json", "{}"),
                       ("metrics.jsonl", '{"step": 1}\n'), ("eval.jsonl", '{"step": 1, "eval/acc": 0.5}\n')):
        (d / name).write_text(text)
    (d / "status.json").write_text(json.dumps({"status": status, "step": 1}))
    return d


def test_only_finished_trials_land_and_each_is_its_own_commit(repo):
    suite_dir = repo / "results" / "camp"
    suite_dir.mkdir(parents=True)
    (suite_dir / SUITE_FILE).write_text("suite: camp\n")
    dest = campaign.campaign_dir("camp")
    assert campaign.land(suite_dir, fake_trial(suite_dir, "grpo-d0-s0", "completed"), dest) is not None
    assert campaign.land(suite_dir, fake_trial(suite_dir, "grpo-d0-s1", "running"), dest) is None
    assert campaign.land(suite_dir, fake_trial(suite_dir, "grpo-d0-s2", "failed"), dest) is None
    assert campaign.landed(dest) == ["grpo-d0-s0"]
    assert git(repo, "log", "--format=%s", "-1") == "campaign camp: grpo-d0-s0 landed\n"
    assert git(repo, "status", "--porcelain", "--", "campaigns") == ""        # committed, nothing left staged
    commits = git(repo, "rev-list", "--count", "HEAD")
    assert campaign.land(suite_dir, suite_dir / "grpo-d0-s0", dest) is None   # reported finished again: no-op
    assert git(repo, "rev-list", "--count", "HEAD") == commits


def test_restore_moves_a_partial_directory_aside_and_refuses_a_misnamed_archive(repo, tmp_path):
    old = tmp_path / "old-machine" / "camp"
    old.mkdir(parents=True)
    (old / SUITE_FILE).write_text("suite: camp\n")
    fake_trial(old, "grpo-d0-s0", "completed")
    dest = campaign.campaign_dir("camp")
    campaign.land(old, old / "grpo-d0-s0", dest, commit=False)
    new = repo / "results" / "camp"
    fake_trial(new, "grpo-d0-s0", "running")                 # the new machine had started it before restoring
    assert campaign.restore(dest, new) == ["grpo-d0-s0"]
    assert json.loads((new / "grpo-d0-s0" / "status.json").read_text())["status"] == "completed"
    assert len(list((new / ".superseded").iterdir())) == 1     # the partial run kept, never deleted
    assert campaign.restore(dest, new) == []                 # already finished here: nothing to do
    # An archive named for one trial but holding another is refused, and nothing is moved.
    pack_suite(old, dest / "grpo-d0-s9.tar.gz", only=frozenset({"grpo-d0-s0"}))
    with pytest.raises(ArchiveError, match="not grpo-d0-s9"):
        campaign.restore(dest, repo / "results" / "elsewhere")
    assert not (repo / "results" / "elsewhere" / "grpo-d0-s9").exists()


@pytest.mark.slow      # two suite runs, two Ray starts: about 2 minutes on 2 cores
def test_a_replaced_machine_loses_only_the_trial_in_flight(repo, tiny_base, capfd):
    from harness.suite.runner import run_suite

    path = repo / "camp.yaml"
    path.write_text(yaml.safe_dump({"suite": "camp", "base": tiny_base, "grid": {"algorithm": ["grpo"], "delay": [0, 2]},
                                    "seeds": [0], "campaign": True}, sort_keys=False))
    suite = load_suite_file(path)
    assert run_suite(suite, results_root=repo / "results", progress=True) == {"completed": 2}
    dest = campaign.campaign_dir("camp")
    ids = campaign.landed(dest)
    assert len(ids) == 2 and "landed" in capfd.readouterr().err
    assert git(repo, "log", "--format=%s").count("landed") == 2
    metrics = {i: rows(repo / "results" / "camp" / i) for i in ids}
    # The machine is replaced: its results/ are not there; the second trial was still in flight (never landed).
    git(repo, "rm", "-q", str(dest / f"{ids[1]}.tar.gz"))
    new = repo / "results-new-machine"
    assert run_suite(suite, results_root=new, progress=True) == {"completed": 2}
    assert "2 trials, 1 already finished, 1 to run" in capfd.readouterr().err
    assert (new / "camp" / ids[0] / "metrics.jsonl").read_bytes() == (
        repo / "results" / "camp" / ids[0] / "metrics.jsonl").read_bytes()               # restored byte for byte
    assert rows(new / "camp" / ids[1]) == metrics[ids[1]]                               # rerun: same numbers
    assert campaign.landed(dest) == ids


def test_a_campaign_git_could_not_commit_is_refused_before_anything_is_written(repo, tiny_base, monkeypatch):
    # a fresh machine without a git identity: every landing would fail, the trials would live there alone
    from harness.suite.session import SuiteSession

    suite, trials, _ = _table_and_retuned(repo, tiny_base)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    git(repo, "config", "--unset", "user.email")
    git(repo, "config", "user.useConfigOnly", "true")        # no guess from the host name either
    with pytest.raises(ConfigError, match="^campaigns/retuned: a campaign commits each finished trial, and git here "
                                          "has no user identity; set one \(git config user.name NAME && git config "
                                          "user.email EMAIL\) and run it again$"):
        SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)
    assert not (repo / "results").exists() and not campaign.campaign_dir("retuned").exists()
    git(repo, "config", "user.email", "ci@example.invalid")
    # a commit git refuses for another reason (here a hook) is one line naming the archive; the trial stays
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'refused by the hook' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(ConfigError, match="grpo-d2-s0.tar.gz: git commit failed \\(refused by the hook\\); the trial "
                                          "is landed there but not committed: commit that file by hand"):
        SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)
    assert campaign.landed(campaign.campaign_dir("retuned")) == ["grpo-d2-s0"]
    assert "grpo-d2-s0.tar.gz" in git(repo, "status", "--porcelain", "--", "campaigns")
    assert "reused" not in git(repo, "log", "--format=%s")

def test_a_run_of_some_trials_plans_them_all(tmp_path, tiny_base):
    # the plan is the suite's trials, not the run's selection: a partial suite's report names the rest
    from harness.suite.session import SuiteSession

    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"suite": "plan", "base": tiny_base, "seeds": [0, 1],
                                    "grid": {"algorithm": ["grpo", "m2po"], "delay": [0, 2], "eps": [0.2]}}))
    suite = load_suite_file(path)
    session = SuiteSession.open(suite, expand(suite)[:1], tmp_path / "results", mirrored=False)
    plan = json.loads((session.suite_dir / "plan.json").read_text())["trials"]
    assert [p["trial_id"] for p in plan] == ["grpo-d0-e0.2-s0", "grpo-d0-e0.2-s1", "grpo-d2-e0.2-s0", "grpo-d2-e0.2-s1",
                                             "m2po-d0-s0", "m2po-d0-s1", "m2po-d2-s0", "m2po-d2-s1"]
    assert plan[4]["point"] == {"algorithm": "m2po", "delay": 0, "seed": 0}     # m2po reads no eps: not its point


def test_a_fresh_clones_dry_run_counts_the_landed_trials(repo, tiny_base):
    from harness.suite.plan import dry_run

    path = repo / "camp.yaml"
    path.write_text(yaml.safe_dump({"suite": "camp", "base": tiny_base, "grid": {"algorithm": ["grpo"], "delay": [0, 2]},
                                    "seeds": [0], "campaign": True}))
    suite = load_suite_file(path)
    elsewhere = repo / "elsewhere" / "camp"                # the machine that ran it; this clone has no results/
    elsewhere.mkdir(parents=True)
    (elsewhere / SUITE_FILE).write_text("suite: camp\n")
    campaign.land(elsewhere, fake_trial(elsewhere, "grpo-d2-s0", "completed"), campaign.campaign_dir("camp"))
    text = dry_run(suite, [], repo / "results")
    assert "2 trials (2 grid points x seeds before removing duplicates), 1 already finished" in text
    assert "  done grpo-d2-s0" in text and "  run  grpo-d0-s0" in text


def test_a_campaign_whose_tuned_values_are_not_in_overrides_yet_is_refused(repo, tiny_base):
    # benchmark v4's re-tuned column before its overrides are written: its trials would land at the base's lr
    from harness.suite.plan import dry_run
    from harness.suite.runner.grid import run_suite

    spec = {"suite": "camp", "base": tiny_base, "grid": {"algorithm": ["grpo", "m2po"], "delay": [2]}, "seeds": [0],
            "campaign": True, "tune": {"param": "train.lr", "low": 1e-4, "high": 1e-2, "method": "grid", "points": 2},
            "overrides": {"grpo": {"train.lr": 1e-3}}}
    (repo / "camp.yaml").write_text(yaml.safe_dump(spec))
    suite = load_suite_file(repo / "camp.yaml")
    refusal = ("camp: a campaign commits each trial it runs, and overrides: sets no train.lr for m2po; run "
               "`stalebench tune` on it first and copy results/camp/tuned-overrides.yaml into its overrides:")
    with pytest.raises(ConfigError, match=f"^{re.escape(refusal)}$"):
        run_suite(suite, results_root=repo / "results", progress=False)
    assert not (repo / "results").exists() and not campaign.campaign_dir("camp").exists()
    assert f"  a run now refuses: {refusal}" in dry_run(suite, [], repo / "results")
    # a suite without an algorithm axis runs its base's estimator, which the check reads the same way
    alone = {**spec, "base": {**tiny_base, "algorithm": "m2po"}, "grid": {"delay": [2]}, "overrides": {}}
    (repo / "camp.yaml").write_text(yaml.safe_dump(alone))
    assert f"  a run now refuses: {refusal}" in dry_run(load_suite_file(repo / "camp.yaml"), [], repo / "results")
    for done in ({**spec, "overrides": {a: {"train.lr": 1e-3} for a in ("grpo", "m2po")}},   # tuned, or not a campaign
                 {**spec, "campaign": False}):
        (repo / "camp.yaml").write_text(yaml.safe_dump(done))
        assert "refuses" not in dry_run(load_suite_file(repo / "camp.yaml"), [], repo / "results")


def _table_and_retuned(repo: Path, tiny_base: dict) -> tuple:
    """Benchmark v4's shape in small: a table suite (delays 0 and 2; m2po at another lr) has run and landed its
    trials; a re-tuned suite (delay 2 alone, reuse: [table]) plans the same ids. Returns (retuned suite, its
    trials by id, the table's results directory)."""
    from harness.config.dicts import to_dict

    grid = {"algorithm": ["grpo", "m2po"], "delay": [0, 2]}
    (repo / "table.yaml").write_text(yaml.safe_dump({"suite": "table", "base": tiny_base, "grid": grid, "seeds": [0],
                                                     "campaign": True, "overrides": {"m2po": {"train.lr": 3e-3}},
                                                     "notes": "the table"}))
    (repo / "retuned.yaml").write_text(yaml.safe_dump({"suite": "retuned", "base": tiny_base, "seeds": [0],
                                                       "grid": {**grid, "delay": [2]}, "campaign": True,
                                                       "reuse": ["table"]}))
    ran = repo / "elsewhere" / "table"                     # the table's machine
    ran.mkdir(parents=True)
    (ran / SUITE_FILE).write_text("suite: table\n")
    for t in expand(load_suite_file(repo / "table.yaml")):
        (fake_trial(ran, t.trial_id, "completed") / "config.yaml").write_text(yaml.safe_dump(to_dict(t.config)))
        campaign.land(ran, ran / t.trial_id, campaign.campaign_dir("table"))
    suite = load_suite_file(repo / "retuned.yaml")
    return suite, {t.trial_id: t for t in expand(suite)}, ran


def test_a_suite_reuses_another_campaigns_trial_only_where_its_config_is_the_same(repo, tiny_base):
    # benchmark v4's re-tuned column: an estimator whose lr re-tuned at D is its delay-0 lr *is* the table's trial
    from harness.suite.plan import dry_run
    from harness.suite.session import SuiteSession

    suite, trials, _ = _table_and_retuned(repo, tiny_base)
    assert sorted(trials) == ["grpo-d2-s0", "m2po-d2-s0"]     # m2po runs at the base lr here, at 3e-3 there
    text = dry_run(suite, [], repo / "results")
    assert "1 already finished" in text and "  done grpo-d2-s0" in text and "  run  m2po-d2-s0" in text
    assert "  reuse: 1 trial of campaigns/table/ with the same config\n" in text
    session = SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)
    assert [t.trial_id for t in session.pending()] == ["m2po-d2-s0"]
    assert campaign.landed(campaign.campaign_dir("retuned")) == ["grpo-d2-s0"]
    assert git(repo, "log", "-1", "--format=%s") == "campaign retuned: grpo-d2-s0 reused from campaigns/table\n"
    SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)    # again: nothing new
    assert git(repo, "log", "--format=%s").count("reused") == 1
    # a fresh clone: the trial is landed in both campaigns, and counted once
    assert "2 trials (2 grid points x seeds before removing duplicates), 1 already finished" in dry_run(
        suite, [], repo / "fresh")


def test_reuse_warns_of_a_trial_the_other_suite_has_not_landed_yet(repo, tiny_base, capfd):
    # the re-tuned column started before the table finished: its twin of an unlanded table trial would run twice
    from harness.suite.plan import dry_run

    suite, _, _ = _table_and_retuned(repo, tiny_base)
    (repo / "suites").mkdir()
    (repo / "suites" / "table.yaml").write_text((repo / "table.yaml").read_text())      # found by its name
    dry_run(suite, [], repo / "results")
    assert "warning" not in capfd.readouterr().err        # every twin landed; m2po's config differs: no twin
    git(repo, "rm", "-q", str(campaign.campaign_dir("table") / "grpo-d2-s0.tar.gz"))
    assert "  run  grpo-d2-s0" in dry_run(suite, [], repo / "results")
    assert capfd.readouterr().err == (
        "stalebench: warning: reuse: 1 of these trials are trials of suites/table.yaml (same id and config) that "
        "have not landed in campaigns/table/ yet (grpo-d2-s0): they run here, a second time; land them there first "
        "to reuse them\n")

def test_reuse_passes_over_a_damaged_archive_and_never_acts_outside_a_campaign(repo, tiny_base, capfd):
    from dataclasses import replace

    from harness.suite.session import SuiteSession

    suite, trials, _ = _table_and_retuned(repo, tiny_base)
    # reproduce reruns a suite's trials as a plain suite (campaign False): nothing is taken, nothing committed
    plain = SuiteSession.open(replace(suite, campaign=False), list(trials.values()), repo / "plain", mirrored=False)
    assert len(plain.pending()) == 2 and "reused" not in git(repo, "log", "--format=%s")
    (campaign.campaign_dir("table") / "grpo-d2-s0.tar.gz").write_bytes(b"not a gzip")
    session = SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)
    assert len(session.pending()) == 2                    # it runs here
    assert "stalebench: warning: not reused, runs here instead: " in capfd.readouterr().err


def test_a_suite_reuses_a_committed_reports_trial_with_the_same_config(repo, tiny_base, capfd):
    # benchmark v4's table: an estimator whose lr tuned at delay 0 is v3's runs v3's trials at delays 0 and 64
    from harness.suite.plan import dry_run
    from harness.suite.session import SuiteSession

    suite, trials, ran = _table_and_retuned(repo, tiny_base)
    pack_suite(ran, repo / "reports" / "table" / "raw.tar.gz")            # the table, committed as a report
    (repo / "retuned.yaml").write_text((repo / "retuned.yaml").read_text().replace("- table", "- reports/table"))
    suite = load_suite_file(repo / "retuned.yaml")
    text = dry_run(suite, [], repo / "results")
    assert "  reuse: 1 trial of reports/table/raw.tar.gz with the same config\n" in text and "  done grpo-d2-s0" in text
    session = SuiteSession.open(suite, list(trials.values()), repo / "results", mirrored=False)
    assert [t.trial_id for t in session.pending()] == ["m2po-d2-s0"]     # m2po's config differs: it runs here
    assert rows(session.suite_dir / "grpo-d2-s0") == rows(ran / "grpo-d2-s0")
    assert git(repo, "log", "-1", "--format=%s") == "campaign retuned: grpo-d2-s0 reused from reports/table/raw.tar.gz\n"
    (repo / "reports" / "table" / "raw.tar.gz").write_bytes(b"not a gzip")            # damaged: runs here
    session = SuiteSession.open(suite, list(trials.values()), repo / "other", mirrored=False)
    assert [t.trial_id for t in session.pending()] == ["m2po-d2-s0"]     # taken from its own campaign now
    (campaign.campaign_dir("retuned") / "grpo-d2-s0.tar.gz").unlink()
    capfd.readouterr()
    session = SuiteSession.open(suite, list(trials.values()), repo / "third", mirrored=False)
    assert len(session.pending()) == 2 and "not reused, runs here instead: " in capfd.readouterr().err
    (ran / "grpo-d2-s0" / "status.json").write_text(json.dumps({"status": "failed", "step": 1}))
    pack_suite(ran, repo / "reports" / "table" / "raw.tar.gz")          # a report may hold a trial that failed
    assert "  reuse: 0 trials of reports/table/raw.tar.gz" in dry_run(suite, [], repo / "fourth")
    (repo / "reports" / "table" / "raw.tar.gz").unlink()
    with pytest.raises(ConfigError, match=r"^reuse: reports/table/raw.tar.gz not found; name a committed report "
                                          r"packed with --raw \(reports/<name>\), or remove reports/table from reuse$"):
        dry_run(suite, [], repo / "results")


def test_reuse_needs_a_campaign(tmp_path, tiny_base):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"suite": "r", "base": tiny_base, "seeds": [0], "reuse": ["table"]}))
    with pytest.raises(ConfigError, match="reuse: the trials it takes are landed as this suite's; add campaign: true"):
        load_suite_file(path)
    for value in ("", False, 0, "table"):
        path.write_text(yaml.safe_dump({"suite": "r", "base": tiny_base, "seeds": [0], "campaign": True, "reuse": value}))
        with pytest.raises(ConfigError, match="reuse: expected a list of other campaigns' suite names"):
            load_suite_file(path)
    path.write_text(yaml.safe_dump({"suite": "r", "base": tiny_base, "seeds": [0], "campaign": True,
                                    "reuse": ["reports/../x"]}))
    with pytest.raises(ConfigError, match="or committed reports, e.g. \\[reference-v4, reports/reference-v3\\]"):
        load_suite_file(path)
    path.write_text(yaml.safe_dump({"suite": "r", "base": tiny_base, "seeds": [0], "campaign": True,
                                    "reuse": ["table", "table"]}))
    with pytest.raises(ConfigError, match="reuse: \\['table', 'table'\\] names one source twice; name each once"):
        load_suite_file(path)


def test_a_report_of_a_campaign_with_only_tuning_trials_names_them(repo):
    from harness.report.load import load_results

    suite_dir = repo / "results" / "camp"
    suite_dir.mkdir(parents=True)
    (suite_dir / SUITE_FILE).write_text("suite: camp\nbase: {}\n")
    tune = campaign.campaign_dir("camp", tuning=True)
    tune.mkdir(parents=True)
    (tune / "tune-grpo-lr1e-05-seed1000.tar.gz").write_bytes(b"")
    with pytest.raises(ValueError, match=r"run the suite first or pass another results dir; campaign camp: 0 table "
                                         r"and 1 tuning trials landed in campaigns/camp/"):
        load_results(suite_dir)


def test_restore_only_brings_landed_trials_home_for_the_report_and_runs_nothing(repo, tiny_base, capsys):
    # a clone that only merged a campaign's landings: `run --restore-only` fills results/<suite>/, starts no trial
    from harness.cli import main
    from harness.store.trialdir import read_status

    _table_and_retuned(repo, tiny_base)
    assert main(["run", "table.yaml", "--restore-only"]) == 0
    assert capsys.readouterr().out == ("restored: 4 of 4 trials of table finished in results/table; next: stalebench "
                                       "report results/table\n")
    assert {d.name: read_status(d)["status"] for d in (repo / "results" / "table").iterdir() if d.is_dir()} == {
        t: "completed" for t in ("grpo-d0-s0", "grpo-d2-s0", "m2po-d0-s0", "m2po-d2-s0")}
    assert main(["run", "retuned.yaml", "--restore-only"]) == 0      # a reused trial lands; the other is named
    assert capsys.readouterr().out == ("restored: 1 of 2 trials of retuned finished in results/retuned (1 not landed "
                                       "yet); next: stalebench report results/retuned\n")
    (repo / "plain.yaml").write_text(yaml.safe_dump({"suite": "plain", "base": tiny_base, "seeds": [0]}))
    assert main(["run", "plain.yaml", "--restore-only"]) == 2
    assert capsys.readouterr().err == ("stalebench: plain: --restore-only brings a campaign's landed trials into "
                                       "results/, and this suite has no campaign: true; run it instead\n")
    assert not (repo / "results" / "plain").exists()
