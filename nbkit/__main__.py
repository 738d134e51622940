"""``python -m nbkit``: the ``nbkit`` command (``nbkit.workbook.runner.main``)."""
import sys

from nbkit.workbook.runner import main

if __name__ == "__main__":
    sys.exit(main())
