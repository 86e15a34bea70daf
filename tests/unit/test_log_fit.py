"""Event-log lines at 80 columns keep what on-call reads them for (issue 36)."""

from __future__ import annotations

import pytest

from swarm_tui.ui.log_fit import fit_line

RETRY_OTHER = "    0.4s RETRY  demo-00168 #1 rate_limited 429 on sk-…9f12#7728d7: other key +0.00s"
RETRY_WAIT = "    0.4s RETRY  demo-00168 #1 server 503 +4.00s"
QUOTA = ("   12.0s CTRL   sim key sk-…9f12#7728d7 deepseek-v3.2: quota spent: next call in "
         "8.0 s (~6000/min)")
STORM = ("   12.0s CTRL   sim key sk-…9f12#7728d7 deepseek-v3.2: 429 storm: cooling 4.0 s, "
         "then ≤ 2.0 calls/s")
FAIL = ("    1.3s FAIL   demo-00044 auth 401 Incorrect API key provided: check the key file "
        "and the gateway's logs")


@pytest.mark.parametrize(("line", "kept"), [
    (RETRY_OTHER, ["RETRY", "demo-00168", "#1", "rate_limited", "#7728d7", "other"]),
    (RETRY_WAIT, ["RETRY", "demo-00168", "server 503", "+4.00s"]),
    (QUOTA, ["CTRL", "#7728d7", "deepseek", "8.0 s"]),
    (STORM, ["CTRL", "#7728d7", "storm", "4.0 s"]),
    (FAIL, ["FAIL", "demo-00044", "auth 401"]),
])
def test_a_line_fits_the_80_column_log_and_keeps_its_key_and_wait(line, kept):
    fitted = fit_line(line, 52)  # the log panel's width in an 80-column terminal
    assert len(fitted) <= 52
    for part in kept:
        assert part in fitted, (part, fitted)


def test_a_cut_is_marked_and_a_line_that_fits_is_untouched():
    assert fit_line(FAIL, 52).endswith("…")
    assert fit_line(RETRY_WAIT, 200) == RETRY_WAIT
    assert fit_line("no time here, only words " * 4, 20) == "no time here, only …"
    for width in range(1, 60):  # never longer than asked, whatever the width
        assert len(fit_line(QUOTA, width)) <= width
