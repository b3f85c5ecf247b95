"""Sphinx extension for book/api.md: leave out the entries that autodoc makes for the fields of a
``NamedTuple`` (each reads only "Alias for field number N"); the class docstrings describe the
fields with their shapes."""


def _skip_field_alias(app, what, name, obj, skip, options):
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None  # autodoc decides


def setup(app):
    app.connect("autodoc-skip-member", _skip_field_alias)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
