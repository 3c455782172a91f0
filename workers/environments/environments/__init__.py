"""tempo-rl's Python environment worker (`python -m environments`): verifiers and OpenEnv
environments served on a task queue of their own (docs/environments.md "Bring your own environment")."""
