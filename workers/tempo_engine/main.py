"""The engine's entry point: vLLM's OpenAI-compatible server, started from a module that imports
nothing at its top level (`python -m tempo_engine.main ARGS`, supervise/engines.ts).

vLLM starts its engine core in a child process, and on CPU it forces the `spawn` start method; a
spawned child first re-imports its parent's main module. Started as `python -m
vllm.entrypoints.openai.api_server`, that is the whole HTTP server (FastAPI, the OpenAI protocol, the
renderers), which the engine core never uses. From this module the child imports only what the engine
core needs (docs/engines.md: measured there). compat.py rewrites the arguments for the vLLM release
installed and picks its launcher."""

if __name__ == "__main__":
    from tempo_engine.compat import run

    run()
