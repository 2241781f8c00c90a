"""End-to-end report: a synthetic results dir with awkward trials -> HTML, CSV, JSON, site; then a real
headless browser (skipped when playwright or chromium is missing)."""

import csv
import json
import os
import shutil
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.report import build_report, build_site
from harness.report import html as report_html
from harness.report import parallel
from tests.fixtures.synthetic_results import write_jsonl, write_suite, write_trial

HOSTILE = "<script>alert(1)</script>"
NAME = "hostile"    # the suite schema refuses a hostile suite name (test_a_hostile_suite_name_is_refused); the
                    # hostile strings reach the page through the notes, a trial's error and the site's bundle
CHROMIUM = Path("/usr/bin/chromium")
MIN_FIGURE_PX = 900  # every figure's natural width (issue 35: figures a reader can read)
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


def make_results(root: Path) -> Path:
    """3 algorithms x 2 delays x 2 seeds (grpo collapses at delay 8), plus: a failed trial, a running
    trial (no status.json), a diverged trial (NaN loss), a truncated metrics line, a lab/ dir."""
    suite = write_suite(root, NAME, ("grpo", "gmc_grpo", "m2po"), (0, 8), (0, 1), collapse_delay=8,
                        suite_extra={"notes": f"{HOSTILE} <img src=x onerror=alert(2)> notes", "report": {"collapse": {
                            "patience": 2}}})
    suite_file = suite / "suite.yaml"                     # the seed-2 trials below are of the suite's seeds
    suite_file.write_text(suite_file.read_text().replace("seeds:\n- 0\n- 1\n", "seeds:\n- 0\n- 1\n- 2\n"))
    assert "- 2\n" in suite_file.read_text()
    base = {"eps": 0.2, "group_size": 8}
    write_trial(suite, {"trial_id": "m2po-d8-s2", "algorithm": "m2po", "delay": 8, "seed": 2, **base},
                [{"step": 1, "loss/value": 0.1}], None,
                {"status": "failed", "step": 1, "error": "RuntimeError: <b>out of memory</b>",
                 "diverged_step": None})
    write_trial(suite, {"trial_id": "gmc_grpo-d8-s2", "algorithm": "gmc_grpo", "delay": 8, "seed": 2, **base},
                [{"step": s, "loss/value": 0.1, "stale/mean": 8} for s in range(1, 6)],
                [{"step": 0, "eval/acc": 0.23}], None)
    write_trial(suite, {"trial_id": "gmc_grpo-d0-s2", "algorithm": "gmc_grpo", "delay": 0, "seed": 2, **base},
                [{"step": 1, "loss/value": 0.2}, {"step": 2, "loss/value": float("nan")}],
                [{"step": 0, "eval/acc": 0.23}, {"step": 2, "eval/acc": 0.5}],
                {"status": "diverged", "step": 2, "error": "loss is NaN", "diverged_step": 2})
    truncated = next(suite.glob("m2po-d0-*-s0")) / "metrics.jsonl"
    with truncated.open("a") as f:
        f.write('{"step": 41, "loss/va')
    (suite / "lab").mkdir()
    write_jsonl(suite / "lab" / "bias.jsonl", [{"G": 8, "bias": 0.1}])
    plan = [{"trial_id": f"{a}-d{d}-{'' if a == 'm2po' else 'e0.2-'}g8-s{s}",      # m2po does not read eps:
             "point": {"algorithm": a, "delay": d, "group_size": 8, "seed": s, **({} if a == "m2po" else {"eps": 0.2})}}
            for a in ("grpo", "gmc_grpo", "m2po") for d in (0, 8) for s in (0, 1, 2)]   # its ids drop it
    (suite / "plan.json").write_text(json.dumps({"trials": plan}))
    return suite


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    suite = make_results(root / "results")
    index = build_report(suite, root / "reports" / report_html.suite_slug(NAME), formats=("png", "svg"))
    bundle = index.parent / "results.json"               # a hand-edited bundle: the site escapes its name
    bundle.write_text(json.dumps({**json.loads(bundle.read_text()), "suite": HOSTILE}))
    site = build_site(root / "reports")
    return index, site


def test_figures_are_png_alone_by_default_and_svg_on_request(tmp_path, capsys):
    """`stalebench report` writes every figure as a PNG; `--formats svg` as SVG alone (the page shows
    the SVG); an unknown format is one line naming the valid ones, before anything is written."""
    from harness.cli import main
    suite = write_suite(tmp_path / "results", "fmt", ("grpo", "m2po"), (0, 8), (0, 1))
    stems = ("learning_curves", "accuracy_vs_delay", "collapse_heatmap", "diagnostics_vs_step",
             "diagnostics_vs_delay", "staleness")
    assert main(["report", str(suite), "--out", str(tmp_path / "png")]) == 0
    assert "partial suite" not in capsys.readouterr().out                # every planned trial has a result
    for stem in stems:
        assert (tmp_path / "png" / f"{stem}.png").is_file() and not (tmp_path / "png" / f"{stem}.svg").exists()
    figures = json.loads((tmp_path / "png" / "results.json").read_text())["figures"]
    assert set(stems) <= {f["file"].removesuffix(".png") for f in figures}  # every figure kept
    assert all(f["file"].endswith(".png") and f["svg"] == "" for f in figures)
    assert main(["report", str(suite), "--out", str(tmp_path / "svg"), "--formats", "svg"]) == 0
    for stem in stems:
        assert (tmp_path / "svg" / f"{stem}.svg").is_file() and not (tmp_path / "svg" / f"{stem}.png").exists()
    assert 'src="learning_curves.svg"' in (tmp_path / "svg" / "index.html").read_text()
    capsys.readouterr()
    assert main(["report", str(suite), "--out", str(tmp_path / "bad"), "--formats", "png,pdf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown: pdf" in err and "png, svg" in err
    assert not (tmp_path / "bad").exists()


def test_files_exist(built):
    index, site = built
    out = index.parent
    for name in ("index.html", "results.json", "leaderboard.csv", "cells.csv", "trials.csv",
                 "paper_table.md", "paper_table.tex", "paper_table.txt"):
        assert (out / name).is_file(), name
    for stem in ("learning_curves", "accuracy_vs_delay", "collapse_heatmap", "diagnostics_vs_step",
                 "diagnostics_vs_delay", "staleness"):
        assert (out / f"{stem}.png").is_file() and (out / f"{stem}.svg").is_file(), stem
    assert not (out / "heatmap_delay_eps.png").exists()  # the grid does not vary eps
    assert not (out / "survival.png").exists()  # 2-3 seeds per line: the heatmap says it better
    assert site.is_file() and site.parent == out.parent


def png_width(path: Path) -> int:
    """The pixel width in a PNG's header (IHDR: bytes 16..20 after the 8-byte signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">I", head[16:20])[0]


def test_every_figure_is_at_least_900_px_wide_at_its_natural_size(built):
    """Every PNG the report writes (each registered figure and the staleness figure) is readable
    without zooming: >= 900 px wide as saved."""
    pngs = sorted(built[0].parent.glob("*.png"))
    assert {p.name: png_width(p) for p in pngs if png_width(p) < MIN_FIGURE_PX} == {}
    assert {p.stem for p in pngs} >= {"accuracy_vs_delay", "final_accuracy_intervals", "learning_curves",
                                      "collapse_heatmap", "staleness"}


def test_report_built_in_worker_processes_equals_one_built_in_order(tmp_path, monkeypatch):
    """build_report reads many trials and draws its figures in forked workers when it can (a fresh
    process: no other thread); the report must not depend on it."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: build_report never uses worker processes here")
    suite = make_results(tmp_path / "results")
    code = ("import sys; from pathlib import Path; from harness.report import html, load, parallel; pools = []; "
            "real = parallel.ProcessPoolExecutor; load.PARALLEL_TRIALS = 1; "
            "parallel.ProcessPoolExecutor = lambda *a, **k: pools.append(1) or real(*a, **k); "
            "html.build_report(Path(sys.argv[1]), Path(sys.argv[2])); print(len(pools))")
    done = subprocess.run([sys.executable, "-c", code, str(suite), str(tmp_path / "parallel")], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2"]                 # trials read, then figures drawn, in worker processes
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0})
    in_order = build_report(suite, tmp_path / "in-order").parent
    parallel_dir = tmp_path / "parallel"
    bundles = [json.loads((d / "results.json").read_text()) for d in (parallel_dir, in_order)]
    for b in bundles:
        del b["rendered"]                               # when and where it was rendered
    assert bundles[0] == bundles[1] and len(bundles[0]["figures"]) >= 6 and len(bundles[0]["trials"]) > 10
    for name in ("leaderboard.csv", "cells.csv", "trials.csv", *(f["file"] for f in bundles[0]["figures"])):
        assert (parallel_dir / name).read_bytes() == (in_order / name).read_bytes(), name


def test_every_trial_is_listed_with_its_status(built):
    index, _ = built
    bundle = json.loads((index.parent / "results.json").read_text())
    assert bundle["schema_version"] == 2
    status = {t["trial_id"]: t["status"] for t in bundle["trials"]}
    assert len(status) == 3 * 2 * 2 + 3  # lab/ is not a trial
    assert status["m2po-d8-s2"] == "failed"
    assert status["gmc_grpo-d8-s2"] == "pending"              # no status.json (trialdir.read_record)
    assert status["gmc_grpo-d0-s2"] == "diverged"
    notes = {t["trial_id"]: t["notes"] for t in bundle["trials"]}
    assert "1 unreadable line(s) in metrics.jsonl" in notes["m2po-d0-e0.2-g8-s0"]
    assert "no status.json" in notes["gmc_grpo-d8-s2"]
    text = index.read_text()
    for tid in ("m2po-d8-s2", "gmc_grpo-d8-s2", "gmc_grpo-d0-s2"):
        assert tid in text
    assert "RuntimeError: &lt;b&gt;out of memory&lt;/b&gt;" in text
    with open(index.parent / "trials.csv") as f:
        assert len(list(csv.DictReader(f))) == len(status)


def test_statistics_in_bundle(built):
    index, _ = built
    bundle = json.loads((index.parent / "results.json").read_text())
    assert bundle["largest_delay"] == 8
    board = bundle["leaderboard"]
    assert [r["rank"] for r in board] == [1, 2, 3]
    grpo = next(r for r in board if r["algorithm"] == "grpo")
    assert grpo["rank"] == 3 and grpo["collapse_rate"] == 1.0  # collapses at delay 8
    assert grpo["poi_vs_baseline"] is None  # the baseline itself
    m2po = next(r for r in board if r["algorithm"] == "m2po")
    assert m2po["seeds"] == 2 and m2po["n_failed"] == 1 and m2po["status_counts"] == "2 completed, 1 failed"
    assert m2po["poi_vs_baseline"] == 1.0  # both m2po seeds beat both collapsed grpo seeds
    assert m2po["ci_low"] <= m2po["final"] <= m2po["ci_high"]
    assert m2po["statistic"] == "mean" and m2po["ci_method"] == "t" and m2po["low_confidence"]
    assert m2po["poi_low"] is None  # 2 vs 2 seeds: no PoI interval (it would read [1.00, 1.00])
    diverged = next(c for c in bundle["cells"] if c["algorithm"] == "gmc_grpo" and c["delay"] == 0)
    assert diverged["seeds"] == 3 and diverged["collapse_rate"] == pytest.approx(1 / 3)
    assert bundle["collapse_rules"]["patience"] == 2  # from suite.yaml's report section
    assert bundle["collapse_rules"]["entropy_max"] is None  # inf written as null


def test_a_partial_suite_names_what_has_no_result(built):
    # 3 estimators x 2 delays x seeds 0-2 = 18 trials; seed 2 has: m2po-d8 failed, gmc_grpo-d8 running (no
    # status.json), gmc_grpo-d0 diverged (a result); the other three seed-2 trials never started. m2po does not
    # read eps: the plan's ids drop it, and the fixture's directories (named with it) still match by point
    index, _ = built
    bundle = json.loads((index.parent / "results.json").read_text())
    assert bundle["missing_trials"] == ["grpo-d0-e0.2-g8-s2", "grpo-d8-e0.2-g8-s2", "gmc_grpo-d8-e0.2-g8-s2",
                                        "m2po-d0-g8-s2", "m2po-d8-g8-s2"]
    assert ("partial suite: 13 of its 18 trials have a result; the tables cover those only. Missing 5 (3 not "
            "started, 2 running, failed or invalid)") in index.read_text()


def test_the_report_command_ends_with_the_partial_suite_line(tmp_path, capsys):
    from harness.cli import main
    suite = make_results(tmp_path / "results")
    assert main(["report", str(suite), "--out", str(tmp_path / "report"), "--raw"]) == 0
    last = capsys.readouterr().out.splitlines()[-2:]
    assert last[0] == ("partial suite: 13 of its 18 trials have a result; the tables cover those only. Missing 5 (3 not "
                       "started, 2 running, failed or invalid): grpo-d0-e0.2-g8-s2, grpo-d8-e0.2-g8-s2, "
                       "gmc_grpo-d8-e0.2-g8-s2 and 2 more. `stalebench run` on the same suite runs what is missing.")
    assert last[1].startswith("report: ")


def test_hostile_strings_are_escaped(built):
    index, site = built
    for page in (index, site):
        text = page.read_text()
        assert HOSTILE not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "<img src=x" not in text
    assert "&lt;img src=x onerror=alert(2)&gt; notes" in index.read_text()


def test_a_hostile_suite_name_is_refused(tmp_path):
    suite = write_suite(tmp_path, "ok", ("grpo",), (0,), (0,), steps=10)
    (suite / "suite.yaml").write_text(json.dumps({"suite": HOSTILE, "base": {}}))
    with pytest.raises(ValueError, match="is not a valid name") as err:
        build_report(suite, tmp_path / "out")
    assert "\n" not in str(err.value)


def test_site_links_to_suite_page(built):
    index, site = built
    text = site.read_text()
    assert f'href="{index.parent.name}/index.html"' in text
    assert "stalebench leaderboards" in text


def test_site_lists_an_unreadable_bundle_instead_of_dropping_it(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text('{"schema_version": 1, "lead')
    (tmp_path / "future").mkdir()
    (tmp_path / "future" / "results.json").write_text('{"schema_version": 3}')
    text = build_site(tmp_path).read_text()
    assert 'href="broken/index.html"' in text and "unreadable results.json" in text
    assert "schema_version 3, expected 2" in text


def test_site_lists_a_study_and_its_nested_reports(tmp_path):
    """reports/claims/ (a page over several suites, no results.json) is linked as a study; its reports
    reports/claims/<part>/ are listed under their path."""
    (tmp_path / "claims" / "lab").mkdir(parents=True)
    (tmp_path / "claims" / "index.html").write_text("<p>claims</p>")
    (tmp_path / "claims" / "lab" / "results.json").write_text('{"schema_version": 1}')
    text = build_site(tmp_path).read_text()
    assert 'href="claims/index.html">claims</a>' in text
    assert 'href="claims/lab/index.html">claims/lab</a>' in text


def test_docs_link_follows_the_page_depth(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "report.md").write_text("# report")
    assert report_html.docs_url(tmp_path / "reports" / "quickstart") == "../../docs/report.md"
    assert report_html.docs_url(tmp_path / "reports" / "claims" / "lab") == "../../../docs/report.md"


def test_default_out_dir_and_extra_sections(tmp_path, monkeypatch):
    """Extra sections go through the page's templates: text escaped, figures shown, tables by the macro."""
    suite = write_suite(tmp_path / "results", "tiny", ("grpo", "m2po"), (0,), (0,), steps=10)
    monkeypatch.setattr(report_html, "report_sections", lambda res, out: [report_html.Section("Lab <b>", [
        {"text": "<p id='lab-fragment'>bias</p>"}, {"figure": "lab x.png", "caption": "a <caption>"},
        {"table": {"columns": ["claim", "verdict"], "rows": [{"claim": "1. <i>", "verdict": "consistent"}]}}])])
    monkeypatch.chdir(tmp_path)
    index = build_report(suite)
    assert index == Path("reports") / "tiny" / "index.html"
    text = index.read_text()
    assert "Lab &lt;b&gt;" in text and "<p>&lt;p id=&#39;lab-fragment&#39;&gt;bias&lt;/p&gt;</p>" in text
    assert '<figure><img src="lab%20x.png" alt="a &lt;caption&gt;"><figcaption>a &lt;caption&gt;</figcaption>' in text
    assert '<table class="sortable" id="extra-1-3">' in text
    assert '<td data-sort="1. &lt;i&gt;" class="wrap">1. &lt;i&gt;</td>' in text
    assert "accuracy_vs_delay.png" not in text  # one delay: no accuracy-vs-delay figure


def test_report_of_only_unfinished_trials(tmp_path):
    # one trial with only a status.json, one with only a truncated metrics line: no params anywhere
    suite = tmp_path / "results" / "edge"
    (suite / "t1").mkdir(parents=True)
    (suite / "t2").mkdir()
    (suite / "suite.yaml").write_text("suite: edge\nbase: {}\n")
    (suite / "t1" / "status.json").write_text('{"status": "failed", "error": "boom"}')
    (suite / "t2" / "metrics.jsonl").write_text('{"step": 1, "loss/value": 1')
    index = build_report(suite, tmp_path / "reports" / "edge")
    bundle = json.loads((index.parent / "results.json").read_text())
    assert bundle["leaderboard"] == [] and bundle["figures"] == []
    notes = {t["trial_id"]: (t["status"], t["notes"]) for t in bundle["trials"]}
    assert notes["t1"] == ("failed", "no params.json")
    assert notes["t2"] == ("pending", "no params.json; no status.json (pending); "
                                      "1 unreadable line(s) in metrics.jsonl")
    assert "boom" in index.read_text()


def test_bad_results_dirs_raise_value_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no suite.yaml"):
        build_report(tmp_path / "empty")
    (tmp_path / "empty" / "suite.yaml").write_text("suite: empty\nbase: {}\n")
    with pytest.raises(ValueError, match="no trial directories"):
        build_report(tmp_path / "empty")
    (tmp_path / "empty" / "suite.yaml").write_text("suite: empty\nbase: {}\nreport: {colapse: {}}\n")
    with pytest.raises(ValueError, match="colapse.*valid keys"):
        build_report(tmp_path / "empty")
    with pytest.raises(ValueError, match="does not exist"):
        build_site(tmp_path / "no-reports")


FORBIDDEN = ("torch", "ray", "transformers", "mlflow", "wandb", "harness.trial.trainer", "harness.lab.sweeps",
             "harness.lab.estimate", "harness.lab.policy", "algorithms")


def _report_imports(build: str) -> list[str]:
    """The modules a fresh interpreter holds after running `build` (which builds a report)."""
    code = f"import sys, json; from pathlib import Path; from harness.report import build_report; {build}; " \
           f"print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_report_never_imports_torch_ray_or_the_trainer(tmp_path):
    loaded = _report_imports(
        "from tests.fixtures.synthetic_results import write_suite; "
        f"d = write_suite(Path({str(tmp_path)!r}), 'imports', ('grpo',), (0, 2), (0,), steps=10); "
        f"build_report(d, Path({str(tmp_path / 'out')!r}))")
    assert "harness.report.figures" in loaded                              # it did build a report
    assert not [m for m in loaded if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)]


def test_a_lab_report_only_reads(tmp_path):
    """An estimator-lab suite's report (its trials and the sweeps `stalebench run` stored) is rendered
    without torch or the lab's computing modules, with the lab section in the page's own templates, and
    with the study imported (studies/), its verdict per claim after the lab's sections."""
    from harness.config.run import build_run_config
    from harness.lab.dynamics import LabRun
    from harness.lab.sweeps import store_sweeps
    from harness.store.tracking import RunLog

    lab = {"vocab": 3, "length": 2, "reward_frac": 0.3, "measure_groups": 40, "loop_groups": 8,
           "sweep_group_sizes": [2, 4, 8], "sweep_group_size": 4, "sweep_groups": 100, "sweep_fit_min_g": 2}
    base = {"algorithm": "grpo", "group_size": 4, "eval": {"every_steps": 5}, "lab": lab,
            "train": {"steps": 6, "lr": 5.0, "prompts_per_step": 2, "advantage": "mean", "grad_clip": 0.0}}
    suite = {"suite": "lab-read", "base": base, "grid": {"algorithm": ["gmc_grpo", "tic_grpo"], "delay": [0, 2]},
             "seeds": [0]}
    results = tmp_path / "lab-read"
    results.mkdir()
    (results / "suite.yaml").write_text(yaml.safe_dump(suite))
    for algo in suite["grid"]["algorithm"]:
        for delay in suite["grid"]["delay"]:
            params = {"algorithm": algo, "delay": delay, "seed": 0}
            log = RunLog(results / f"{algo}-d{delay}-s0")
            log.start({}, {**params, "trial_id": f"{algo}-d{delay}-s0"}, {"config_sha256": "x"})
            outcome = LabRun(build_run_config(base, params), log).run()
            log.status(outcome.status, step=outcome.step)
    assert store_sweeps(results).startswith("lab: fixed-policy sweeps computed")
    out = tmp_path / "out"
    loaded = _report_imports(f"import studies; build_report(Path({str(results)!r}), Path({str(out)!r}))")
    assert "harness.lab.report" in loaded and "studies.lab_verdicts" in loaded   # both sections were rendered
    assert not [m for m in loaded if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)]
    page = (out / "index.html").read_text()
    titles = re.findall(r"<h2>(Estimator lab: [^<]*)</h2>", page)
    assert titles[0] == "Estimator lab: bias vs group size" and titles[-1] == "Estimator lab: verdicts per claim"
    assert re.search(r'<table class="sortable" id="extra-\d+-\d+">', page)   # tables through the table macro
    assert '<figure><img src="lab_bias_vs_g.png" alt="Monte Carlo bias' in page and (out / "lab_bias_vs_g.png").is_file()
    assert {p.name: png_width(p) for p in out.glob("*.png") if png_width(p) < MIN_FIGURE_PX} == {}


def _browser():
    """A headless Chromium (the Debian one), or skip with the reason."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright not installed (pip install playwright)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install -y chromium)")
    return sync_api.sync_playwright()


def _open(browser, path: Path):
    """A page at file://path, with lists collecting console errors, page errors and dialogs."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems: list[str] = []
    page.on("console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def on_dialog(dialog):
        problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()
    page.on("dialog", on_dialog)
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, problems


def _column(page, table: str, col: int) -> list[str]:
    """The displayed text of one column, top to bottom."""
    return page.eval_on_selector_all(f"#{table} tbody tr",
                                     f"rows => rows.map(r => r.cells[{col}].textContent)")


def test_report_and_site_in_a_real_browser(built):
    index, site = built
    with _browser() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page, problems = _open(browser, index)
            widths = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.src, i.complete && i.naturalWidth, i.width, "
                "i.parentElement.clientWidth])")
            assert widths and all(w > 0 for _, w, _, _ in widths), widths
            # shown at natural size (>= 900 px), shrunk only to the width the page has
            assert all(w >= MIN_FIGURE_PX and shown == min(w, room) for _, w, shown, room in widths), widths
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
            # every figure is on the page, loaded, with a caption and an SVG link; one screenshot each
            figures = page.eval_on_selector_all(
                "#figures figure", "fs => fs.map(f => [f.querySelector('img').getAttribute('src'), "
                "f.querySelector('img').naturalWidth, f.querySelector('figcaption a').getAttribute('href')])")
            srcs = [f[0] for f in figures]
            for stem in ("accuracy_vs_delay", "learning_curves", "collapse_heatmap", "diagnostics_vs_step",
                         "diagnostics_vs_delay"):
                assert f"{stem}.png" in srcs, srcs
            for i, (src, width, svg) in enumerate(figures, start=1):
                assert width > 0 and svg == src.replace(".png", ".svg")
                page.locator(f"#fig-{i}").screenshot(path=str(ARTIFACTS / f"figure-{src}"))
            # the paper table and the low-confidence notice are visible
            page.locator("#paper-table").screenshot(path=str(ARTIFACTS / "paper-table.png"))
            assert page.is_visible("#paper-table .lowconf")
            assert "*" in page.inner_text("#paper-1 tbody")

            headers = page.eval_on_selector_all("#leaderboard-table thead th",
                                                "hs => hs.map(h => h.textContent)")
            algo_col = headers.index("algorithm")
            iqm_col = headers.index("final acc [95% CI]")
            assert _column(page, "leaderboard-table", 0) == ["1", "2", "3"]  # ranked: best first
            def iqms() -> list[float]:  # "0.558 [0.550, 0.565]" -> 0.558
                return [float(x.split()[0]) for x in _column(page, "leaderboard-table", iqm_col)]
            ranked_iqm = iqms()
            assert ranked_iqm == sorted(ranked_iqm, reverse=True)
            page.click(f"#leaderboard-table thead th:nth-child({iqm_col + 1})")  # ascending
            assert iqms() == sorted(ranked_iqm)
            assert _column(page, "leaderboard-table", 0) == ["3", "2", "1"]
            page.click(f"#leaderboard-table thead th:nth-child({iqm_col + 1})")  # descending
            assert _column(page, "leaderboard-table", 0) == ["1", "2", "3"]
            page.click(f"#leaderboard-table thead th:nth-child({algo_col + 1})")
            assert _column(page, "leaderboard-table", algo_col) == ["gmc_grpo", "grpo", "m2po"]
            assert problems == []

            page, problems = _open(browser, site)
            assert page.title() == "stalebench leaderboards"
            page.click("section.suite-entry h3 a")
            page.wait_for_load_state("load")
            assert page.url == index.resolve().as_uri()
            assert page.eval_on_selector("h1", "h => h.textContent") == f"stalebench report: {NAME}"
            assert problems == []
        finally:
            browser.close()


# ---------------------------------------------------------------- worker processes: never after Ray, one crash named


def _raises():
    raise ValueError("bad\ndata")


def _segfaults():
    import faulthandler
    import signal
    faulthandler.disable()      # pytest's handler would print the child's stack
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_job_that_raises_or_kills_its_worker_is_named_and_the_others_are_kept(monkeypatch):
    monkeypatch.setattr(parallel, "_cores", lambda: 2)
    if not parallel.can_fork():
        pytest.skip("this process cannot fork workers (a thread or Ray is loaded)")
    out = parallel.fork_map([lambda: 1, _raises, _segfaults, lambda: 4], isolate=True)
    assert out[0] == 1 and out[3] == 4
    assert out[1] == parallel.Failed("ValueError: bad data")           # one line
    assert isinstance(out[2], parallel.Failed) and "worker process died" in out[2].reason


def test_no_worker_is_forked_once_ray_is_loaded(monkeypatch):
    """Forked children of a process that loaded Ray die in _raylet.so: run in order instead."""
    monkeypatch.setattr(parallel, "_cores", lambda: 2)
    monkeypatch.setitem(sys.modules, "ray", type(sys)("ray"))
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", lambda *a, **k: pytest.fail("forked after Ray loaded"))
    assert parallel.fork_map([lambda: os.getpid()] * 2) == [os.getpid()] * 2


def test_a_figure_that_fails_is_named_and_the_rest_of_the_report_is_written(tmp_path, monkeypatch, capsys):
    suite = make_results(tmp_path / "results")
    from harness.registry import FIGURES
    FIGURES.names()                                         # the built-in figures first
    monkeypatch.setattr(FIGURES, "_entries", {**FIGURES._entries, "learning": lambda *a, **k: _raises()})
    index = build_report(suite, tmp_path / "out")
    page = index.read_text()
    assert "figure &#39;learning&#39; was not drawn: ValueError: bad data" in page
    bundle = json.loads((index.parent / "results.json").read_text())
    assert bundle["figures"] and not any(f["file"].startswith("learning") for f in bundle["figures"])
    assert "stalebench: warning: figure 'learning' was not drawn" in capsys.readouterr().err


def test_site_leads_with_the_current_reference_then_earlier_ones_then_companions_and_studies(tmp_path):
    """Issue 53: the site sorted alphabetically put claims-eps first and reference-v3 16th of 19. The
    committed reports' own results.json (their runs' start dates) now give the order."""
    repo = Path(__file__).resolve().parents[1]
    repo_reports = repo / "reports"
    tracked = subprocess.run(["git", "ls-files", "reports"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.split()                   # the committed bundles only: a user's
    for bundle in (repo / f for f in tracked if f.endswith("/results.json")):  # own runs may sit beside them
        target = tmp_path / bundle.parent.relative_to(repo_reports)
        target.mkdir(parents=True)
        shutil.copy(bundle, target / "results.json")
    page = build_site(tmp_path).read_text()
    order = re.findall(r'<h3><a href="[^"]+">([^<]+)</a></h3>', page)
    groups = re.findall(r'<h2 class="site-group">([^<]+)</h2>', page)
    assert order[:4] == ["reference-v4", "reference-v3", "reference-v2", "reference"], order
    # companions under their reference (v3's first), each group by its runs' start; then the studies, newest first
    assert order[4:7] == ["reference-v3-bridge", "reference-v3-bases", "reference-v2-bases"], order
    assert order.index("reference-v2-followup") < order.index("design-v3") < order.index("claims-eps"), order
    assert order[-1] == "claims-lab" and len(order) == 19, order     # started 2026-12-03, the oldest study
    assert groups == ["The current reference", "Earlier references", "Companions of reference-v3",
                      "Companions of reference-v2", "Studies"], groups
