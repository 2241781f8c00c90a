"""Nothing linked that is not there: every relative link in README.md and docs/*.md names a path that git
tracks (a file, or a folder holding tracked files). A report that is linked but git-ignored fails here."""
from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")            # [text](target); targets with spaces are not used here
# Linked paths known to be missing while they are being made, each with the document that links it. An entry
# must still be missing (the test fails once it is committed, so the entry is removed in that commit).
PENDING: dict[str, str] = {}


def _tracked() -> set[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = set(filter(None, out.split("\0")))
    folders = {posixpath.dirname(f) for f in files}
    while True:                                     # every ancestor folder of a tracked file
        more = {posixpath.dirname(d) for d in folders} - folders
        if not more:
            return files | folders
        folders |= more


def relative_links(doc: str, text: str) -> list[tuple[str, str]]:
    """(link as written, repository path it points to) for each relative link of `doc`'s text."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
            continue                                # a URL, an anchor in the same page, or an absolute path
        path = unquote(target.split("#", 1)[0])
        out.append((target, posixpath.normpath(posixpath.join(posixpath.dirname(doc), path))))
    return out


def test_relative_links_resolve_against_a_hand_made_case():
    # docs/a.md links ../README.md (-> README.md), b.md#x (-> docs/b.md), a URL and an anchor (both skipped)
    text = "[r](../README.md) [b](b.md#x) [u](https://example.org/x.md) [h](#top)"
    assert relative_links("docs/a.md", text) == [("../README.md", "README.md"), ("b.md#x", "docs/b.md")]


def test_readme_and_docs_link_only_tracked_paths():
    tracked = _tracked()
    docs = ["README.md", *sorted(p for p in tracked if re.fullmatch(r"docs/[^/]+\.md", p))]
    missing = {path: doc for doc in docs
               for _, path in relative_links(doc, (ROOT / doc).read_text(encoding="utf-8")) if path not in tracked}
    unexpected = [f"{doc}: {path}" for path, doc in missing.items() if path not in PENDING]
    assert not unexpected, "linked but not in the repository (git ls-files):\n" + "\n".join(unexpected)
    done = sorted(set(PENDING) - set(missing))
    assert not done, f"now in the repository (or no longer linked); remove from PENDING: {done}"
