"""The whole lifecycle from Python, as in examples/notebook.ipynb, as a plain script.

    python examples/python_api.py          # on the local fake cloud, about a minute

Swap backend="fake" for backend="gcp" (with project=, zone=, bucket=) to do the same
on Google Cloud. The `with` blocks delete the slice and stop a fake cloud this script
started, also on an error or Ctrl-C.
"""

from pathlib import Path

import podctl

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "train_pjit.py"
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--vocab", "64",
        "--seq-len", "32", "--batch", "16", "--lr", "1e-2", "--checkpoint-every", "5"]

with podctl.connect(backend="fake") as cloud:
    print(cloud)
    with cloud.up("v5p-16", name="api-example") as slice_:
        print(slice_)
        run = slice_.run(TEMPLATE, args=[*TINY, "--steps", "10"])
        run.wait(check=True)
        steps = [m for m in run.metrics if m["kind"] == "step"]
        print(f"loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f} over {len(steps)} steps")
        print("checkpoints:", run.checkpoints())
        resumed = slice_.run(TEMPLATE, args=[*TINY, "--steps", "15"], resume=run)
        resumed.wait(check=True)
        first = next(m for m in resumed.metrics if m["kind"] == "step")
        print(f"resumed at step {first['step']}; checkpoints: {resumed.checkpoints()}")
        resumed.logs()  # host 0's lines, replayed from GCS
print("slice deleted, fake cloud stopped")
