"""Text people did not write for a browser, shown safely: a prompt as Markdown (raw HTML is not
Markdown here: it stays text), then sanitised by nh3 (a whitelist of tags and attributes, links
only to http, https and mailto, no images: a page fetches nothing from elsewhere)."""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

from signoff.engine.plaintext import one_line

_TAGS = {"p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li",
         "a", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td"}
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
MAX_CHARS = 100_000  # a longer prompt is cut (it is still whole in the API and the trace)


@functools.lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"])


def render(text: str | None) -> Markup:
    """``text`` as sanitised HTML."""
    if not text:
        return Markup("")
    text = text[:MAX_CHARS]
    html = _parser().render(text)
    return Markup(nh3.clean(html, tags=_TAGS, attributes=_ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                            link_rel="noopener noreferrer nofollow", strip_comments=True))


def excerpt(text: str | None, limit: int = 160) -> str:
    """One line of plain text for a list, the Markdown read as the CLI reads it
    (:func:`signoff.engine.plaintext.one_line`; the template escapes it). The same prompts are
    drawn again and again (each visit of the inbox, each row its live stream adds): a short one's
    excerpt is kept (at most 2,048 of them, none of a text over 2,000 characters)."""
    if text is not None and len(text) <= EXCERPT_CACHED_CHARS:
        return _excerpt(text, limit)
    return one_line(text, limit)


EXCERPT_CACHED_CHARS = 2000


@functools.lru_cache(maxsize=2048)
def _excerpt(text: str, limit: int) -> str:
    return one_line(text, limit)
