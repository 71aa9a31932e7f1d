import json
import sys

print("ARGS " + json.dumps(sys.argv[1:]), flush=True)
