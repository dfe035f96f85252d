"""One date format for admin lists, admin detail pages and the tenant UI: ISO dates, 24-hour times.

Django's English defaults ("Nov. 26, 2026, 9:33 p.m.") are long enough to push list columns past
a 1280 px screen, and the lists used short dates while detail pages used the long ones.
"""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
MONTH_DAY_FORMAT = "F j"
YEAR_MONTH_FORMAT = "F Y"
