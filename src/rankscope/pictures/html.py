"""The one writer of a :class:`~rankscope.pictures.page.Page` as a self-contained HTML file.

Styles and script are inline; the page loads nothing (its Content-Security-Policy forbids every
fetch: no CDN, no font, no image from anywhere). The page model goes in as JSON inside a
``<script type="application/json">`` element, with ``<``, ``>``, ``&`` and the two JavaScript line
separators escaped, so no text from a job (a frame named ``</script><script>...``) can end that
element; the script puts every string into the page with ``textContent``, never as markup.
Values that look like secrets (``HF_TOKEN=...``, ``--password=...``) are hidden before anything is
written: a page is made to be attached to a bug report.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from rankscope.pictures.page import Page
from rankscope.serial import to_json

#: ``NAME=value`` / ``--name=value`` / ``name: value`` where the name says it is a secret (a colon
#: only with a space after it: ``tokenizer.py:45`` is a source line).
_SECRET = re.compile(
    r"(?i)(\b[\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|access[_-]?key|private[_-]?key|credential|auth)"
    r"[\w.-]*(?:\s*=\s*|:\s+))(\S+)"
)
HIDDEN = "<hidden>"

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_JSON_UNSAFE = re.compile("[<>&\u2028\u2029]")


def hide_secrets(text: str) -> str:
    """``HF_TOKEN=hf_abc`` -> ``HF_TOKEN=<hidden>``."""
    return _SECRET.sub(lambda m: m.group(1) + HIDDEN, text)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return hide_secrets(value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    return value


def embed_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: nothing in it can close the element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _JSON_UNSAFE.sub(lambda m: _JSON_ESCAPES[m.group(0)], text)


def _asset(name: str) -> str:
    return resources.files("rankscope.pictures").joinpath(name).read_text(encoding="utf-8")


def render_html(page: Page) -> str:
    """The page as one HTML document (UTF-8 text)."""
    data = embed_json(_scrub(to_json(page)))
    title = html.escape(hide_secrets(f"{page.title}: {page.subtitle}"))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n"
        f"<style>\n{_asset('page.css')}</style>\n"
        "</head><body>\n"
        "<noscript><p>This page draws its pictures with JavaScript; the text report says the same "
        "in words.</p></noscript>\n"
        '<main id="page"></main>\n'
        f'<script type="application/json" id="rankscope-data">{data}</script>\n'
        f"<script>\n{_asset('page.js')}</script>\n"
        "</body></html>\n"
    )
