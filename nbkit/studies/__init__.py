"""Stored studies: one entry per study under ``data/results``, each able to say what it measured.

A ``Study`` names its stored folder, the question it asks and the statistic it reports (window, seeds, CI), and
knows how to turn its stored runs into a table and plain sentences computed from that table. ``STUDIES`` is the
registry that ``nbkit.studies.results_md`` walks to write ``RESULTS.md``: every number there comes from the
stored data through these functions, never typed by hand.
"""
from nbkit.studies.base import Study, markdown_table
from nbkit.studies.catalog import STUDIES

__all__ = ["Study", "STUDIES", "markdown_table"]
