"""Estimator lab: Monte Carlo bias and second moment of the estimators (with standard errors) on enumerable
synthetic policies, where J, ∇J, KL, χ² and the target gradient are exact.

Modules (see harness/lab/README.md for the definitions and how to run it):
    config.py    LabConfig, the `lab:` section of a run config, and what a lab trial refuses (torch-free)
    kind.py      the lab as a trial kind (harness/config/kinds.py): validate, run, after-suite sweeps, report section
    policy.py    the synthetic problem: tabular autoregressive softmax over V^L sequences; exact J, ∇J, KL
    estimate.py  per-draw (one batch) estimator gradients through algorithms.compute_loss; the exact target g*;
                 Monte Carlo bias / second moment / MSE with standard errors
    dynamics.py  LabRun(cfg, log).run(): delayed SGD on the synthetic problem (a suite trial)
    sweeps.py    fixed-policy sweeps over G, ε and divergence, computed by `stalebench run` (store_sweeps)
    sweep_file.py  lab/sweeps.json: the sweeps' inputs, key, reading and writing (torch-free)
    results.py   read a lab suite's trial files; distinct configurations; power-law fits; permutation tests (torch-free)
    figures.py   the report's figures (torch-free)
    report.py    lab_sections(results_dir, out_dir): the report section (blocks): figures, slope fits
"""
