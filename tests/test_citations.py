"""The product cites published sources only, never the project's internal working documents.

A user has the papers and books listed on docs/references.md, not the internal specification
(numbered documents 000-004), so every citation must name the publication (author, year).
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ["src", "docs", "examples", "benchmarks", "manifolds", "README.md"]
SUFFIXES = {".py", ".md", ".yml", ".cfg", ".txt", ".js", ".toml"}
# the internal documents' name followed by their number, and bare document numbers with an equation,
# figure or section, or alone in a table cell
INTERNAL = re.compile(r"\bseeds?[ _-]?0\d\d\b|\b00[0-4],? (?:Eqs?|Figs?|Sec)\.|\|\s*00[0-4]\s*\|", re.IGNORECASE)


def _product_files():
    for entry in PRODUCT:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            if f.suffix in SUFFIXES:
                yield rel, f


def test_product_cites_no_internal_documents():
    hits = [f"{rel}:{n}: {line.strip()}"
            for rel, f in _product_files()
            for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if INTERNAL.search(line)]
    assert not hits, "cite the published source (docs/references.md) instead of:\n" + "\n".join(hits)


def test_the_scan_sees_a_citation():
    doc = "se" + "ed"  # spelled in parts so that this file cites nothing itself
    assert INTERNAL.search(f"as in {doc} 003, Eq. 8") and INTERNAL.search(f"({doc.title()}-000 Fig. 1)")
    assert INTERNAL.search("| solver | 000 Eq. 5 |") and INTERNAL.search("| GD | 003 |")
    assert not INTERNAL.search("torch.manual_seed(0)") and not INTERNAL.search("--seeds 0 1 2")


def test_references_page_lists_the_cited_literature():
    refs = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    for author, year in [("Amari", "1998"), ("Nagaoka", "2000"), ("Martens", "2015"), ("Martens", "2020"),
                         ("Ollivier", "2017"), ("Skovgaard", "1984"), ("Eriksen", "1987"), ("Oller", "1991"),
                         ("George", "2018"), ("Eschenhagen", "2023"), ("Hansen", "2016"), ("Schraudolph", "2002"),
                         ("Pascanu", "2014"), ("Kunstner", "2019")]:
        assert re.search(rf"{author}[^\n]*\({year}\)", refs), f"{author} {year} missing from docs/references.md"
