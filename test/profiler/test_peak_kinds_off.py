"""PYTORCH_MEMLAB_KINDS=0: no global hooks while a profiled call runs, and
the records say no kinds and no modules (untold, every block would read as
input or temporary), while the peak itself is as before."""
import os
import subprocess
import sys
import textwrap

import pytorch_memlab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytorch_memlab.__file__)))

SCRIPT = textwrap.dedent('''
    import json, torch
    from pytorch_memlab import LineProfiler
    from pytorch_memlab.kinds import tagging

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)
    hooks = []

    def step():
        hooks.append(tagging.hooks_on())
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    prof = LineProfiler(step, device="cpu")
    with prof:
        for _ in range(2):
            step()
    peak = prof.stats()[0]["peak"]
    print(json.dumps({"hooks": hooks, "peak": peak}))
''')


def run(kinds):
    env = dict(os.environ, PYTHONPATH=ROOT, PYTORCH_MEMLAB_KINDS=kinds)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    return json.loads(proc.stdout.splitlines()[-1])


def test_kinds_off_registers_nothing_and_says_no_kinds():
    on, off = run("1"), run("0")
    assert on["hooks"] == [True, True] and off["hooks"] == [False, False]
    assert "by_kind" in on["peak"] and "by_module" in on["peak"]
    kind_keys = [k for k in off["peak"] if "kind" in k or "module" in k]
    assert kind_keys == [], kind_keys
    # the same program, the same peak: the kinds only describe it
    assert off["peak"]["bytes"] == on["peak"]["bytes"] == sum(on["peak"]["by_kind"].values())
