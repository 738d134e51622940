"""nbkit: the helper library behind the precision workbook's notebooks.

Every computation of the workbook lives here (tested in ``tests/``); the notebooks in ``notebooks/``
parameterise, call, explain and plot. Importing ``nbkit`` first points every cache inside the project.
"""
from nbkit import paths as _paths

_paths.setup_environment()

__version__ = "0.1.0"
