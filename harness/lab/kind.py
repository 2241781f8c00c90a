"""The estimator lab as a trial kind (harness/config/kinds.py): a run config with a `lab:` section trains a
synthetic tabular policy (dynamics.py) instead of an LLM. Torch-free until a trial runs.

    validate        lab/config.check_supported: the run-config settings a lab trial cannot honour
    needs_base      no: the policy is synthetic
    after_suite     the fixed-policy sweeps (sweeps.store_sweeps), stored in <suite>/lab/sweeps.json
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.registry import KINDS
from harness.config.lab import LabConfig, check_supported

if TYPE_CHECKING:
    from harness.config.run import RunConfig
    from harness.config.kinds import Run


@KINDS.register("lab", settings=LabConfig)
class LabKind:
    name = "lab"
    shares_on_policy = False       # each estimator's measured bias is the result, even at delay 0

    @staticmethod
    def claims(cfg: RunConfig) -> bool:
        return cfg.lab is not None

    @staticmethod
    def validate(cfg: RunConfig) -> None:
        check_supported(cfg)

    @staticmethod
    def needs_base(cfg: RunConfig) -> bool:
        return False

    @staticmethod
    def prepare(cfg: RunConfig, log: Any) -> Run:
        from harness.lab.dynamics import LabRun
        return LabRun(cfg, log)

    @staticmethod
    def after_suite(suite_dir: Path) -> str | None:
        """The fixed-policy sweeps, computed once per config. A failure is one line, not a failed run: the
        trials' results stand, and the report says what is missing."""
        from harness.lab.sweeps import store_sweeps                    # torch: only for lab suites

        try:
            return store_sweeps(suite_dir)
        except Exception as exc:  # noqa: BLE001 — reported in one line; running the suite again retries
            reason = str(exc).splitlines()[0][:300] if str(exc) else ""
            return f"lab: the fixed-policy sweeps failed ({type(exc).__name__}: {reason})"
