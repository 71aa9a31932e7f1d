"""The examples run as a user runs them: the notebook through a real Jupyter kernel
(nbclient + ipykernel; the kernel's own event loop is running all along), the plain
script with python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podctl.fake.admin import daemon
from podctl.base.settings import state_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def fake_stopped_at_end():
    yield
    where = state_dir() / "fake"
    current = daemon.status(where)
    if current.get("running"):
        from podctl.fake.admin.admin_client import FakeAdmin

        leftover = FakeAdmin(current["admin"]).resources()
        daemon.stop(where)
        pytest.fail(f"the example left the fake cloud running (holding {leftover})")


@pytest.mark.host_env
def test_notebook_executes(fake_stopped_at_end):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    from jupyter_client.manager import KernelManager

    # The test owns the kernel: nbclient's own cleanup after a cell timeout can fail
    # half-way and leave the kernel process running for the rest of the session.
    km = KernelManager(kernel_name="python3")
    client = nbclient.NotebookClient(notebook, km=km, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    try:
        client.execute()  # raises CellExecutionError, with the cell's traceback, on any failure
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    html = "\n".join(str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "<podctl.Slice notebook-demo v5p-16 READY" in text
    assert "succeeded" in text  # a status line, updated in place
    assert "<table>" in html  # the slice and checkpoint tables
    assert any("image/png" in o.get("data", {}) for o in outputs)  # run.plot(), drawn
    # One status line per wait, updated in place: no flood of progress output.
    assert sum(1 for o in outputs if o.get("output_type") == "display_data") <= 8


@pytest.mark.host_env
def test_python_api_script_runs(fake_stopped_at_end, tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "python_api.py")], capture_output=True,
                          text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checkpoints: [step 5, step 10]" in proc.stdout
    assert "resumed at step 11; checkpoints: [step 5, step 10, step 15]" in proc.stdout
    assert "slice deleted, fake cloud stopped" in proc.stdout


def test_readmes_python_example_says_what_the_template_does():
    """The Python API guide's block, as examples/python_api.py runs it (that test): the
    checkpoints it shows are the ones its arguments make, and every run it starts is
    waited for inside the `with` block, whose end deletes the slice under it."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "python-api.md").read_text()
    block = next(b.split("```", 1)[0] for b in guide.split("```python\n")[1:] if "podctl.connect" in b)
    assert '"--checkpoint-every", "10"' in block and "# [step 10, step 20]" in block
    inside = [line for line in block.splitlines() if line.startswith(" " * 8)]
    started = [line.split("=")[0].strip() for line in inside if "slice_.run(" in line]
    for name in started:
        assert any(line.strip().startswith(f"{name}.wait(") for line in inside), name


def test_tpu_vs_gpu_notebook_executes():
    """examples/tpu_vs_gpu.ipynb answers the buyer's question with podctl.plan: no cloud, a
    few seconds of arithmetic and one picture."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "tpu_vs_gpu.ipynb", as_version=4)
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    client = nbclient.NotebookClient(notebook, km=km, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXAMPLES)}})
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "v5p-4096" in text and "b200-2048" in text and "per M tokens" in text
    assert "is cheaper per token than" in text
    assert "smallest that fits: v5litepod-256 --num-slices 5" in text
    assert "time differs" in text  # the findings
    assert "staff" in text and "cheapest within 30 days:" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the frontier, drawn
