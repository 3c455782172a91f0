"""The policy model (policy.py) and its forward pass: packing, the LM head, attention, routing replay,
FSDP2 sharding, and the MoE expert layout vLLM reads."""
