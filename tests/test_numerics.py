"""The pinned float path (harness/trial/numerics.py): the rule, its warnings, what a trial records, and that the
default pinned path computes bit for bit what the explicitly forced variables compute."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.trial import numerics
from harness.errors import ConfigError
from harness.report.provenance import summarize

REPO = Path(__file__).resolve().parents[1]
AVX2_CPU = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx fma avx2\n"
OLD_CPU = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 sse4_2 avx\n"          # Sandy Bridge: no AVX2, no FMA


def cpu(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def test_pin_sets_the_pinned_variables_that_are_unset(tmp_path):
    env: dict[str, str] = {}
    assert numerics.pin(env, cpu(tmp_path, AVX2_CPU), modules={}) is None
    assert env == numerics.PINNED == {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                      "OPENBLAS_CORETYPE": "Haswell"}
    assert numerics.pin(env, cpu(tmp_path, AVX2_CPU), modules={"torch": object()}) is None   # already pinned: fine


def test_a_conflicting_variable_is_kept_and_named_in_one_line(tmp_path):
    env = {"MKL_CBWR": "AVX2"}
    message = numerics.pin(env, cpu(tmp_path, AVX2_CPU), modules={})
    assert env["MKL_CBWR"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "MKL_CBWR=AVX2" in message and "MKL_CBWR=COMPATIBLE" in message and "\n" not in message


def test_torch_imported_first_is_named(tmp_path):
    message = numerics.pin({}, cpu(tmp_path, AVX2_CPU), modules={"torch": object()})
    assert message.startswith("torch was imported before the float path was pinned") and "\n" not in message


def test_native_rule_sets_nothing_and_an_unknown_rule_is_a_config_error(tmp_path):
    env = {numerics.RULE_ENV: "native"}
    assert numerics.pin(env, cpu(tmp_path, AVX2_CPU), modules={}) is None and env == {numerics.RULE_ENV: "native"}
    with pytest.raises(ConfigError, match="expected one of pinned, native"):
        numerics.pin({numerics.RULE_ENV: "fast"}, cpu(tmp_path, AVX2_CPU), modules={})


def test_a_cpu_without_avx2_is_not_forced_onto_avx2_kernels(tmp_path):
    # ATen takes ATEN_CPU_CAPABILITY=avx2 without checking the CPU: setting it here would crash on the
    # first AVX2 instruction, so nothing is set and the warning says why.
    env: dict[str, str] = {}
    message = numerics.pin(env, cpu(tmp_path, OLD_CPU), modules={})
    assert env == {} and "GenuineIntel lacks avx2, fma" in message


def test_this_process_is_on_the_pinned_path():
    # conftest.py pins before any test imports torch; record() reads back what torch and MKL use.
    if not {"avx2", "fma"} <= numerics.cpu_info()[1]:
        pytest.skip("this CPU has no AVX2/FMA: nothing to pin")
    rec = numerics.record()
    assert rec["float_path"] == numerics.PINNED_PATH == "aten=avx2 mkl=compatible"
    assert rec["pinned"] is True and rec["rule"] == "pinned" and rec["mkl_cbwr"] == "compatible"
    assert rec["threads"] >= 1 and rec["torch"] and rec["cpu_vendor"] != "unknown"


# A forward/backward and an AdamW step through both libraries: MKL's SGEMM (the matmuls) and ATen's
# vectorized kernels (rsqrt, silu, log_softmax, AdamW); a digest of every output bit.
DIGEST = """
def digest():
    import hashlib, torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 48, generator=g)
        w1 = torch.randn(48, 96, generator=g).requires_grad_()
        w2 = torch.randn(96, 40, generator=g).requires_grad_()
        h = x @ w1
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = torch.nn.functional.silu(h) @ w2
        torch.log_softmax(h, -1)[:, 0].mean().backward()
        grads = [w1.grad.clone(), w2.grad.clone()]
        torch.optim.AdamW([w1, w2], lr=1e-2).step()
        return hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in (h, *grads, w1, w2))).hexdigest()
    finally:
        torch.set_num_threads(threads)
"""


def digest_here() -> str:
    namespace: dict = {}
    exec(DIGEST, namespace)                # noqa: S102 — the test's own source, above
    return namespace["digest"]()


def digest_in_a_process(**env: str) -> str:
    """The digest in a fresh process whose float-path variables are exactly `env`."""
    clean = {k: v for k, v in os.environ.items() if k not in (*numerics.PINNED, numerics.RULE_ENV)}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), clean.get("PYTHONPATH")]))
    code = DIGEST + "\nfrom harness.trial import numerics\nnumerics.warn_once(numerics.pin())\nprint(digest())\n"
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         timeout=300, check=True)
    assert "warning" not in out.stderr, out.stderr
    return out.stdout.strip()


def test_the_pinned_default_computes_bit_for_bit_what_the_forced_variables_compute():
    # This process was pinned by conftest.py's pin() (the default rule); the other two set the variables
    # by hand and tell pin() to leave them alone.
    if not numerics.record()["pinned"]:
        pytest.skip("this process is not on the pinned path (no AVX2/FMA, or a float-path variable set by hand)")
    forced = digest_in_a_process(STALEBENCH_FLOAT_PATH="native", MKL_CBWR="COMPATIBLE", ATEN_CPU_CAPABILITY="avx2",
                                 ONEDNN_MAX_CPU_ISA="AVX2")
    scalar = digest_in_a_process(STALEBENCH_FLOAT_PATH="native", MKL_CBWR="COMPATIBLE", ATEN_CPU_CAPABILITY="default")
    assert digest_here() == forced
    assert scalar != forced               # the digest sees a change of float path (ATen's scalar kernels)


def test_a_trial_resumed_on_another_float_path_is_recorded_as_mixed():
    a, b = {"float_path": "aten=avx2 mkl=compatible", "pinned": True}, {"float_path": "aten=avx512 mkl=auto", "pinned": False}
    assert numerics.resumed(a, a, 50) == a and numerics.resumed(None, b, 50) == b and numerics.resumed(a, b, 0) == b
    mixed = numerics.resumed(a, b, 50)
    assert mixed["float_path"] == "mixed: aten=avx2 mkl=compatible to step 50, then aten=avx512 mkl=auto"
    assert mixed["pinned"] is False


def test_a_trial_resumed_on_another_cpu_vendor_is_recorded_as_mixed():
    amd = {"float_path": "aten=avx2 mkl=compatible", "pinned": True, "cpu_vendor": "AuthenticAMD"}
    intel = {**amd, "cpu_vendor": "GenuineIntel"}
    assert numerics.resumed(amd, dict(amd), 50) == amd
    assert numerics.resumed({"float_path": amd["float_path"]}, intel, 50) == intel      # vendor not recorded
    mixed = numerics.resumed(amd, intel, 50)
    assert mixed["float_path"] == ("mixed: aten=avx2 mkl=compatible (AuthenticAMD) to step 50, "
                                   "then aten=avx2 mkl=compatible (GenuineIntel)")
    assert mixed["pinned"] is False and mixed["cpu_vendor"] == "GenuineIntel"


def prov(path: str | None, vendor: str = "AuthenticAMD") -> dict:
    return {"git_commit": "abc", "numerics": None if path is None else {"float_path": path, "cpu_vendor": vendor}}


def test_the_report_warns_when_a_suite_mixes_float_paths():
    summary = summarize({"a": prov("aten=avx2 mkl=compatible"), "b": prov("aten=avx512 mkl=auto", "GenuineIntel"),
                         "c": prov("aten=avx2 mkl=compatible")})
    assert ("This suite mixes 2 float paths: aten=avx2 mkl=compatible (2 trials), aten=avx512 mkl=auto (1 trials)"
            in summary.warnings)
    assert ("float path", [("aten=avx2 mkl=compatible", 2), ("aten=avx512 mkl=auto", 1)]) in summary.fields


def test_the_report_warns_when_a_suite_mixes_cpu_vendors_on_one_float_path():
    summary = summarize({"a": prov("aten=avx2 mkl=compatible"), "b": prov("aten=avx2 mkl=compatible", "GenuineIntel")})
    assert "This suite mixes 2 CPU vendors: AuthenticAMD (1 trials), GenuineIntel (1 trials)" in summary.warnings
    assert not any("float paths:" in w for w in summary.warnings)


def test_a_mixes_warning_names_the_most_common_values_and_counts_the_rest():
    # a campaign commits each trial as it lands, so its trials start from many commits: the warning on top
    # names five, the provenance section every one
    commits = {f"t{i}": {"git_commit": f"c{min(i, 6)}"} for i in range(9)}       # c6 three times, c0..c5 once
    summary = summarize(commits)
    assert ("This suite mixes 7 git commits: c6 (3 trials), c0 (1 trials), c1 (1 trials), c2 (1 trials), "
            "c3 (1 trials), and 2 more (the provenance section lists every one)") in summary.warnings
    assert dict(summary.fields)["git commit"] == [("c6", 3), *((f"c{i}", 1) for i in range(6))]


def test_the_report_says_when_some_trials_do_not_record_their_float_path():
    summary = summarize({"a": prov("aten=avx2 mkl=compatible"), "b": prov(None)})
    assert any(w.startswith("1 of 2 trials do not record their float path") for w in summary.warnings)
    assert not any("float paths:" in w for w in summarize({"a": prov("x"), "b": prov("x")}).warnings)


def run_script(name: str, *args: str, cwd: Path | None = None) -> list[str]:
    """The stdout lines of scripts/<name> run in a fresh process (each pins the float path before torch)."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / name), *args], capture_output=True, text=True,
                         cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_the_first_update_digest_names_every_tensor_and_repeats_on_one_machine(tmp_path, tiny_base):
    # scripts/first_update_digest.py: the diff of two machines' outputs names the first tensor that differs
    import yaml
    suite = tmp_path / "tiny.yaml"
    suite.write_text(yaml.safe_dump({"suite": "tiny-digest", "version": 1, "base": tiny_base,
                                     "grid": {"algorithm": ["grpo"], "delay": [0]}, "seeds": [0]}))

    def run() -> list[str]:
        return run_script("first_update_digest.py", str(suite), "algorithm=grpo,delay=0,seed=0", cwd=tmp_path)

    lines = run()
    assert lines[0].startswith("# ") and numerics.cpu_info()[0] in lines[0]
    kinds = [line.split()[0] for line in lines[1:]]
    n = kinds.count("param")
    assert n > 0 and kinds.count("grad") == kinds.count("exp_avg") == kinds.count("exp_avg_sq") == n
    assert run() == lines
    import tempfile
    left = [p for p in Path(tempfile.gettempdir()).glob("first-update-*") if p.stat().st_mtime > suite.stat().st_mtime]
    assert not left                                 # its temporary results directory is removed


def test_fused_adamw_is_the_per_tensor_adamw_with_a_correctly_rounded_root():
    # scripts/adamw_root_check.py: the evidence for the vendor-independent option in docs/reproducibility.md §5
    lines = run_script("adamw_root_check.py")
    assert "one AdamW step, (512, 128): moments per-tensor == fused: True" in lines
    assert lines[-1].endswith("per-tensor (rounded root) vs fused: 0.0000%")
    assert sum("not correctly rounded" in line for line in lines) == 3
