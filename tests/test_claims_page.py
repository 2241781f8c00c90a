"""studies/claims_page.py: the committed claims page is what the script computes from the committed raw files
(every verdict and statistic of reports/claims/verdicts.json, recomputed), with one verdict of the four per claim."""
from __future__ import annotations

import json
from pathlib import Path

from studies import claims_page as page

ROOT = Path(__file__).resolve().parents[1]

VERDICTS = {"supported", "supported (direction)", "not supported", "inconclusive at this power",
            "not testable on this benchmark", page.NOT_RUN}


def test_committed_claims_page_recomputes_from_the_raw_files(tmp_path):
    claims_dir = ROOT / "reports" / "claims"
    claims = page.build(tmp_path, claims_dir / "lab", claims_dir / "eps", [claims_dir / f"g{g}" for g in page.G_SIZES])
    assert sorted(claims) == list("abcdef")
    assert all(c["verdict"] in VERDICTS for c in claims.values())
    committed = json.loads((claims_dir / "verdicts.json").read_text(encoding="utf-8"))
    # the page's numbers (printed to 2-3 decimals) and verdicts; the fits' last float digits vary with the BLAS
    assert {k: (c["verdict"], c["statistic"]) for k, c in claims.items()} == \
        {k: (c["verdict"], c["statistic"]) for k, c in committed.items()}
    html = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert all(f'id="claim-{k}"' in html for k in "abcdef")
