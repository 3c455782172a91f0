"""tempo-rl's code shared by the trainer and the engine side: what both speak, and nothing of either.

- blobs.py: the blob store, local or S3 behind one interface (the Python side of stores/blobstore.ts);
- blob_uri.py: blob store URIs, parsed, made canonical and compared;
- commit_records.py: a step committed in a blob store as its readers see it (the record, a checked
  download): the trainer writes these records, engines pull weights from them;
- weight_buckets.py: the bucket layout that hands the trainer's weights to engines on its host.

Both trainer and tempo_engine import this package; it imports neither, and they import not each other
(an engine process loads no trainer code, and the trainer none of vLLM's). `.importlinter` at the
repository root holds these rules and scripts/lint.sh checks them."""
