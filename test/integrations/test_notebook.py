"""demo.ipynb runs headless, top to bottom, in a real IPython kernel (nbclient
+ ipykernel) started from this interpreter, and shows its tables.

The kernel is described by a kernelspec written to a temporary folder whose
argv is ``sys.executable``, so the notebook runs on the interpreter (and the
pytorch_memlab) under test, whatever kernels the machine has installed.

    python test/test_notebook.py --save

re-executes demo.ipynb and saves it with its outputs (on a GPU machine, GPU
outputs).
"""
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo.ipynb"
HEADER = "active_bytes  reserved_bytes  held at  active_bytes  count  line  code"


def kernel_manager_class(workdir: Path):
    """A kernel manager class whose 'python3' runs this interpreter, with the
    kernel's IPython profile (history) kept under ``workdir``.  nbclient makes
    the manager from it, so it also shuts the kernel down."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    kernels = workdir / "kernels"
    spec_dir = kernels / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (pytorch_memlab under test)",
        "language": "python",
        "env": {"IPYTHONDIR": str(workdir / "ipython")},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))

    class ThisInterpreter(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)

    return ThisInterpreter


def execute(path: Path, workdir: Path, timeout: int = 120):
    """The notebook at ``path``, executed in a fresh kernel with the repository
    root as working directory; a cell that raises stops it (CellExecutionError)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_manager_class=kernel_manager_class(workdir),
                            kernel_name="python3",
                            timeout=timeout, record_timing=False,
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    return nb


def text_of(cell) -> str:
    """Everything a code cell showed: streams, text/plain and text/html."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] in ("display_data", "execute_result"):
            parts.extend(output["data"].get(kind, "") for kind in ("text/plain", "text/html"))
        elif output["output_type"] == "error":
            parts.append("\n".join(output["traceback"]))
    return "\n".join(parts)


def cell_with(nb, source_start: str):
    return next(c for c in nb.cells if c.cell_type == "code"
                and c.source.lstrip().startswith(source_start))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """demo.ipynb executed once for the module, and whether CUDA is here."""
    for module in ("nbformat", "nbclient", "ipykernel", "jupyter_client", "IPython"):
        pytest.importorskip(module)
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_memlab._torchshim")
    workdir = tmp_path_factory.mktemp("notebook")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_RUNTIME_DIR", str(workdir / "runtime"))
        nb = execute(DEMO, workdir)
    return nb, torch.cuda.is_available()


def test_demo_notebook_runs_and_shows_tables(executed):
    nb, cuda = executed
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert all(o["output_type"] != "error" for o in cell.outputs), cell.source

    line_magic = cell_with(nb, "%mlrun -f train_step")
    shown = [o for o in line_magic.outputs if o["output_type"] == "display_data"]
    assert len(shown) == 1
    assert HEADER in shown[0]["data"]["text/plain"]
    assert "## train_step" in shown[0]["data"]["text/plain"]
    assert "<table" in shown[0]["data"]["text/html"]
    if not cuda:
        assert "CUDA is not available, profiling CPU tensor memory" in text_of(line_magic)

    cell_magic = text_of(cell_with(nb, "%%mlrun"))
    assert "## Net.forward" in cell_magic and "## train_step" in cell_magic
    assert "all.allocated" in cell_magic
    assert "return self.fc2(hidden)" in cell_magic

    returned = text_of(cell_with(nb, "prof = %mlrun -q -r"))
    assert " 1 " in returned and "hidden = self.fc1(x)" in returned
    assert HEADER not in returned                    # -q

    decorated = text_of(cell_with(nb, "from pytorch_memlab import clear_global_line_profiler"))
    assert "## features" in decorated and HEADER in decorated

    every = text_of(cell_with(nb, "from pytorch_memlab import profile_every"))
    assert every.count("## grow") == 2 and every.count(HEADER) == 2

    report = text_of(cell_with(nb, "from pytorch_memlab import MemReporter"))
    assert "fc1.weight" in report and "Adam.fc1.weight.exp_avg" in report
    assert "Total Tensors" in report

    courtesy = text_of(cell_with(nb, "from pytorch_memlab import Courtesy"))
    assert "same object: True" in courtesy and "training goes on" in courtesy


def test_saved_demo_has_outputs_and_no_errors():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(DEMO, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "save demo.ipynb executed"
    assert not any(o["output_type"] == "error" for c in code for o in c.outputs)
    # saved before the held-at-peak column or after it
    assert HEADER in text_of(cell_with(nb, "%mlrun -f train_step")) \
        or HEADER.replace("held at  ", "") in text_of(cell_with(nb, "%mlrun -f train_step"))


if __name__ == "__main__":
    import tempfile

    import nbformat

    if sys.argv[1:] != ["--save"]:
        sys.exit(f"usage: {sys.argv[0]} --save   (re-execute and save {DEMO.name})")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("JUPYTER_RUNTIME_DIR", os.path.join(tmp, "runtime"))
        executed_nb = execute(DEMO, Path(tmp))
    nbformat.write(executed_nb, DEMO)
    print(f"saved {DEMO} with outputs")
