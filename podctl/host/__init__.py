"""What runs on a TPU VM: the agent, the watcher and their shared modules.

Standard library only, Python 3.10; imports nothing else of podctl (an import
contract checks), because it is shipped to the hosts as files."""
