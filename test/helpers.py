"""Helpers shared by the test modules (pytest puts test/ on sys.path)."""
import inspect
import subprocess
import sys
import textwrap


def line_of(func, text):
    """Line number of the first source line of func containing text."""
    lines, start = inspect.getsourcelines(func)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def run_script(tmp_path, source, expect_rc=0, env=None, timeout=300):
    """Run source as a script file (so its lines have source text);
    (stdout, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == expect_rc, proc.stderr
    return proc.stdout, proc.stderr
