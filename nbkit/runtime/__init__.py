"""Running the workbook: paths, errors, logs, output folders, locks, the job pool, GC freeze, versions and pins, config field checks."""
