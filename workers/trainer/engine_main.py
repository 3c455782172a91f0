"""The embedded engine's entry point: vLLM's OpenAI-compatible server (its launcher's `main`), started
from a module that imports nothing at its top level.

vLLM starts its engine core in a child process, and on CPU it forces the `spawn` start method; a
spawned child first re-imports its parent's main module. Started as `python -m
vllm.entrypoints.openai.api_server`, that is the whole HTTP server (FastAPI, the OpenAI protocol,
the renderers), which the engine core never uses. From this module the child imports only what the
engine core needs (lib/engines.ts, docs/engines.md: measured there)."""

if __name__ == "__main__":
    from vllm.entrypoints.launchers.api_server.entry import main

    main()
