"""Lines with characters str.splitlines() would break at, and terminal escapes."""
import sys

sys.stdout.buffer.write("a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h\r\n".encode())
sys.stdout.buffer.write(b"progress 1\rprogress 2\n\x1b[2J\x1b]0;owned\x07cleared?\n")
sys.stdout.flush()
