"""Execute a notebook headless with a real kernel and save it with outputs:
    python bench/run_notebook.py demo.ipynb OUT.ipynb
(the device run uses it to save demo.ipynb with GPU outputs)."""
import os
import sys
import time

import nbformat
from nbclient import NotebookClient


def main(source: str, target: str) -> int:
    notebook = nbformat.read(source, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(source))}})
    client.execute()
    nbformat.write(notebook, target)
    message = f"executed {len(notebook.cells)} cells in {time.perf_counter() - started:.1f} s"
    print(message)
    with open(os.path.join(os.path.dirname(target), "notebook.log"), "w") as log:
        log.write(message + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
