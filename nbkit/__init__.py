"""nbkit: the helper library behind the precision workbook's notebooks.

Every computation of the workbook lives here (tested in ``tests/``); the notebooks in ``notebooks/``
parameterise, call, explain and plot. Importing ``nbkit`` changes nothing in the process: the entry points
(``make``, the ``nbkit`` command, ``python -m nbkit.<module>``, the runner's kernels) point every cache inside the
project (``nbkit.runtime.paths.setup_environment``). The one switch below is the runner's own request: a kernel it
started for a static report (``NBKIT_REPORT_DIR`` set) draws text progress bars.
"""

import os as _os

if _os.environ.get("NBKIT_REPORT_DIR"):  # executed by the runner into a static report (nbkit.workbook.report)
    from nbkit.runtime import logs as _logs

    _logs.static_progress_bars()

__version__ = "0.1.0"
