"""The blob store, local or S3 behind one interface (blobs.py), its URIs (uri.py), and checkpoints
committed in a remote store (checkpoints.py)."""
