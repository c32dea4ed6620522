"""The design document lives in the repository, and what cites it by section names sections
that exist (`docs/design.md § Task records`); figures cited from docs/results the same way."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("popula", "evolution", "benchmarks", "scripts", "tests", "docs")
CITATION = re.compile(r"(docs/[\w/.-]+\.md)([^\n]*)")


def _headings(doc: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in doc.read_text().splitlines() if line.startswith("#")}


def _tracked_text_files() -> list[Path]:
    """The project's code and prose: top-level Markdown and every .py / .md of its folders."""
    files = sorted(ROOT.glob("*.md"))
    for folder in SOURCES:
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md") and p.is_file())
    return files


def _citations() -> list[tuple[str, str, str]]:
    """(where, document, cited text) for every `DOC § Section` in the project's code and prose;
    the text runs from the section sign to the end of the line (or the next citation)."""
    found = []
    for path in _tracked_text_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for doc, rest in CITATION.findall(line):
                rest = rest.split("docs/")[0]
                for text in rest.split("§ ")[1:]:
                    found.append((f"{path.relative_to(ROOT)}:{number}", doc, text))
    return found


def test_every_cited_section_exists():
    citations = _citations()
    assert len(citations) > 20, "the citations were not found: the pattern is off"
    missing = [f"{where}: {doc} § {text}" for where, doc, text in citations
               if not (ROOT / doc).is_file() or not any(text.startswith(h) for h in _headings(ROOT / doc))]
    assert not missing, missing


def test_nothing_cites_the_design_by_number_any_more():
    stale = [f"{path.relative_to(ROOT)}:{n}" for path in _tracked_text_files()
             for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bDESIGN \d", line)]
    assert not stale, stale


def test_every_file_the_architecture_map_names_exists():
    """ARCHITECTURE.md's map names files by path (`popula/run/parts/builders.py`, `tests/kind_trace.py`);
    a file moved without the map following would send a reader to nothing."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"\b((?:popula|evolution|tests|benchmarks|configs|docs)/[\w/.-]*\.(?:py|yaml|md))", text))
    assert named, "the map names no files"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"
