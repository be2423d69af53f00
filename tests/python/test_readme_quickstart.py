"""The README's quick start, run as written: it prints what it delivered and dropped, and the README says so."""
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def quick_start(text):
    """(the code block of the 'Quick start' section, the section's text after the block)."""
    section = text.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```(.*)", section, re.S)
    assert m, "the Quick start section has no ```python block"
    return m.group(1), m.group(2)


def test_readme_quick_start_prints_what_the_text_says(tmp_path):
    code, prose = quick_start(README.read_text(encoding="utf-8"))
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    printed = re.findall(r"delivered (\d+) of (\d+) documents, dropped (\d+)", p.stdout)
    assert len(printed) == 1, f"the quick start must print its counts once, printed:\n{p.stdout}"
    delivered, total, dropped = map(int, printed[0])
    # the README's text states the same line, and the numbers the code sets up
    stated = re.findall(r"prints `(delivered \d+ of \d+ documents, dropped \d+)`", prose)
    assert stated == [f"delivered {delivered} of {total} documents, dropped {dropped}"], (stated, p.stdout)
    n = int(re.search(r"docs = \[document\(i\) for i in range\((\d+)\)\]", code).group(1))
    copies = int(re.search(r"docs \+= docs\[:(\d+)\]", code).group(1))
    assert (delivered, total, dropped) == (n, n + copies, copies)  # every document passes, every copy is dropped
    assert delivered > 0
