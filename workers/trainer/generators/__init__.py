"""Model generators (tools, not the trainer): the seeded tiny Qwen3-VL (tiny_model.py), its MoE twin
(tiny_moe_model.py) and models of a public model's shape (shaped_model.py), each `python -m`."""
