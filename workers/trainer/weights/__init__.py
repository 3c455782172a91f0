"""New weights into the engines: the phased sync (sync.py) and the in-memory `ipc` transport (ipc.py)."""
