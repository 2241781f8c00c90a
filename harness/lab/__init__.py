"""Estimator lab: exact bias and second moment of the estimators on enumerable synthetic policies.

Modules (see harness/lab/README.md for the definitions and how to run it):
    config.py    LabConfig, the `lab:` section of a run config (torch-free)
    policy.py    the synthetic problem: tabular autoregressive softmax over V^L sequences; exact J, ∇J, KL
    estimate.py  per-group estimator gradients through algorithms.compute_loss; the target g*; bias/MSE stats
    dynamics.py  run_lab_trial(cfg, log): delayed SGD on the synthetic problem (a suite trial)
    sweeps.py    fixed-policy sweeps over G, ε and divergence (for the report)
    results.py   read a lab suite's trial files; log-log slope fits (torch-free)
    figures.py   the report's figures (torch-free)
    report.py    lab_sections(results_dir, out_dir): the report section and per-claim verdicts
"""
