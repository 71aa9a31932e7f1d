"""A script that leaves children behind, as a data loader or a TensorBoard does: one in
its own process group and session, one that moved to a session of its own; both hold
the script's stdout. It prints, then exits 0, or with an argument lives that long."""

import subprocess
import sys
import time

subprocess.Popen(["sleep", "300"])
subprocess.Popen(["sleep", "301"], start_new_session=True)
print("children started", flush=True)
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
