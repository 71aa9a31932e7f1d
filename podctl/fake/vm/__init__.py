"""The fake's TPU VM hosts: SSH, metadata servers, boots, maintenance, sick hosts."""
