"""Studies: a grid of run configs → run a shard (resumable) → store finished runs with a card → load → table →
figure (``nbkit.studies.base``), and the registry of every stored study (``nbkit.studies.catalog.STUDIES``) that
``nbkit study`` and the RESULTS.md generator (``nbkit.studies.results_md``) walk. Every number RESULTS.md shows
comes from the stored data through the study's own functions, never typed by hand.

Each study's own module sits here too: ``ablation``, ``hunt``, ``ppo``, ``moe``, ``brevity``, ``tiny_long_regimes``,
``dose_response``.
"""

from nbkit.studies.base import GridStudy, Study, markdown_table

__all__ = ["GridStudy", "Study", "markdown_table"]
