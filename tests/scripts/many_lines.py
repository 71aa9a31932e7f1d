"""Print N numbered lines as fast as possible: checks that none is lost or reordered."""

import os
import sys

me = os.environ["PODCTL_PROCESS_ID"]
n = int(sys.argv[1])
out = sys.stdout
for i in range(n):
    out.write(f"{me} {i}\n")
out.flush()
