#!/usr/bin/env python3
"""Checks the links of the documentation: README.md, DESIGN.md, FORMAT.md and every .md
file under docs/ (or the files given as arguments, relative to the repository's root).

Every link and image (inline `[text](target)`, reference definitions `[id]: target`,
HTML `href`/`src`) outside code must be either an http(s) URL, which is not fetched, or
a relative path that resolves to a file or directory inside the repository (not under
target/). A `#anchor` on a link to a Markdown file, or alone, must name a heading of that
file (GitHub's rules: lower case, punctuation dropped, spaces to hyphens). Prints one
line per broken link and exits 1 if there is any.

`check-links.py --book DIR` checks instead that every relative link of a book built by
`mdbook build docs -d DIR` names a file of the book.
"""

import os
import re
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
FENCE = re.compile(r"^\s*(```+|~~~+)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files(args):
    if args:
        return [os.path.normpath(a) for a in args]
    files = ["README.md", "DESIGN.md", "FORMAT.md"]
    for d, subdirs, names in os.walk(os.path.join(ROOT, "docs")):
        subdirs.sort()
        files += sorted(os.path.relpath(os.path.join(d, n), ROOT) for n in names if n.endswith(".md"))
    return files


def prose_lines(text):
    """(line number, line, line with its code spans blanked) of the lines outside fenced
    code blocks."""
    fence = None
    for i, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)[0] * 3
            if fence is None:
                fence = mark
                continue
            if mark == fence:
                fence = None
                continue
        if fence is None:
            yield i, line, CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


anchors_of = {}


def anchors(path):
    if path not in anchors_of:
        seen, found = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line, _ in prose_lines(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        for m in re.finditer(r"""\bid\s*=\s*["']([^"']+)["']""", open(path, encoding="utf-8").read()):
            found.add(m.group(1))
        anchors_of[path] = found
    return anchors_of[path]


def check(file):
    problems = []
    src = os.path.join(ROOT, file)
    with open(src, encoding="utf-8") as f:
        text = f.read()
    for n, _, line in prose_lines(text):
        targets = [m.group(1) for m in INLINE.finditer(line)]
        targets += [m.group(1) for m in HTML.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            why = problem(src, t)
            if why:
                problems.append(f"{file}:{n}: {t}: {why}")
    return problems


def problem(src, target):
    if not target:
        return "empty link"
    if SCHEME.match(target):
        if re.match(r"^https?://[^/\s]+", target):
            return None
        return "leaves the repository (only http(s) URLs may)"
    path, _, anchor = target.partition("#")
    if path:
        dest = os.path.normpath(os.path.join(os.path.dirname(src), path))
        if os.path.isabs(path):
            return "absolute path"
        if os.path.commonpath([dest, ROOT]) != ROOT:
            return "leaves the repository"
        if os.path.commonpath([dest, os.path.join(ROOT, "target")]) == os.path.join(ROOT, "target"):
            return "points into target/, which is not in the tree"
        if not os.path.exists(dest):
            return "no such file"
    else:
        dest = src
    if anchor and dest.endswith(".md") and os.path.isfile(dest) and anchor not in anchors(dest):
        return f"no heading #{anchor} in {os.path.relpath(dest, ROOT)}"
    return None


def check_book(book):
    """Every relative href/src of the built book's HTML pages names a file of the book."""
    problems = []
    for d, _, names in os.walk(book):
        for n in names:
            if not n.endswith(".html"):
                continue
            page = os.path.join(d, n)
            with open(page, encoding="utf-8") as f:
                html = f.read()
            for m in re.finditer(r'(?:href|src)="([^"]+)"', html):
                url = m.group(1)
                if SCHEME.match(url) or url.startswith("#"):
                    continue
                path = url.split("#")[0].split("?")[0]
                if path and not os.path.exists(os.path.normpath(os.path.join(d, path))):
                    problems.append(f"book: {os.path.relpath(page, book)}: {url}: no such file")
    return problems


def main():
    problems = []
    args = sys.argv[1:]
    if args[:1] == ["--book"]:
        problems = check_book(args[1])
        for p in problems:
            print(p)
        if problems:
            sys.exit(1)
        print(f"check-links: the book's pages link only to pages of the book")
        return
    files = doc_files(args)
    for f in files:
        problems += check(f)
    for p in problems:
        print(p)
    if problems:
        print(f"check-links: {len(problems)} broken link(s)", file=sys.stderr)
        sys.exit(1)
    print(f"check-links: {len(files)} files, every link resolves")


if __name__ == "__main__":
    main()
