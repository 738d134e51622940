"""What runs and presents the notebooks: the papermill runner behind ``make report`` and the ``nbkit`` command
(``runner``), each profile's notebook parameters (``profiles``), the HTML findings page (``report``), and the live
widgets of notebook 00's primer (``widgets``; its number-format maths is ``nbkit.precision.number_formats``).
"""
