"""A run's metrics log (``nbkit.records.runlog.MetricsLog``) holds whole rows only, whatever stops a write."""

import errno
import json
import resource

import pytest

from nbkit.records.runlog import MetricsLog


def test_a_file_size_limit_hit_while_writing_a_row_names_the_file_and_leaves_no_half_row(tmp_path):
    """Issue 73, 10: it said "File too large (no file named by the system)" and left half a row."""
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1, "reward": 0.5})
    before = log.path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
    try:
        with pytest.raises(OSError) as err:
            log.append({"step": 2, "reward": 0.25, "completion": "x" * 100})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert err.value.errno == errno.EFBIG and err.value.filename == str(log.path)
    assert f"writing {log.path}: the row of step 2 was not written" in str(err.value)
    assert log.path.read_bytes() == before and [json.loads(x) for x in before.splitlines()] == log.rows()


def test_a_row_holding_a_line_separator_reads_back_whole(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append({"step": 1, "completion": "a\u2028b"})
    log.path.write_bytes(log.path.read_bytes().replace(b"\\u2028", "\u2028".encode()))  # as ensure_ascii=False writes
    assert log.rows() == [{"step": 1, "completion": "a\u2028b"}]
