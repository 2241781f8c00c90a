"""`stalebench` command line. Every user error is one line on stderr and exit status 2.

    stalebench run SUITE.yaml [--address ADDR]     all trials on Ray Tune, logged to MLflow, results/<suite>/
    stalebench status SUITE                        trials by status
    stalebench report results/<suite>              reports/<suite>/index.html
    stalebench site                                reports/index.html, the leaderboard of every suite
    stalebench train SUITE.yaml --trial 'algorithm=gmc_grpo,delay=16,seed=0'   one trial in-process
    stalebench tune SUITE.yaml [--dry-run]         learning rates per estimator (Optuna TPE or a log grid, Ray Tune)
    stalebench eval --model PATH --benchmarks gsm8k,math500
    stalebench check SUITE.yaml                    validate a suite without running it
    stalebench reproduce reports/reference --only 'delay=64' [--steps N]   rerun committed cells (first N steps)
    stalebench build-base --name tiny-addrev-v2    build a new frozen base checkpoint version

run, train, check and tune take `--set key=value` overrides of the suite's base (e.g. --set train.lr=3e-4);
they become part of each trial's resolved config, and so of its identity.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from harness.errors import ConfigError, os_error_line


SUITE_HELP = "a suite file, a suite name under suites/ (quickstart), or a results directory (results/quickstart)"


def _suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help=SUITE_HELP)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting of the suite's base (dotted key, YAML value); repeatable")
    p.add_argument("--overrides", default=None, metavar="FILE",
                   help="per-estimator overrides to apply, e.g. results/tune-lr/tuned-overrides.yaml")
    p.add_argument("--max-trials", type=int, default=None, help="refuse grids larger than this (default 20000)")


def _identity_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rerun-changed", dest="on_change", action="store_const", const="rerun-changed", default="error",
                   help="rerun trials whose resolved config changed (old results kept under .superseded/)")
    g.add_argument("--force", dest="on_change", action="store_const", const="force",
                   help="rerun every trial (old results kept under .superseded/)")


def suite_file(arg: str) -> Path:
    """The suite file meant by SUITE: a file, suites/<name>.yaml, or <results dir>/suite.yaml (the
    effective suite of the last run there)."""
    path = Path(arg)
    from harness.store.trialdir import suite_file as results_suite_file
    candidates = [path, Path("suites") / f"{arg}.yaml", results_suite_file(path), results_suite_file(Path("results") / arg)]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ConfigError(f"{arg}: no such suite ({SUITE_HELP})")
    return found


def results_dir(arg: str, results_root: Path) -> Path:
    """The results directory meant by SUITE: a directory, results/<name>, or that of a suite file's name."""
    path = Path(arg)
    if path.is_dir():
        return path
    if (results_root / arg).is_dir():
        return results_root / arg
    if path.is_file() or (Path("suites") / f"{arg}.yaml").is_file():
        from harness.config.suite import read_suite_yaml
        return results_root / read_suite_yaml(suite_file(arg)).name
    raise ConfigError(f"{arg}: no suite results found ({SUITE_HELP})")


def _load(args):
    """The suite of the command line and its trials, validated and expanded once."""
    from harness.config.expand import MAX_TRIALS, load_suite_trials
    from harness.store.trialdir import suite_file as results_suite_file
    path = suite_file(args.suite)
    stored = path in (results_suite_file(Path(args.suite)), results_suite_file(Path("results") / args.suite))
    return load_suite_trials(path, args.sets, args.max_trials or MAX_TRIALS, args.overrides, stored)


def _parser() -> argparse.ArgumentParser:
    from harness.store.provenance import package_versions

    p = argparse.ArgumentParser(prog="stalebench", description="Benchmark policy-gradient estimators under stale rollouts.")
    p.add_argument("--version", action="version", version=f"stalebench {package_versions(('stalebench',))['stalebench']}")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE before the command, to register its components (estimators, report "
                        "sections, ...); also: entry points 'stalebench.estimators'")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every trial of a suite on Ray Tune")
    _suite_args(run)
    _identity_args(run)
    run.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray cluster address (default: local Ray)")
    run.add_argument("--results", default="results", help="results root (default: results/)")
    run.add_argument("--report", action="store_true", help="write the suite's report when the run ends")
    run.add_argument("--only", action="append", default=[], metavar="KEY=VALUE,...",
                     help="run only the trials matching, e.g. 'algorithm=grpo,delay=32' (repeatable: any matches)")
    run.add_argument("--dry-run", action="store_true", help="list the trials and estimate the cost; run nothing")
    run.add_argument("--restore-only", action="store_true",
                     help="a campaign: bring its landed trials into results/<suite>/ (to report them); run nothing")
    st = sub.add_parser("status", help="summarize a suite's trials")
    st.add_argument("suite", help=SUITE_HELP)
    st.add_argument("--results", default="results")
    rep = sub.add_parser("report", help="write the HTML report of a suite's results")
    rep.add_argument("suite", help=SUITE_HELP + ", or a raw.tar.gz packed by --raw (re-render a committed report)")
    rep.add_argument("--results", default="results")
    rep.add_argument("--out", default=None, help="output directory (default: reports/<suite>)")
    rep.add_argument("--formats", default="png", help="figure formats, comma-separated: png (default), svg, png,svg")
    rep.add_argument("--raw", action="store_true",
                     help="also pack the trials' raw files (config, metrics, eval, ...) into <out>/raw.tar.gz")
    rep.add_argument("--merge", default=None, metavar="RAW_TAR_GZ",
                     help="rank your trials together with a committed report's raw trials (its raw.tar.gz)")
    cmp = sub.add_parser("compare", help="two suites' results side by side, with differences and their CIs")
    cmp.add_argument("a", help="results directory (or suite name) A, or a committed report directory with raw.tar.gz")
    cmp.add_argument("b", help="results directory (or suite name) B, or a committed report directory with raw.tar.gz")
    cmp.add_argument("--results", default="results")
    site = sub.add_parser("site", help="build reports/index.html from every suite's report")
    site.add_argument("--reports", default="reports")
    tr = sub.add_parser("train", help="run one trial of a suite in-process (debugging)")
    _suite_args(tr)
    _identity_args(tr)
    tr.add_argument("--trial", required=True, help="'key=value,...' selecting one trial, e.g. 'algorithm=grpo,delay=0,seed=0'")
    tr.add_argument("--results", default="results")
    tu = sub.add_parser("tune", help="tune per-estimator learning rates (Optuna TPE or a log grid) through Ray Tune")
    _suite_args(tu)
    tu.add_argument("--address", default=os.environ.get("RAY_ADDRESS"))
    tu.add_argument("--results", default="results")
    tu.add_argument("--dry-run", action="store_true", help="count the tuning trials and estimate the cost; run nothing")
    ev = sub.add_parser("eval", help="evaluate a model or kept trial policies on the local benchmark files with lm-eval")
    what = ev.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="local model directory")
    what.add_argument("--trial", help="a trial's results directory (results/<suite>/<trial_id>): its kept policy")
    what.add_argument("--suite", help="a suite's results directory: every trial's kept policy")
    ev.add_argument("--benchmarks", default="gsm8k,math500", help="comma-separated; addrev is the CPU default's task")
    ev.add_argument("--limit", type=int, default=None, help="problems per benchmark (default: all)")
    ev.add_argument("--out", default="results/eval", help="with --model: results go to OUT/<model dir name>/")
    ev.add_argument("--max-new-tokens", type=int, default=1024)
    ev.add_argument("--mlflow-run-id", default=None, help="also log scores to this MLflow run")
    rp = sub.add_parser("reproduce", help="rerun a committed leaderboard's cells; does each new run agree?")
    rp.add_argument("report_dir", help="a report directory with raw.tar.gz (reports/reference), or a results directory")
    rp.add_argument("--only", action="append", default=[], metavar="KEY=VALUE,...",
                    help="rerun only the trials matching, e.g. 'algorithm=grpo,delay=64' (repeatable: any matches)")
    rp.add_argument("--results", default="results", help="results root: the reruns go to RESULTS/reproduce/<suite>/")
    rp.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray cluster address (default: local Ray)")
    rp.add_argument("--in-process", action="store_true", help="run the trials one by one in this process, without Ray")
    rp.add_argument("--steps", type=int, metavar="N", help="rerun each trial's first N steps (an eval step) only")
    ch = sub.add_parser("check", help="validate a suite file and list its trials")
    _suite_args(ch)
    es = sub.add_parser("estimators", help="list every registered estimator with its family, source and parameters")
    es.add_argument("--json", action="store_true", help="one JSON object per estimator, one per line")
    es.add_argument("--from", dest="framework", metavar="FRAMEWORK", help="map FRAMEWORK's options (verl, areal, trl, "
                    "openrlhf, nemo-rl, skyrl, prime-rl) to estimators and parameters (docs/framework-map.md)")
    bb = sub.add_parser("build-base", help="build a new frozen base checkpoint version (minutes; differs across CPUs)")
    bb.add_argument("--name", required=True, help="the new version's name, e.g. tiny-addrev-v2")
    bb.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe setting (task, hidden_size, warmup_seed, warmup_target_acc, probe_seeds, ...)")
    bb.add_argument("--out", default=None, help="output directory (default: harness/bases/<name>)")
    return p


def _cmd_run(args) -> int:
    from harness.suite.runner import run_suite
    from harness.suite.status import run_summary
    suite, trials = _load(args)
    if args.dry_run or args.restore_only:
        from harness.suite.plan import dry_run
        from harness.suite.session import restore_only
        print(dry_run(suite, args.only, Path(args.results), trials) if args.dry_run else
              restore_only(suite, trials, Path(args.results), args.on_change))
        return 0
    counts = run_suite(suite, results_root=Path(args.results), address=args.address, progress=True,
                       on_change=args.on_change, only=args.only, trials=trials)
    out = Path(args.results) / suite.name
    if args.report:               # in a fresh process: this one runs Ray, and the report forks workers
        done = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(out)], check=False)
        if done.returncode:
            return done.returncode
    print(run_summary(out, counts, reported=args.report))
    return 0 if not counts.get("failed") else 1


def _report(results: Path, out: Path | None, formats: str = "png", raw: bool = False,
            merge: Path | None = None) -> None:
    """Write the report and end with the paper table in the terminal, like lm-eval's closing table."""
    import shutil

    from harness.report import build_report, closing_table
    from harness.report.html import partial_line
    from harness.report.plotting import parse_formats
    kinds = parse_formats(formats)
    merged = None
    if merge is not None:
        from harness.report.merge import merge_trials
        merged = merge_trials(results, merge)
        print(merged.summary(merge))
    try:
        source = merged.path if merged else results
        index = build_report(source, out, kinds)
        if raw:
            from harness.store.archive import ARCHIVE_NAME, TUNE_ARCHIVE_NAME, pack_suite, pack_tuning
            print(f"raw trials: {pack_suite(source, index.parent / ARCHIVE_NAME)}")
            tuning = pack_tuning(source, index.parent / TUNE_ARCHIVE_NAME)
            if tuning:
                print(f"raw tuning trials: {tuning}")
    finally:
        if merged:
            shutil.rmtree(merged.path, ignore_errors=True)
    print(closing_table(index))
    if partial := partial_line(index):        # the page's first warning, where the terminal ends
        print(partial)
    print(f"report: {index}")


def _cmd_train(args) -> int:
    from harness.suite.session import SuiteSession
    from harness.config.expand import select
    from harness.trial.lifecycle import TrialFailed, run_trial
    from harness.store.trialdir import ERROR_LOG

    suite, trials = _load(args)
    trial = select(trials, args.trial)
    suite_dir = SuiteSession.open(suite, [trial], Path(args.results), args.on_change, mirrored=False).suite_dir
    try:
        status = run_trial(trial, suite_dir, progress=True)
    except TrialFailed as exc:
        print(f"stalebench: trial {trial.trial_id} failed: {exc} (traceback in {suite_dir / trial.trial_id / ERROR_LOG})",
              file=sys.stderr)
        return 1
    from harness.suite.status import last_eval
    first, last = last_eval(suite_dir / trial.trial_id, first=True), last_eval(suite_dir / trial.trial_id)
    acc = f"; eval/acc {first:.3f} -> {last:.3f}" if first is not None and last is not None else ""
    print(f"trial {trial.trial_id}: {status.get('status')} at step {status.get('step')}; results in "
          f"{suite_dir / trial.trial_id}{acc}")
    return 0


def _cmd_reproduce(args) -> int:
    from harness.reproduce import reproduce, run_in_process, run_in_ray
    run = run_in_process if args.in_process else run_in_ray(args.address)
    table, rows = reproduce(Path(args.report_dir), args.only, Path(args.results), run, args.steps)
    print(table)
    return 1 if any(verdict in ("DIFFERS", "differs") for _, verdict, _ in rows) else 0


def _cmd_check(args) -> int:
    from harness.store.tracking import check_mirrors, describe_mirrors
    from harness.suite import coincidences, plan          # plan.check_memory: a GPU suite over its card -> one line

    suite, trials = _load(args)
    check_mirrors(suite.tracking)
    print("\n".join([f"suite {suite.name} v{suite.version}: {len(trials)} trials, valid", *plan.check_memory(suite, trials)]))
    if suite.tracking.mirrors():
        print(f"tracking: {describe_mirrors(suite.tracking)}")
    for t in trials:
        print(f"  {t.trial_id}")
    for line in coincidences.describe(coincidences.compute(trials)):
        print(line)
    from harness.report.stats import MIN_CONFIDENT_SEEDS
    if len(suite.seeds) < MIN_CONFIDENT_SEEDS:
        print(f"warning: {len(suite.seeds)} seed(s) per cell; the report marks intervals from fewer than "
              f"{MIN_CONFIDENT_SEEDS} seeds as low-confidence (docs/report.md)", file=sys.stderr)
    return 0


def _cmd_estimators(args) -> int:
    from algorithms.catalog import listing
    print(listing(as_json=args.json, framework=args.framework))
    return 0


def _cmd_status(args) -> int:
    from harness.suite.status import suite_status
    print(suite_status(results_dir(args.suite, Path(args.results))))
    return 0


def _cmd_report(args) -> int:
    out, merge = None if args.out is None else Path(args.out), None if args.merge is None else Path(args.merge)
    if args.suite.endswith(".tar.gz"):              # a committed report's raw trials: render them as they are
        import shutil

        from harness.store.archive import open_archive
        extracted = open_archive(Path(args.suite))
        try:
            _report(extracted, out, args.formats, args.raw, merge)
        finally:
            shutil.rmtree(extracted, ignore_errors=True)
        return 0
    _report(results_dir(args.suite, Path(args.results)), out, args.formats, args.raw, merge)
    return 0


def _cmd_compare(args) -> int:
    from harness.report.compare import compare_committed
    print(compare_committed(results_dir(args.a, Path(args.results)), results_dir(args.b, Path(args.results))))
    return 0


def _cmd_site(args) -> int:
    from harness.report import build_site
    print(f"site: {build_site(Path(args.reports))}")
    return 0


def _cmd_tune(args) -> int:
    from harness.suite import plan, runner
    s, root = _load(args)[0], Path(args.results)
    print(plan.tune_dry_run(s, root) if args.dry_run else f"tuned overrides: {runner.tune_suite(s, root, args.address)}")
    return 0


def _cmd_eval(args) -> int:
    from harness.evaluation import eval_trials, run_eval
    from harness.store.trialdir import is_trial_dir

    benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if args.model:
        model = Path(args.model)
        out = run_eval(model, benchmarks, out_dir=Path(args.out) / model.resolve().name, limit=args.limit,
                       max_new_tokens=args.max_new_tokens, mlflow_run_id=args.mlflow_run_id)
        print(f"eval results: {out}")
        return 0
    where = Path(args.trial or args.suite)
    if not where.is_dir():
        raise ConfigError(f"{where}: not a results directory (give results/<suite>/<trial_id> or results/<suite>)")
    trials = [where] if args.trial else sorted(p for p in where.iterdir() if is_trial_dir(p))
    paths = eval_trials(trials, benchmarks, args.limit, args.max_new_tokens)
    print(f"eval results: {len(paths)} trial(s), in <trial>/benchmarks/results.json")
    return 0


def _cmd_build_base(args) -> int:
    from harness.config.dicts import from_dict
    from harness.store.untrusted import load_yaml_text
    from harness.bases import BASES_DIR
    from harness.bases.models import BaseRecipe, build_base
    from harness.suite.learnability import build_probed_base

    values = {"name": args.name}
    for item in args.sets:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item[:80]!r}: expected key=value, e.g. warmup_seed=1")
        values[key.strip()] = load_yaml_text(raw, f"--set {item[:80]!r}")
    recipe = from_dict(BaseRecipe, values, "recipe")
    out = Path(args.out) if args.out else BASES_DIR / recipe.name
    manifest = (build_probed_base if recipe.probe_seeds else build_base)(recipe, out)
    print(f"base {manifest['name']}: sha256 {manifest['sha256']}, {manifest['warmup_steps']} warm-up steps, "
          f"eval acc {manifest['eval_acc']:.3f} on {manifest['eval_size']} problems -> {out}")
    if "probe" in manifest:
        pr = manifest["probe"]
        print(f"learnability probe (on-policy grpo, {pr['rule']['seeds']} seeds x {pr['rule']['steps']} steps): gain "
              f"{pr['gain']:+.3f}, seed SD {pr['seed_sd']:.3f}, zero-advantage groups {pr['zero_adv_frac']:.2f}, "
              f"mean response {pr['len_mean']:.1f} tokens: accepted")
    print(f"use it with model: {{kind: tiny, base: {recipe.name}}} (a new base is a new benchmark: "
          f"compare results only within one base)")
    return 0


COMMANDS = {"run": _cmd_run, "train": _cmd_train, "check": _cmd_check, "status": _cmd_status, "report": _cmd_report,
            "site": _cmd_site, "tune": _cmd_tune, "eval": _cmd_eval, "build-base": _cmd_build_base,
            "compare": _cmd_compare, "estimators": _cmd_estimators, "reproduce": _cmd_reproduce}


def _one_line(exc: BaseException) -> str:
    """The first line of an error (a file-system error: its path and cause, errors.os_error_line), control
    characters escaped (a path or a plugin's message may hold terminal escape codes), never empty."""
    from harness.store.untrusted import one_line
    text = str(exc) if not isinstance(exc, OSError) or exc.errno is None else os_error_line(exc)
    return one_line(text.splitlines()[0] if text.strip() else type(exc).__name__, 2000)


def main(argv: list[str] | None = None) -> int:
    from harness.trial import numerics
    try:                                         # before anything imports torch (docs/reproducibility.md)
        numerics.warn_once(numerics.pin())
    except ConfigError as exc:
        print(f"stalebench: {_one_line(exc)}", file=sys.stderr)
        return 2
    args = _parser().parse_args((sys.argv[1:] if argv is None else argv) or ["--help"])   # bare: the help, exit 0
    if args.plugin:                              # Ray workers inherit it and import the same modules
        os.environ["STALEBENCH_PLUGINS"] = ",".join(filter(None, [os.environ.get("STALEBENCH_PLUGINS"), *args.plugin]))
    try:
        if args.plugin:                          # registered before the command asks any registry
            from algorithms.registry import load_plugins
            load_plugins()
        return COMMANDS[args.command](args)
    except BrokenPipeError:                      # output piped into `head` and closed
        return 0
    except (ConfigError, ValueError, OSError) as exc:   # OSError: a missing path, a full disk, a read-only folder
        print(f"stalebench: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stalebench: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
