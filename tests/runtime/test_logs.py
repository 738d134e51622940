"""``nbkit.runtime.logs.quiet`` when the log file cannot take more (issue 55 item 15): one line naming the log file and
what
to do, and the process's own output back afterwards (a failed flush used to leave stdout and stderr pointing at the
full log, so nothing after it was ever seen)."""

import subprocess
import sys
import textwrap


def test_a_log_stopped_by_a_file_size_limit_is_named_with_what_to_do_and_output_comes_back(tmp_path):
    script = textwrap.dedent(
        f"""
        import resource, sys
        from nbkit.runtime import logs
        from nbkit.cli.commands import guarded

        def main(argv):
            resource.setrlimit(resource.RLIMIT_FSIZE, (4000, resource.RLIM_INFINITY))  # `ulimit -f` of 4 kB
            try:
                with logs.quiet("noisy engine", path={str(tmp_path / "run.log")!r}):
                    for _ in range(200):
                        print("x" * 60)
            finally:
                print("output after the block", flush=True)
                print("errors after the block", file=sys.stderr, flush=True)
            return 0

        sys.exit(guarded(main, [], prog="nbkit train"))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert out.stdout == "output after the block\n"
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "errors after the block" and len(lines) == 2 and "Traceback" not in out.stderr, out.stderr
    said = lines[1]
    assert said.startswith("nbkit train: error: cannot write the log file ") and str(tmp_path / "run.log") in said
    assert "File too large" in said and "ulimit -f" in said and "[Errno" not in said
