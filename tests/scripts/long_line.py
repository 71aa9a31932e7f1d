"""Print, on process 0, one line of N bytes (written in small pieces, as a slow writer
would), then a short line."""

import os
import sys

if os.environ["PODCTL_PROCESS_ID"] == "0":
    n = int(sys.argv[1])
    for start in range(0, n, 1000):
        sys.stdout.write("0123456789"[start // 1000 % 10] * min(1000, n - start))
    sys.stdout.write("\nafter\n")
    sys.stdout.flush()
