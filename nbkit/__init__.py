"""nbkit: the helper library behind the precision workbook's notebooks.

Every computation of the workbook lives here (tested in ``tests/``); the notebooks in ``notebooks/``
parameterise, call, explain and plot. Importing ``nbkit`` first points every cache inside the project.
"""
import os as _os

from nbkit import paths as _paths

_paths.setup_environment()
if _os.environ.get("NBKIT_REPORT_DIR"):  # executed by the runner into a static report (nbkit.report)
    from nbkit import logs as _logs

    _logs.static_progress_bars()

__version__ = "0.1.0"
