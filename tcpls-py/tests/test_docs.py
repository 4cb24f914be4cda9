"""The Python example of docs/BINDINGS.md, run as the document says against a TCPLS echo server."""

import pathlib
import subprocess
import sys

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "BINDINGS.md"


def python_example():
    text = DOC.read_text()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_python_example_of_bindings_md(echo_server, certs, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(python_example())
    done = subprocess.run(
        [sys.executable, str(script), echo_server[0], str(certs[0])], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from Python\nhello from asyncio\n", done.stdout
    assert "path 0: rtt" in done.stderr and "as expected:" in done.stderr, done.stderr
