"""Nothing linked that is not there: every relative link in README.md and docs/*.md names a path that git
tracks (a file, or a folder holding tracked files). A report that is linked but git-ignored fails here. And
nothing promised undefined: every word the README sets in italics is a term of docs/glossary.md."""
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


ITALIC = re.compile(r"(?<![*\w])\*([^*\n]+?)\*(?![*\w])")     # *word*, not **bold**
BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")


def undefined_italics(readme: str, glossary: str) -> list[str]:
    """Words set in italics after the README's "defined in [docs/glossary.md]" that no bold glossary term holds
    (a plural or past tense counts as its stem: *collapsed* is **Collapse**)."""
    promised = readme.split("defined in [docs/glossary.md]", 1)[-1]
    terms = [t.lower() for t in BOLD.findall(glossary)]
    return sorted({w for w in ITALIC.findall(promised) if not any(_stem(w) in t for t in terms)})


def _stem(word: str) -> str:
    return re.sub(r"(?<=e)d$|s$", "", word.lower())


def test_undefined_italics_on_a_hand_made_case():
    readme = "*Before* the promise. Words in *italics* are defined in [docs/glossary.md](x). *collapsed*, *Holm*, **bold**, *odd*"
    glossary = "- **Collapse**: ...\n- **Holm**, **p_Holm**: ..."
    assert undefined_italics(readme, glossary) == ["odd"]


def test_readme_italics_are_glossary_terms():
    missing = undefined_italics((ROOT / "README.md").read_text(encoding="utf-8"),
                                (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8"))
    assert not missing, f"set in italics in README.md but not defined in docs/glossary.md: {missing}"
