"""Tools that run, check and document the book's chapters (papermill runner, freshness
check, provenance). Not needed by the science in ``gmlm_lib``."""
