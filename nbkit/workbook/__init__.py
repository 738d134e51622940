"""What runs and presents the notebooks: the papermill runner behind ``make report`` and the ``nbkit`` command
(``runner``), each profile's notebook parameters (``profiles``), the HTML findings page (``report``), the main job's
time estimate for this CPU (``jobtime``), and notebook 00's primer on number formats and exact rounding (``primer``)
with its live widgets (``widgets``).
"""
