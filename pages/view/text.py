"""User text shown as plain text, never as Markdown or HTML.

Anything a user or a process wrote (experiment names, tags, notes, model names, status
reasons, warnings, service messages, log lines, upload names) can hold Markdown: an
image that every viewer's browser would fetch, a link, a bare URL that becomes one, an
emoji or colour directive, LaTeX. Pages put such text into Markdown-rendering elements
(captions, alerts, labels) only through ``plain``; long or multi-line text goes to
``show_plain`` (``st.text``, no Markdown at all).
"""

from __future__ import annotations

import html
import re
import string
from typing import Any

import streamlit as st

# CommonMark lets a backslash escape every ASCII punctuation character, and an escaped
# character is literal text: no image, link, autolink (<...>, www., http://), emphasis,
# code, HTML, heading, list, Streamlit directive (:red[...], :smile:) or LaTeX ($) is left.
_ESCAPES = {ord(char): "\\" + char for char in string.punctuation}


def plain(value: Any) -> str:
    """``value`` as Markdown source that renders as exactly its text (line breaks kept)."""
    text = "" if value is None else str(value)
    escaped = text.translate(_ESCAPES)
    # A line break stays one (two spaces before it), never a paragraph or a block.
    return "  \n".join(escaped.splitlines()) if "\n" in escaped or "\r" in escaped else escaped


def chart_label(value: Any) -> str:
    """User text as a Plotly trace name or title: Plotly renders a few HTML tags (``<a href>``,
    ``<b>``, ``<br>``) in them and shows entities as their characters."""
    return html.escape("" if value is None else str(value), quote=False)


def show_plain(value: Any, *, kind: str = "text") -> None:
    """Show user text: ``kind`` ``text`` (st.text) or ``error``/``warning``/``info``/
    ``success``/``caption`` (that element, its body escaped with ``plain``)."""
    text = "" if value is None else str(value)
    if kind == "text":
        st.text(text)
    else:
        getattr(st, kind)(plain(text))


# A traceback's last line names the error ("httpx.ConnectError: ..."): the useful line.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Failed|Interrupt|Cancelled)\b.*")


def failure_headline(reason: str | None) -> str:
    """The first meaningful line of a failure reason: a traceback's exception line, else
    the first non-empty line that is not a traceback frame."""
    lines = [line.strip() for line in (reason or "").splitlines() if line.strip()]
    if not lines:
        return ""
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
        if exceptions:
            return exceptions[-1]
    frames = ("Traceback (", 'File "', "^", "~")
    return next((line for line in lines if not line.startswith(frames)), lines[-1])


def show_failure(reason: str | None, *, kind: str = "error") -> None:
    """A failure as its first meaningful line (plain text), and the whole text in an expander
    as code when there is more to it."""
    headline = failure_headline(reason)
    show_plain(headline or "no reason recorded", kind=kind)
    if reason and reason.strip() != headline:
        with st.expander("Full message"):
            st.code(reason, language=None)
