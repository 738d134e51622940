"""Running the workbook: paths, errors, logs, output folders, locks, the job pool, GC freeze, the GPU install's pins, config field checks."""
