#!/usr/bin/env python3
"""Checks every relative link in the repository's Markdown: README.md, the book (docs/src), and the
other READMEs and RESULTS files. A link must name a file or directory that exists, and a `#anchor`
must name a heading of the target (slugged as GitHub and mdBook do: lower case, spaces to `-`,
punctuation dropped, repeats numbered). Web links (http, https, mailto) are not fetched: CI has no
business depending on other sites. Exits 1 listing each broken link as FILE:LINE: LINK (why).

    python3 scripts/check_links.py [FILE_OR_DIR ...]
    python3 scripts/check_links.py --html BOOK_DIR     # the rendered book: every relative
                                                       # href and src, and their #anchors
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["README.md", "CHANGELOG.md", "docs/src", "python/README.md", "kernels/README.md", "benchmarks"]
# [text](target) and ![alt](target); the target ends at whitespace or ')'. Reference-style links
# are not used in this repository.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INCLUDE = re.compile(r"\{\{#include\s+([^}:\s]+)[^}]*\}\}")


def text(path: Path) -> str:
    """A Markdown file with mdBook's `{{#include FILE}}` expanded (one level, as the book uses)."""
    raw = path.read_text(encoding="utf-8")
    return INCLUDE.sub(lambda m: (path.parent / m.group(1)).read_text(encoding="utf-8"), raw)


def slug(heading: str) -> str:
    """The anchor GitHub and mdBook give a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.lower()
    return "".join(c if c.isalnum() or c in "-_" else "-" if c == " " else "" for c in text)


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered -1, -2, ... as both do."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in text(path).splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        for explicit in re.findall(r'<a (?:name|id)="([^"]+)"', line):
            found.add(explicit)
    return found


def links(path: Path):
    """(line number, target) of each link outside code fences and inline code."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            yield number, target


def check(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    return problems


HREF = re.compile(r'(?:href|src)="([^"]+)"')
ID = re.compile(r'\bid="([^"]+)"')


def check_html(book: Path) -> int:
    """Every relative link of the rendered book names a file in it, and an anchor an id there."""
    pages = sorted(book.rglob("*.html"))
    ids = {page: set(ID.findall(page.read_text(encoding="utf-8"))) for page in pages}
    problems = []
    for page in pages:
        for target in HREF.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("//"):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = f"{page.relative_to(book)}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file in the book)")
            elif anchor and dest.suffix == ".html" and anchor not in ids.get(dest, set()):
                problems.append(f"{where} (no id {anchor} in {dest.relative_to(book)})")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(pages)} pages of the book, {len(problems)} broken links")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--html"] and len(argv) == 2:
        return check_html(Path(argv[1]).resolve())
    files: list[Path] = []
    for name in argv or DEFAULT:
        p = (ROOT / name).resolve()
        if not p.exists():
            print(f"error: {name}: no such file or directory", file=sys.stderr)
            return 1
        files += sorted(p.rglob("*.md")) if p.is_dir() else [p]
    problems = [problem for f in files for problem in check(f)]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(files)} Markdown files, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
