#!/usr/bin/env python3
"""mdBook preprocessor of cairn's book (docs/book.toml).

The book includes the repository's README.md, DESIGN.md and FORMAT.md as chapters
(introduction.md, design.md, format.md). Their links are written from the repository's
root ("docs/mount.md", "FORMAT.md"), and the chapters in docs/ link to them
("../DESIGN.md"). This rewrites every relative link of every chapter to the book's page
for its target; a link to a file that is not in the book (a source file) keeps its text
and loses its link. Fenced code blocks are left alone.

mdBook runs it as `python3 rootlinks.py supports RENDERER` (exit 0: supported), then with
[context, book] as JSON on stdin, expecting the book as JSON on stdout.
"""

import json
import posixpath
import re
import sys

# Chapters whose text is a file of the repository's root, and that file.
ORIGIN = {"introduction.md": "README.md", "design.md": "DESIGN.md", "format.md": "FORMAT.md"}
# Files of the repository that are a page of the book.
PAGE = {"README.md": "introduction.md", "DESIGN.md": "design.md", "FORMAT.md": "format.md",
        "docs/SUMMARY.md": "introduction.md"}

LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def book_path(repo_path):
    """The book's page for a file of the repository, or None if it is not in the book."""
    if repo_path in PAGE:
        return PAGE[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return None


def rewrite_line(line, origin, chapter):
    def one(m):
        bang, text, target, title = m.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)
        path, hashmark, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(origin), path))
        page = book_path(repo)
        if page is None:
            return m.group(0) if bang else text
        rel = posixpath.relpath(page, posixpath.dirname(chapter) or ".")
        return f"{bang}[{text}]({rel}{hashmark}{anchor}{title})"

    return LINK.sub(one, line)


def rewrite(content, chapter):
    origin = ORIGIN.get(chapter, "docs/" + chapter)
    out, fenced = [], False
    for line in content.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else rewrite_line(line, origin, chapter))
    return "\n".join(out)


def walk(item):
    if isinstance(item, list):
        for x in item:
            walk(x)
    elif isinstance(item, dict):
        chapter = item.get("Chapter")
        if isinstance(chapter, dict):
            if chapter.get("path"):
                chapter["content"] = rewrite(chapter["content"], chapter["path"])
            walk(chapter.get("sub_items", []))
        else:
            for v in item.values():
                walk(v)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "supports":
        sys.exit(0)
    _context, book = json.load(sys.stdin)
    walk(book)
    json.dump(book, sys.stdout)


if __name__ == "__main__":
    main()
