"""Every command line of the workbook, behind the one ``nbkit`` entry point (``main``: the environment set-up and the
one-line refusals, once). The subcommand table and the refusals are ``commands``; each subcommand is a module here:
``train``, ``plan``, ``doctor``, ``study``, ``results_md``, ``gpu_budget``, ``lengthlaw`` (``nbkit run`` and ``nbkit
list`` are in ``main``). Nothing below this package imports it.
"""
