"""tempo-rl's trainer: the Python Temporal worker that makes each GRPO step exactly once.

- contract.py: the payloads both sides share (docs/CONTRACTS.md);
- worker/: the process (`python -m trainer.worker`): its activities, the active/standby lock, the
  in-flight ledger, metric sinks, and data parallelism over a torchrun group;
- step/: one durable step (train_step.py), its GRPO maths, gradients, metrics, heartbeats, and the
  replay of light steps;
- model/: the policy (loading, vision inputs, logprobs), packing, the LM head, attention, routing
  replay, FSDP2 sharding and the MoE expert layout;
- checkpoint/: the checkpoint format and its atomic commit (atomic.py), and a sharded trainer's (sharded.py);
- stores/: checkpoints committed in a remote blob store (the store itself is tempo_common's);
- weights/: new weights into the engines (sync.py), by directory or in-memory buckets (ipc.py);
- generators/: the seeded model generators (`python -m trainer.generators.tiny_model` …): tools, not
  the trainer.

The engine side (vLLM's processes) is the sibling package tempo_engine, which the trainer does not
import; what both use is in tempo_common."""
