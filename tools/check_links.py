#!/usr/bin/env python3
"""check_links.py: check the relative links of the project's Markdown pages.

    python3 tools/check_links.py [FILE.md ...]

Without arguments it checks README.md, docs/*.md and results/*.md. Every
inline link and image (`[text](target)`, `![alt](target)`) and every
reference definition (`[label]: target`) whose target is relative must name
a file or directory that exists, relative to the page that holds it. A
`#anchor` (alone, or after a path to a .md file) must name a heading of that
page, under GitHub's rules for heading anchors: the heading's text in lower
case, punctuation other than hyphens, underscores and spaces removed, spaces
turned into hyphens, and a repeated anchor suffixed -1, -2, ... An explicit
`<a name="...">` or `id="..."` in the page counts as an anchor too.

Links with a scheme (https:, mailto:, ...) are not checked, nor anything in
fenced or indented code blocks or in `code spans`.

Prints `FILE:LINE: broken link TARGET` for each broken link, then
`N links checked, M broken`, and exits 1 when any link is broken (2 on a
usage error). Python 3 standard library only.
"""
import glob
import os
import re
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PAGES = ["README.md", "docs/*.md", "results/*.md"]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
LIST_ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d{1,9}[.)])(?: |$)")
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\bname\s*=\s*[\"']([^\"']+)[\"']|\bid\s*=\s*[\"']([^\"']+)[\"']",
                         re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")


def strip_code_spans(line):
    """The line with every `code span` blanked out (columns kept)."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def prose_lines(text):
    """(line number, line) for every line outside fenced and indented code blocks."""
    out = []
    fence = None          # the opening fence while inside a fenced block
    prev_blank = True     # the previous line was blank (or the start of the page)
    in_list = False       # the current block belongs to a list item
    in_indented_code = False
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is not None:
            m = FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            prev_blank = False
            continue
        m = FENCE.match(line)
        if m:
            fence = m.group(1)
            in_indented_code = False
            prev_blank = False
            continue
        blank = not line.strip()
        expanded = line.expandtabs(4)
        indented = expanded.startswith("    ")
        if blank:
            prev_blank = True
            continue
        if indented and (in_indented_code or (prev_blank and not in_list)):
            in_indented_code = True
            prev_blank = False
            continue
        in_indented_code = False
        if LIST_ITEM.match(expanded):
            in_list = True
        elif not indented and prev_blank:
            in_list = False   # a new paragraph at the margin ends the list
        prev_blank = False
        out.append((number, line))
    return out


def heading_text(raw):
    """A heading's text as GitHub renders it: links and images by their text, no markup."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)   # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML tags
    return text


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = heading_text(text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    """Every anchor a page defines: its headings' slugs and explicit HTML anchors."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found, seen = set(), {}
    lines = prose_lines(text)
    previous = None
    for number, line in lines:
        m = HEADING.match(line)
        title = None
        if m:
            title = m.group(2) or ""
        elif previous is not None and previous[0] == number - 1 and SETEXT.match(line) \
                and previous[1].strip() and not LIST_ITEM.match(previous[1]) \
                and not HEADING.match(previous[1]):
            title = previous[1].strip()
        if title is not None:
            base = slug(title)
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else "%s-%d" % (base, count))
        for a in HTML_ANCHOR.finditer(line):
            found.add(a.group(1) or a.group(2))
        previous = (number, line)
    cache[path] = found
    return found


def link_targets(line):
    """The targets of the inline links and images on one line (code spans removed)."""
    line = strip_code_spans(line)
    targets = []
    for m in re.finditer(r"\]\(", line):
        if "[" not in line[:m.start()]:
            continue
        i = m.end()
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == "<":
            end = line.find(">", i)
            if end < 0:
                continue
            targets.append(line[i + 1:end])
            continue
        depth, j = 0, i
        while j < len(line):
            c = line[j]
            if c == "\\" and j + 1 < len(line):
                j += 2
                continue
            if c in " \t":
                break
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        if j > i:
            targets.append(line[i:j])
    ref = REF_DEF.match(line)
    if ref:
        target = ref.group(2)
        targets.append(target[1:-1] if target.startswith("<") else target)
    return targets


def check_target(page, target):
    """None when the link resolves, else a reason."""
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    anchor = urllib.parse.unquote(anchor)
    if path_part:
        if path_part.startswith("/"):
            resolved = os.path.join(ROOT, path_part.lstrip("/"))
        else:
            resolved = os.path.join(os.path.dirname(page), path_part)
        resolved = os.path.normpath(resolved)
        if not os.path.exists(resolved):
            return "no such file"
    else:
        resolved = page
    if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
        if anchor.lower() not in anchors_of(resolved):
            return "no such heading"
    return None


def pages_from(args):
    if args:
        return [os.path.abspath(a) for a in args]
    pages = []
    for pattern in DEFAULT_PAGES:
        pages.extend(sorted(glob.glob(os.path.join(ROOT, pattern))))
    return pages


def main(argv):
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    pages = pages_from(argv)
    checked = broken = 0
    for page in pages:
        if not os.path.isfile(page):
            print("%s: no such page" % page, file=sys.stderr)
            return 2
        with open(page, encoding="utf-8") as f:
            text = f.read()
        name = os.path.relpath(page, ROOT)
        for number, line in prose_lines(text):
            for target in link_targets(line):
                if SCHEME.match(target) or target.startswith("//"):
                    continue
                checked += 1
                if check_target(page, target) is not None:
                    broken += 1
                    print("%s:%d: broken link %s" % (name, number, target))
    print("%d links checked, %d broken" % (checked, broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
