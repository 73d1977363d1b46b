"""A prompt's Markdown as plain text, read one way by the CLI (``signoff pending``, ``status``,
``run``) and the pages' list rows (the ``excerpt`` filter): engine/plaintext.py."""

from __future__ import annotations

from signoff.api.pages import markdown
from signoff.api.pages.render import env
from signoff.engine.plaintext import one_line, plain

PROMPT = """# Refund

**Approve** the refund of `$30` to *alice*?

- the order: 1234
- the reason: damaged

| field | value |
|---|---|
| amount | 30 |

<b>raw html</b> stays text
"""


def test_plain_drops_the_markup_and_keeps_the_words() -> None:
    assert plain(PROMPT).splitlines() == [
        "Refund",
        "Approve the refund of $30 to alice?",
        "- the order: 1234",
        "- the reason: damaged",
        "field | value",
        "amount | 30",
        "<b>raw html</b> stays text",
    ]
    assert plain(None) == plain("") == ""


def test_one_line_joins_the_lines_and_cuts() -> None:
    assert one_line("**Approve**\n\nthe   refund") == "Approve / the refund"
    cut = one_line(PROMPT, 20)
    assert len(cut) == 20 and cut.endswith("…") and "#" not in cut
    assert one_line("x" * 10_000_000, 10) == "x" * 9 + "…"  # a huge prompt is read only a line's worth


def test_the_pages_excerpt_reads_markdown_as_the_cli_does() -> None:
    assert env.filters["excerpt"] is markdown.excerpt  # what the inbox, run and history rows show
    for text in (PROMPT, "**Approve** the refund", "a\n\n  b " * 100, None):
        assert markdown.excerpt(text, 80) == one_line(text, 80)
    assert markdown.excerpt("**Approve** the refund of `$30`") == "Approve the refund of $30"
