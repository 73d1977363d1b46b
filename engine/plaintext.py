"""Markdown (a gate's prompt) as plain text, for what cannot show HTML: a terminal (the CLI's
``pending``, ``status``, ``run``) and a one-line excerpt in a list (the pages' inbox, run and
history rows). The markup goes, the words stay: paragraphs and list items on lines of their
own, table rows as cells joined by " | ", code as it is written. One reading for every
surface, here because the CLI and the pages may both import ``engine/`` (the CLI never imports
the API's web stack)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

MAX_CHARS = 100_000  # a longer prompt is read only this far (as the pages render it)


@functools.lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt  # on first use: a CLI command that prints no prompt does not load it

    # raw HTML is not Markdown here: it stays text, as the pages render it (api/pages/markdown.py)
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def plain(markdown: str | None, *, max_chars: int = MAX_CHARS) -> str:
    """``markdown`` as a person reads it in plain text: the text without the markup, paragraphs
    and list items on lines of their own, table rows as cells joined by " | "."""
    tokens = _parser().parse((markdown or "")[:max_chars])
    lines: list[str] = []
    line: list[str] = []
    bullet = ""
    for tok in tokens:
        if tok.type == "list_item_open":
            bullet = "- "
        elif tok.type in ("th_open", "td_open") and line:
            line.append(" | ")
        elif tok.type == "inline":
            for child in tok.children or []:
                if child.type in ("text", "code_inline"):
                    line.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    line.append(" ")
        elif tok.type in ("code_block", "fence"):
            lines.extend(tok.content.rstrip("\n").splitlines())
        if tok.type in ("paragraph_close", "heading_close", "tr_close") and line:
            lines.append(bullet + "".join(line).strip())
            line, bullet = [], ""
    if line:
        lines.append(bullet + "".join(line).strip())
    return "\n".join(lines)


def one_line(markdown: str | None, limit: int = 120) -> str:
    """:func:`plain` on one line (its lines joined by " / ", runs of white space as one), cut to
    ``limit`` characters with "…" (for a list)."""
    text = plain(markdown, max_chars=max(limit * 40, 4000))  # a line's worth, however long the prompt
    flat = " / ".join(" ".join(part.split()) for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
