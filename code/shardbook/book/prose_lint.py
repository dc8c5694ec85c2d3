"""The prose lint: numbers typed into a chapter's prose that look computed
(three or more significant digits, or equal to a glued value) must come from
a cell through the ledger. ``<!-- typed-number: reason -->`` on the line
exempts a number that is typed on purpose (a year, a published figure being
quoted), and the reason stays visible in the source. Standard library only.
"""

import re

# --- lint: numbers typed into prose ----------------------------------------

# A number in prose: grouped or plain digits with optional decimals, or a
# leading point (.4321), with an optional exponent (4.321e12). It may stick to
# a unit (18.35ms, 123x), a sign or an emphasis mark; digits inside names
# (H100, v5p, 8x22B, bf16) are not numbers: no letter or digit right before;
# nor are model and batch sizes (405B, 16M-token): a lone B, M, K or T after.
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z0-9.,/#])(?:(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?|\.(\d+))(?:[eE][+-]?\d+(?![A-Za-z]))?"
    r"(?![0-9])(?![BMKT](?![A-Za-z]))"
)
_EXEMPT_MARK = re.compile(r"<!--\s*typed-number:\s*(.+?)\s*-->")


def _blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


_NON_PROSE = [
    (re.compile(r"\A---\n.*?\n---\n", re.S), "front matter"),
    (
        re.compile(
            r"^[ \t]*(`{3,}|:{3,})(?:[a-z0-9+-]*|\{(?:code-cell|literalinclude|bibliography|code-block|code)\}[^\n]*)\n.*?^[ \t]*\1\s*$",
            re.S | re.M,
        ),
        "code cells and code fences",
    ),
    (re.compile(r"^[ \t]*(`{3,}|:{3,}).*$", re.M), "other directive fences (their prose is linted)"),
    (re.compile(r"^[ \t]*:[a-z-]+:.*$", re.M), "directive options"),
    (re.compile(r"\$\$.*?\$\$", re.S), "display math"),
    (re.compile(r"\$[^$\n]+\$"), "inline math"),
    (re.compile(r"\{[a-z:-]+\}`[^`]*`"), "roles (glue, cite, ref)"),
    (re.compile(r"`[^`]+`"), "inline code (may wrap a line)"),
    (re.compile(r"\]\([^)]*\)"), "link targets"),
    (re.compile(r"^\([^)]*\)=\s*$", re.M), "labels"),
    (re.compile(r"^%.*$", re.M), "comments"),
    (re.compile(r"<!--.*?-->", re.S), "HTML comments"),
    (re.compile(r"^\s*\d+\.(?=\s)", re.M), "numbered-list markers"),
]


def _strip_non_prose(markdown):
    """Blank out (keeping line breaks) what the lint must not read: front
    matter, code cells and fences, math, roles, code, link targets, labels
    and comments."""
    for pattern, _ in _NON_PROSE:
        markdown = pattern.sub(_blank, markdown)
    return markdown


def _significant_digits(integer, fraction):
    digits = ((integer or "").replace(",", "") + (fraction or "")).lstrip("0")
    if not fraction:
        digits = digits.rstrip("0")
    return len(digits)


def lint(markdown, glued_texts=()):
    """Numbers typed into prose that look computed: three or more significant
    digits, or equal to a glued value's text (two digits or more). A line carrying
    ``<!-- typed-number: reason -->`` is exempt (the reason stays visible in
    the source). Returns (line number, number, why) tuples."""
    glued_numbers = set()
    for text in glued_texts:
        glued_numbers.update(m.group(0) for m in _NUMBER_RE.finditer(text))
    findings = []
    original = markdown.splitlines()
    prose_lines = _strip_non_prose(markdown).splitlines()
    for lineno, (line, prose) in enumerate(zip(original, prose_lines, strict=True), 1):
        if _EXEMPT_MARK.search(line):
            continue
        for m in _NUMBER_RE.finditer(prose):
            number = m.group(0)
            if _significant_digits(m.group(1), m.group(2) or m.group(3)) >= 3:
                findings.append((lineno, number, "three or more significant digits"))
            elif number in glued_numbers and not re.fullmatch(r"\d", number):
                # single digits (byte widths, stage numbers, counts of things)
                # are too common in prose to be evidence of a typed result
                findings.append((lineno, number, "equals a glued value of this chapter"))
    return findings
