"""Strip the Project Gutenberg header and footer from a book.

The variants handled were found by inspecting every book in ../shared/data/pg19 (see docs/data.md):

header (the body starts after the LAST of these that comes before the footer):
  *** START OF THIS PROJECT GUTENBERG EBOOK <TITLE> ***     (may wrap onto the next line(s))
  ***START OF THE PROJECT GUTENBERG EBOOK <TITLE>***
  *END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*   (older books: end of the legal header)
  *END THE SMALL PRINT! ...                                          (one book writes it without the 2nd '*')
footer (the body ends before the FIRST of these after the header):
  *** END OF THIS PROJECT GUTENBERG EBOOK <TITLE> ***  /  ***END OF THE PROJECT GUTENBERG EBOOK <TITLE>***
  End of the Project Gutenberg EBook of ... / End of Project Gutenberg's ... / End of The Project Gutenberg Etext ...
  *Project Gutenberg Etext of <title>*   (a one-line closing banner of some older books)

A book with no recognised header keeps its beginning, one with no footer keeps its end; `strip_gutenberg`
reports which markers it found so callers can warn.
"""
import re

# A line that starts the header-end marker. Matching is on stripped lines, case-insensitive.
_START_RE = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_SMALL_PRINT_END_RE = re.compile(r"^\*END\*?\s*THE SMALL PRINT", re.IGNORECASE)
_END_RES = [
    re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE),
    re.compile(r"^End of (the )?Project Gutenberg", re.IGNORECASE),
    re.compile(r"^\*Project Gutenberg Etext of .*\*$", re.IGNORECASE),
]
_MAX_MARKER_LINES = 4  # a "*** START OF ..." marker wrapped over at most this many lines


def normalize_newlines(text):
    """CRLF and lone CR -> LF; drop a leading byte-order mark. Gutenberg files use CRLF."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _marker_end(lines, i):
    """Index of the last line of a '*** START OF ...' marker that begins at line i (it may wrap)."""
    for j in range(i, min(i + _MAX_MARKER_LINES, len(lines))):
        if lines[j].rstrip().endswith("***"):
            return j
    return i


def strip_gutenberg(text):
    """Return (body, info) where body is the book text between header and footer (newlines normalized,
    blank lines around it removed) and info = {"header": bool, "footer": bool} says what was found."""
    lines = normalize_newlines(text).split("\n")
    stripped = [ln.strip() for ln in lines]

    # the footer: first footer marker (searched from the first header marker on, so a header never
    # counts as a footer; the header end is then the last header marker before the footer)
    first_header = next((i for i, s in enumerate(stripped)
                         if _START_RE.match(s) or _SMALL_PRINT_END_RE.match(s)), None)
    footer = None
    for i in range(first_header + 1 if first_header is not None else 0, len(lines)):
        if any(r.match(stripped[i]) for r in _END_RES):
            footer = i
            break
    limit = footer if footer is not None else len(lines)

    body_start = 0
    for i in range(limit):
        if _START_RE.match(stripped[i]):
            body_start = _marker_end(lines, i) + 1
        elif _SMALL_PRINT_END_RE.match(stripped[i]):
            body_start = i + 1
    while body_start < limit and not stripped[body_start]:
        body_start += 1
    while limit > body_start and not stripped[limit - 1]:
        limit -= 1
    body = "\n".join(lines[body_start:limit])
    return body, {"header": first_header is not None, "footer": footer is not None}
