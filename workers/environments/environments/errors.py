"""The failure types the environment worker raises, by name: the episode workflow (workflows/episode.ts)
treats these as not retryable — retrying cannot install a package or undo a divergence."""

from temporalio.exceptions import ApplicationError

NOT_INSTALLED = "EnvironmentNotInstalled"
"""The environment's package or module is not installed in the environment worker's Python."""
BAD_ENVIRONMENT = "InvalidEnvironment"
"""The environment is not what its kind expects (wrong API version, wrong class, bad arguments)."""
DIVERGED = "EnvironmentDiverged"
"""A rerun environment asked for something other than what the history recorded."""
ENVIRONMENT_FAILED = "EnvironmentFailed"
"""The environment itself raised, or returned something that is not a result."""

NON_RETRYABLE = (NOT_INSTALLED, BAD_ENVIRONMENT, DIVERGED, ENVIRONMENT_FAILED)


def fail(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)
