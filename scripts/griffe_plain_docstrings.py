"""Griffe extension (mkdocstrings ``extensions:`` in ``mkdocs.yml``): the repository's docstrings on the API pages.

The docstrings are plain text with a few reStructuredText habits that Markdown would garble; before
rendering, for the site only (the sources are not touched):

* a simple table (a rule of ``=`` groups, rows, a closing rule) becomes a ``text`` code block, so its
  columns stay aligned;
* a role such as ``:class:`Algorithm``` or ``:data:`~x.NEEDS``` becomes the code span of its target.
"""

from __future__ import annotations

import re

import griffe

RULE = re.compile(r"^\s*=+(\s+=+)+\s*$")
ROLE = re.compile(r":(?:class|func|data|meth|mod|attr|obj|exc):`~?([^`]+)`")


def plain(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if RULE.match(lines[i]):
            block = [lines[i]]
            i += 1
            rules = 1
            while i < len(lines):
                block.append(lines[i])
                if RULE.match(lines[i]):
                    rules += 1
                    if rules == 3:
                        i += 1
                        break
                i += 1
            out += ["```text", *block, "```"]
            continue
        out.append(ROLE.sub(r"``\1``", lines[i]))
        i += 1
    return "\n".join(out)


class PlainDocstrings(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.is_alias:
            return
        doc = obj.docstring
        if doc is not None and doc.value:
            doc.value = plain(doc.value)
