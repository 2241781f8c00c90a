"""The paper's study: the work of one paper over stalebench, kept out of the product (harness/).

It sits above harness/: its modules import harness and algorithms, harness never imports them
(tests/test_architecture.py). What a study adds to the product's outputs it registers, like a plugin:
importing this package names its composition root, studies/builtins.py, whose registries' next use loads
its entries (the verdict per claim of an estimator-lab report). `stalebench --plugin studies report ...`
renders a report with them; the scripts below import the package themselves.

    lab_verdicts.py          the lab's claims: a verdict per claim, a section of a lab suite's report
    claims_verdicts.py       claims (c), (d), (f) of docs/claims.md from the LLM grids and the v2/v3 tables
    claims_page.py           reports/claims/: one section per claim, every number recomputed (python -m studies.claims_page)
    design_v3.py             benchmark v3's design decisions off its design run (docs/benchmark-v3.md §3–§4)
    design_v4.py             benchmark v4's largest delay off its design run (docs/benchmark-v4.md §3)
    answer_v4.py             benchmark v4's answer per estimator and for claim (f) (docs/benchmark-v4.md §6)
    cap_share_simulation.py  the share of groups over the cap for mean-one ratios (docs/benchmark-v3.md)

scripts/ keeps a file of each script's old name that runs it, for the commands that committed suites and
reports cite.
"""
from harness.registry import compose

compose("studies.builtins")
