"""Sphinx extension for book/api.md: a module constant whose value prints longer than
:data:`MAX_VALUE_CHARS` characters (a table of presets, the paper's label index, a chapter's source
cell) is documented by its docstring alone. autodoc would print the whole ``repr`` in the entry's
header, one line of thousands of characters that a reader cannot read; the short ones (a tuple of
rule names, a threshold) keep their value."""

from __future__ import annotations

from sphinx.ext import autodoc
from sphinx.util.inspect import object_description

MAX_VALUE_CHARS = 100


def long_value(obj: object) -> bool:
    """Whether autodoc's printed value of ``obj`` is longer than :data:`MAX_VALUE_CHARS`."""
    try:
        return len(object_description(obj)) > MAX_VALUE_CHARS
    except ValueError:  # no printable value: autodoc prints none either
        return False


class DataDocumenter(autodoc.DataDocumenter):
    def should_suppress_value_header(self) -> bool:
        return super().should_suppress_value_header() or long_value(self.object)


class AttributeDocumenter(autodoc.AttributeDocumenter):
    def should_suppress_value_header(self) -> bool:
        return super().should_suppress_value_header() or long_value(self.object)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(DataDocumenter, override=True)
    app.add_autodocumenter(AttributeDocumenter, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
